"""Non-deterministic changes the replay check must catch (`sas replay-check` exits 4), each naming
the history and the episode where the code diverges from the recorded run.

Each is a change that breaks instances in flight: the extension matches each new action to the
recorded one by position, kind and name, and results come back by that position, so a reordered
group hands one member's recorded result to another. Most are applied in memory (monkeypatch:
fast); one is applied to a copy of the code on disk and checked by ``python -m operator_cli
replay-check`` run from that copy, the way an operator checks new code before deploying it.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import azure.durable_functions as df

from devtools.replay_check import check_file
from operator_cli.cli import main as sas
from operator_cli.workflow_commands import EXIT_NONDETERMINISTIC

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "replay_corpus"
FILES = sorted(CORPUS.glob("*.json"))


def broken() -> list[str]:
    """``label: first problem`` of each recording that no longer replays."""
    return [f"{r.recording.label}: {r.problems[0]}" for path in FILES for r in check_file(path) if not r.ok]


def sas_replay_check(capsys) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = sas(["replay-check", *map(str, FILES)], stdout=out, stderr=err)
    return code, out.getvalue() + err.getvalue() + capsys.readouterr().out


def test_the_corpus_replays_unchanged(capsys):
    """The control: without a change, nothing is flagged (or the tests below prove nothing)."""
    assert broken() == []
    assert sas_replay_check(capsys)[0] == 0


# The changes, applied with monkeypatch; also replayed against live rows (test_replay_live.py).


def reverse_parallel_groups(monkeypatch) -> None:
    from orchestrators import workflow

    original = workflow._run_group

    def reversed_group(context, definition, stage, *args, **kwargs):
        return original(context, definition, tuple(reversed(stage)), *args, **kwargs)

    monkeypatch.setattr(workflow, "_run_group", reversed_group)


def note_in_dispatch_input(monkeypatch) -> None:
    from orchestrators import attempts

    original = attempts.call_activity

    def with_a_note(context, activity, payload, *args, **kwargs):
        if activity == "dispatch_step" and isinstance(payload, dict):
            payload = {**payload, "note": "added by a code change"}
        return original(context, activity, payload, *args, **kwargs)

    monkeypatch.setattr(attempts, "call_activity", with_a_note)


def timers_a_second_later(monkeypatch) -> None:
    real = df.DurableOrchestrationContext.create_timer
    monkeypatch.setattr(
        df.DurableOrchestrationContext,
        "create_timer",
        lambda self, fire_at: real(self, fire_at + timedelta(seconds=1)),
    )


def waits_without_the_attempt(monkeypatch) -> None:
    from orchestrators import attempts

    real = attempts.result_event_name
    monkeypatch.setattr(
        attempts, "result_event_name", lambda step_id, attempt, kind="work": real(step_id, 1, kind)
    )


def test_a_parallel_group_started_in_reverse_order_is_caught(monkeypatch, capsys):
    reverse_parallel_groups(monkeypatch)
    problems = broken()
    assert any("parallel-group.json" in p and ": episode " in p and "action #" in p for p in problems), (
        problems
    )
    assert any("sub-orchestration 'step_orchestrator'" in p for p in problems), problems
    code, out = sas_replay_check(capsys)
    assert code == EXIT_NONDETERMINISTIC and "parallel-group.json" in out and "episode" in out, out


def test_history_checkpoint_every_ignored_is_caught(monkeypatch, capsys):
    """Never continue as new: a generation that ended with ContinueAsNew now runs on."""
    from orchestrators import workflow

    monkeypatch.setattr(workflow, "should_checkpoint", lambda *args, **kwargs: False)
    problems = broken()
    first = [p for p in problems if "continue-as-new.json" in p and "(generation 1)" in p]
    assert first and "episode" in first[0] and "continue-as-new" in first[0], problems
    code, out = sas_replay_check(capsys)
    assert code == EXIT_NONDETERMINISTIC and "continue-as-new.json" in out and "generation 1" in out, out
    assert "episode" in out, out


def test_a_different_activity_input_is_caught(monkeypatch):
    """Same activity, another input: the recorded result belongs to another call."""
    note_in_dispatch_input(monkeypatch)
    succeed = [p for p in broken() if p.startswith("succeed.json")]
    assert succeed and "episode 1: action #0 differs (.note: " in succeed[0], succeed


def test_a_timer_that_fires_at_another_time_is_caught(monkeypatch):
    """A deadline computed one second later: the recorded timer is another timer."""
    timers_a_second_later(monkeypatch)
    succeed = [p for p in broken() if p.startswith("succeed.json")]
    assert succeed and "episode 2: action #1 differs" in succeed[0] and "recorded: timer" in succeed[0]


def test_a_wait_that_would_consume_a_late_result_is_caught(monkeypatch, capsys):
    """Attempt 2 waits for attempt 1's event name (the attempt dropped from the name): the late
    result of attempt 1, which the recorded scheduler ignored, now ends attempt 2's wait. Caught in
    the very episode in which the late event arrived, where the recorded run took no action."""
    waits_without_the_attempt(monkeypatch)
    late = next(p for p in broken() if p.startswith("late-result-after-retry.json"))
    (recording,) = check_file(CORPUS / "late-result-after-retry.json")
    history = recording.recording.history
    starts = [i for i, e in enumerate(history) if e["EventType"] == 12]
    arrived = next(i for i, e in enumerate(history) if e.get("Name") == "result:register_dns:1")
    episode = sum(1 for s in starts if s < arrived)
    assert f": episode {episode}: the current code takes action #" in late, late
    assert "where the recorded run took none" in late, late
    code, out = sas_replay_check(capsys)
    assert code == EXIT_NONDETERMINISTIC and "late-result-after-retry.json" in out, out
    assert f"episode {episode}" in out, out


def copy_of_the_app(tmp_path: Path) -> Path:
    """The code and definitions as deployed, in a folder of their own, to change on disk."""
    copy = tmp_path / "app"
    for folder in ("workflow_core", "activities", "orchestrators", "supervisor", "api", "operator_cli"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("devtools", "workflows"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def replay_check_in(copy: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m operator_cli replay-check`` run from ``copy`` (default: on the corpus files)."""
    return subprocess.run(
        [sys.executable, "-m", "operator_cli", "replay-check", *(args or map(str, FILES))],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
    )


