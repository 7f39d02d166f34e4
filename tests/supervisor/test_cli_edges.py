"""The CLI's edge cases: settings from local.settings.json, a malformed connection string, tables it
never creates, --output json, and help without any settings."""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

from azure.data.tables import TableServiceClient

from operator_cli.cli import EXIT_STORAGE, EXIT_USAGE, main
from tests.helpers.app import connection_args
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), stdout=out, stderr=err), out.getvalue(), err.getvalue()


def no_settings(monkeypatch, folder):
    for name in ("AzureWebJobsStorage", "LEDGER_TABLE_NAME", "DEADLINE_INDEX_TABLE_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(folder)
    monkeypatch.setattr("operator_cli.session.PROJECT_ROOT", folder)


def test_reads_local_settings_json_when_the_environment_has_no_storage(
    app_env, ledger, monkeypatch, tmp_path
):
    make_step(ledger, "cli-local", StepStatus.FAILED)
    no_settings(monkeypatch, tmp_path)
    values = {
        k: app_env[k] for k in ("AzureWebJobsStorage", "LEDGER_TABLE_NAME", "DEADLINE_INDEX_TABLE_NAME")
    }
    (tmp_path / "local.settings.json").write_text(json.dumps({"IsEncrypted": False, "Values": values}))

    code, out, err = run_cli("timeline", "cli-local", "--output", "json")

    assert code == 0, err
    assert json.loads(out)["steps"][0]["status"] == "Failed"


def test_a_malformed_connection_string_is_one_error_line(monkeypatch, tmp_path):
    no_settings(monkeypatch, tmp_path)
    code, out, err = run_cli("--connection-string", "AccountName=;nonsense", "stalled")
    assert code == EXIT_USAGE and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and "malformed" in err
    assert "Traceback" not in err


def test_read_only_commands_never_create_tables(app_env, monkeypatch, tmp_path, unique_name):
    ledger_table, index_table = unique_name("Nope"), unique_name("Nope")
    for argv in (("stalled",), ("timeline", "x-1"), ("list",)):
        code, _, err = run_cli(*connection_args(app_env, ledger_table, index_table), *argv)
        assert code == EXIT_STORAGE and "do not exist" in err, (argv, err)
    service = TableServiceClient.from_connection_string(app_env["AzureWebJobsStorage"])
    names = {t.name for t in service.list_tables()}
    assert ledger_table not in names and index_table not in names


def test_help_needs_no_settings(monkeypatch, tmp_path, capsys):
    no_settings(monkeypatch, tmp_path)
    for argv in (("--help",), ("list", "--help"), ("retry", "--help")):
        code, _, _ = run_cli(*argv)
        assert code == 0 and "Usage: sas" in capsys.readouterr().out, argv  # click prints help itself


def test_unknown_option_is_a_usage_error(monkeypatch, tmp_path):
    no_settings(monkeypatch, tmp_path)
    code, _, err = run_cli("list", "--colour", "red")
    assert code == EXIT_USAGE and "error: No such option '--colour'" in err


def test_sas_is_the_installed_console_script():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["sas"] == "operator_cli.cli:run"


def test_versions_with_a_broken_definition_names_the_file(app_env, ledger, broken_definitions):
    """``sas versions`` once answered "known workflows: none" when one YAML in workflows/ was broken,
    leaving the operator to guess why."""
    code, out, err = run_cli(*connection_args(app_env), "versions", "provision-tenant")
    assert code == EXIT_USAGE and out == "" and "Traceback" not in err, err
    assert broken_definitions in err and "known workflows: none" not in err


def test_help_lists_every_exit_code_a_command_uses(capsys):
    """``replay-check`` exits 4; ``sas --help`` once listed 0-3 only."""
    from operator_cli.workflow_commands import EXIT_NONDETERMINISTIC

    code, out, _ = run_cli("--help")
    text = " ".join((out + capsys.readouterr().out).split())
    assert code == 0
    for n in (0, 1, EXIT_USAGE, EXIT_STORAGE, EXIT_NONDETERMINISTIC):
        assert f"{n} " in text.split("Exit codes:", 1)[1], n
    assert f"{EXIT_NONDETERMINISTIC} a recorded history no longer replays" in text


HOSTILE = "[/]\x1b[2J\u202e[link=https://e.x]c[/link] :skull:"  # shown whole: under the 60-char cut


def test_ledger_text_is_shown_as_data_never_as_markup_or_terminal_codes(app_env, ledger):
    """A step error (text an agent or a caller controls) holding rich markup, an emoji code, a
    screen-clearing ESC sequence and a bidi override: every command that shows
    it runs, shows the markup literally, and sends no control character to the terminal (``[/]``
    once crashed ``sas stalled`` and ``timeline`` for every operator)."""
    make_step(ledger, "cli-hostile", StepStatus.FAILED, last_error=HOSTILE)
    for argv in (("stalled",), ("timeline", "cli-hostile"), ("list",)):
        code, out, err = run_cli(*connection_args(app_env), *argv)
        assert code == 0, (argv, err)
        assert "\x1b" not in out and "\u202e" not in out, argv
        if argv[0] == "timeline":  # the one that shows step errors
            assert "[/]" in out and "[link=https://e.x]c[/link]" in out and ":skull:" in out, out
            assert "\\x1b[2J" in out and "\\u202e" in out, out
