"""The operator CLI against a real Azurite: output, exit codes and what it leaves in the ledger, and
the watchdog enacting the intent it recorded."""

from __future__ import annotations

import asyncio
import io
import json
from datetime import timedelta

import pytest

from operator_cli.cli import main
from supervisor import operator
from supervisor.instances import InstanceAction
from supervisor.watchdog import run_tick
from supervisor.watchdog_model import Action
from tests.helpers.app import connection_args
from tests.helpers.durable import RecordingClient
from tests.helpers.rows import IS, NOW, make_step
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR
from workflow_core.ledger import StepStatus

S = StepStatus
LATER = NOW + timedelta(minutes=1)


def test_stalled_lists_overdue_steps_and_the_operators_inbox(cli, ledger):
    make_step(ledger, "wf-late", S.RUNNING, last_error=None)
    make_step(ledger, "wf-stuck", S.COMPENSATION_FAILED, last_error="refund service said no")
    make_step(ledger, "wf-fine", S.RUNNING, deadline=NOW + timedelta(hours=1))

    code, out, err = cli("stalled")
    assert code == 0, err
    overdue, attention = out.split("Needing an operator")
    assert "wf-late" in overdue and "create_storage" in overdue and "Running" in overdue
    assert "6m" in overdue  # how late
    assert "wf-stuck" in attention and "refund service said no" in attention
    assert "wf-fine" not in out

    code, out, _ = cli("stalled", "--output", "json")
    data = json.loads(out)
    assert [r["instance_id"] for r in data["overdue"]] == ["wf-late"]
    assert [r["instance_id"] for r in data["attention"]] == ["wf-stuck"]


def test_timeline_shows_steps_and_audit_trail(cli, ledger):
    make_step(ledger, "wf-tl", S.FAILED, last_error="quota exceeded")
    code, out, err = cli("timeline", "wf-tl")
    assert code == 0, err
    assert "Workflow instance wf-tl (provision-tenant)" in out
    assert "create_storage" in out and "Failed" in out and "quota exceeded" in out
    assert "Pending -> Dispatched" in out and "Running -> Failed" in out
    assert "scheduler" in out and "worker" in out

    code, out, _ = cli("timeline", "wf-tl", "-o", "json")
    data = json.loads(out)
    assert data["steps"][0]["status"] == "Failed"
    assert [a["to_status"] for a in data["audit"]][-1] == "Failed"


def test_unknown_instance_and_step_are_clear_errors(cli, ledger):
    make_step(ledger, "wf-known", S.FAILED)
    code, out, err = cli("timeline", "wf-nope")
    assert code == 2 and out == "" and "no workflow instance 'wf-nope'" in err

    code, _, err = cli("retry", "wf-nope", "create_storage", "--reason", "x", "--yes")
    assert code == 2 and "no workflow instance 'wf-nope'" in err

    code, _, err = cli("skip", "wf-known", "nope", "--reason", "x", "--yes")
    assert code == 2 and "has no step 'nope'" in err and "its steps: create_storage" in err

    code, _, err = cli("retry", "bad/id", "x", "--reason", "x", "--yes")
    assert code == 2 and "forbid" in err


def test_illegal_move_prints_the_allowed_moves(cli, ledger):
    make_step(ledger, "wf-done", S.SUCCEEDED)
    code, _, err = cli("retry", "wf-done", "create_storage", "--reason", "again", "--yes")
    assert code == 2
    assert "cannot retry step 'create_storage'" in err and "it is Succeeded" in err
    assert "Allowed moves from Succeeded: Compensating (compensate)" in err
    assert err.lower().count("allowed moves") == 1, err  # said once, not twice
    assert ledger.get("wf-done", "create_storage").status is S.SUCCEEDED

    make_step(ledger, "wf-over", S.FAILED)
    ledger.transition(ledger.get("wf-over", "create_storage"), S.SKIPPED, actor="test")
    code, _, err = cli("compensate", "wf-over", "create_storage", "--reason", "r", "--yes")
    assert code == 2 and "none (terminal status)" in err


def test_reason_is_required_and_confirmation_is_asked(cli, ledger):
    make_step(ledger, "wf-ask", S.FAILED)
    code, _, err = cli("retry", "wf-ask", "create_storage")  # --reason is required
    assert code == 2 and "error: Missing option '--reason'" in err

    code, out, _ = cli("retry", "wf-ask", "create_storage", "--reason", "fixed", answer="n")
    assert code == 1 and "Failed -> Retrying" in out and "aborted: nothing changed" in out
    assert ledger.get("wf-ask", "create_storage").status is S.FAILED

    code, out, _ = cli("retry", "wf-ask", "create_storage", "--reason", "fixed", answer="y")
    assert code == 0 and "is now Retrying" in out and "as operator:alice" in out
    assert ledger.get("wf-ask", "create_storage").owner == "operator:alice"