def swap_parallel_members(copy: Path) -> Any:
    """onboard-tenant's two parallel members swapped in the YAML of ``copy``; the new definition."""
    from workflow_core.workflows.loader import parse_workflow

    target = copy / "workflows" / "onboard-tenant.yaml"
    text = target.read_text()
    first = text.index("      - id: register_portal_dns")
    second = text.index("      - id: register_files_dns")
    end = text.index("  - id: send_welcome")
    portal, files = text[first:second].rstrip("\n"), text[second:end].rstrip("\n")
    target.write_text(text[:first] + files + "\n\n" + portal + "\n\n" + text[end:])
    new = parse_workflow(target.read_text(), str(target))
    assert [s.id for s in new.steps][1:3] == ["register_files_dns", "register_portal_dns"]  # really swapped
    return new


def test_parallel_members_swapped_in_the_yaml_cannot_break_a_pinned_instance(tmp_path):
    """The row of the issue's table, for the pinned instances every run now is: the two members of
    onboard-tenant's group swapped in the YAML of a copy. Nothing to catch: every recorded instance
    carries its definition (and the version that hashes it) in its input and replays on that, so each
    member still gets its own recorded result; the swapped YAML is another version, which only new
    instances take. ``sas replay-check`` exits 0, and says so (docs/scheduler.md)."""
    from workflow_core.workflows.store import version_of

    copy = copy_of_the_app(tmp_path)
    new = swap_parallel_members(copy)

    recording = check_file(CORPUS / "parallel-group.json")[0]
    pinned = json.loads(recording.recording.input)
    members = next(s["parallel"] for s in pinned["definition"]["steps"] if "parallel" in s)
    assert [m["id"] for m in members] == ["register_portal_dns", "register_files_dns"]
    assert version_of(new) != pinned["version"]  # the swap is another version: never this instance's

    done = replay_check_in(copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok  parallel-group.json[0]" in done.stdout, done.stdout


def test_an_activity_added_on_disk_fails_sas_replay_check_with_exit_4(tmp_path):
    """The operator's way: a copy of the code where the scheduler calls one more activity before the
    settle, and ``python -m operator_cli replay-check`` run from that copy."""
    copy = copy_of_the_app(tmp_path)
    target = copy / "orchestrators" / "shortcuts.py"
    settle = "settled = yield call_activity(self.context, ACTIVITY_SETTLE_INSTANCE, settle)"
    text = target.read_text()
    assert text.count(settle) == 1
    target.write_text(
        text.replace(settle, 'yield call_activity(self.context, "audit_settle", {})\n            ' + settle)
    )
    done = replay_check_in(copy)
    assert done.returncode == EXIT_NONDETERMINISTIC, done.stdout + done.stderr
    assert "succeed.json" in done.stdout and "episode" in done.stdout and "audit_settle" in done.stdout