def test_retry_is_enacted_by_the_next_watchdog_tick(cli, ledger, services):
    make_step(ledger, "wf-retry", S.FAILED, deadline=LATER + timedelta(hours=1), last_error="flaky")
    code, out, err = cli("retry", "wf-retry", "create_storage", "--reason", "dns fixed", "--yes")
    assert code == 0, err
    assert "is now Retrying (was Failed); the watchdog acts on it at its next tick" in out

    record = ledger.get("wf-retry", "create_storage")
    assert (record.status, record.owner, record.deadline) == (S.RETRYING, "operator:alice", LATER)
    (move,) = [a for a in ledger.audit_trail("wf-retry") if a.actor == "operator:alice"]
    assert (move.from_status, move.to_status) == ("Failed", "Retrying")
    assert move.reason == "operator retry: dns fixed"

    client = RecordingClient({"wf-retry": "Running"})
    report = asyncio.run(run_tick(client, services, now=LATER + timedelta(seconds=1)))
    assert report.count(Action.FAIL_STEP) == 1  # no grace for an operator's request
    ((_, name, payload),) = client.events
    assert name == "result:create_storage:1" and payload["error"] == "flaky"


def test_compensate_is_enacted_by_the_next_watchdog_tick(cli, ledger, services):
    make_step(ledger, "wf-undo", S.SUCCEEDED, instance=IS.SUCCEEDED)  # its workflow had finished
    code, out, err = cli("compensate", "wf-undo", "create_storage", "--reason", "customer left", "--yes")
    assert code == 0, err
    assert "starts the compensation orchestration" in out
    assert ledger.get("wf-undo", "create_storage").status is S.COMPENSATING

    client = RecordingClient({"wf-undo": "Completed"})
    report = asyncio.run(run_tick(client, services, now=LATER + timedelta(seconds=1)))
    assert report.count(Action.START_COMPENSATION) == 1
    ((name, instance, payload),) = client.starts
    assert (name, instance) == (COMPENSATION_ORCHESTRATOR, "wf-undo:compensation")
    assert "requested by operator:" in payload["reason"]


def test_retry_of_a_failed_compensation_restarts_it(cli, ledger, services):
    make_step(ledger, "wf-cf", S.COMPENSATION_FAILED)
    code, _, err = cli("retry", "wf-cf", "create_storage", "--reason", "refunds back up", "--yes")
    assert code == 0, err
    assert ledger.get("wf-cf", "create_storage").status is S.COMPENSATING
    assert ledger.needing_attention() == []

    client = RecordingClient({"wf-cf": "Completed", "wf-cf:compensation": "Completed"})
    report = asyncio.run(run_tick(client, services, now=LATER + timedelta(seconds=1)))
    assert report.count(InstanceAction.RESTART_COMPENSATION) == 1  # the instance record decided
    ((_, _, _, detail),) = report.instance_decisions
    assert "requested by operator:alice" in detail and "wf-cf:compensation started" in detail
    record = ledger.get_instance("wf-cf")  # the operator answered the flag and renewed the budget
    assert record.status is IS.COMPENSATING and not record.needs_attention


def test_skip_takes_the_step_off_the_worklist(cli, ledger):
    make_step(ledger, "wf-skip", S.TIMED_OUT)
    code, _, err = cli("skip", "wf-skip", "create_storage", "--reason", "done by hand", "--yes")
    assert code == 0, err
    record = ledger.get("wf-skip", "create_storage")
    assert record.status is S.SKIPPED and record.index_key is None
    assert ledger.overdue(LATER + timedelta(days=1)) == []


def test_connection_string_option_and_missing_settings(app_env, ledger, monkeypatch, tmp_path):
    make_step(ledger, "wf-conn", S.RUNNING)
    for name in ("AzureWebJobsStorage", "LEDGER_TABLE_NAME", "DEADLINE_INDEX_TABLE_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no local.settings.json here, nor in the (patched) project root
    monkeypatch.setattr("operator_cli.session.PROJECT_ROOT", tmp_path)
    out, err = io.StringIO(), io.StringIO()
    assert main(["stalled"], stdout=out, stderr=err) == 2
    assert "no storage settings" in err.getvalue() and "--connection-string" in err.getvalue()

    out = io.StringIO()
    argv = [*connection_args(app_env), "timeline", "wf-conn"]
    assert main(argv, stdout=out, stderr=io.StringIO()) == 0
    assert "wf-conn" in out.getvalue()


def test_operator_functions_need_a_user_and_a_reason(ledger):
    make_step(ledger, "wf-op", S.FAILED)
    with pytest.raises(operator.OperatorError, match="reason is required"):
        operator.retry_step(ledger, "wf-op", "create_storage", user="al", reason="  ")
    with pytest.raises(operator.OperatorError, match="user name is required"):
        operator.skip_step(ledger, "wf-op", "create_storage", user="", reason="r")
    stalled = operator.list_stalled(ledger, now=NOW)
    assert [r.instance_id for r in stalled.overdue] == ["wf-op"] and stalled.attention == []


@pytest.mark.parametrize("command", ["timeline", "show", "retry", "skip", "compensate", "resume"])
def test_an_id_with_a_trailing_newline_reaches_no_instance(cli, ledger, command):
    # The id rule is a full match: "victim\n" is not "victim" (observation 3 of the operator issue).
    make_step(ledger, "victim", S.FAILED)
    args = {"retry": ["create_storage"], "skip": ["create_storage"]}.get(command, [])
    extra = ["--reason", "x", "--yes"] if command not in ("timeline", "show") else []

    for bad in (["victim\n", *args], ["victim", "create_storage\n"] if args else None):
        if bad is None:
            continue
        code, out, err = cli(command, *bad, *extra)
        assert code == 2, (command, bad, out, err)
    assert ledger.get("victim", "create_storage").status is S.FAILED
    assert not [a for a in ledger.audit_trail("victim") if a.actor.startswith("operator:")]
