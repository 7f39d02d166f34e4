"""The determinism guard: the committed replay corpus replays on the current orchestrators, and the
check fails when an orchestrator changes in a way that would break instances in flight.

The corpus (``tests/replay_corpus/``) is recorded from the durable test host by
``python -m devtools.replay_corpus``; re-recording must reproduce the same actions.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.durable_host.history import parse_time
from devtools.replay_check import (
    app_orchestrators,
    check_file,
    episodes_of,
    load_recordings,
    retry_events,
)
from devtools.replay_corpus import SCENARIOS, record_scenario
from operator_cli.cli import main as sas
from operator_cli.workflow_commands import EXIT_NONDETERMINISTIC
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR, STEP_ORCHESTRATOR, WORKFLOW_ORCHESTRATOR

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "replay_corpus"
FILES = sorted(CORPUS.glob("*.json"))
DECISIONS = {4: "activity", 7: "sub-orchestration", 10: "timer", 16: "continue-as-new"}


def _actions(history: list[dict]) -> list[tuple[str, str | None]]:
    return [(DECISIONS[e["EventType"]], e.get("Name")) for e in history if e["EventType"] in DECISIONS]


def test_the_corpus_covers_every_orchestrator_compensation_groups_and_continue_as_new():
    recordings = [r for path in FILES for r in load_recordings(path)]
    assert {p.stem for p in FILES} == set(SCENARIOS)
    assert {r.orchestrator for r in recordings} == {
        WORKFLOW_ORCHESTRATOR,
        STEP_ORCHESTRATOR,
        COMPENSATION_ORCHESTRATOR,
    }
    inputs = [json.loads(r.input) for r in recordings if r.orchestrator == WORKFLOW_ORCHESTRATOR]
    assert any((i.get("state") or {}).get("generation", 0) > 0 for i in inputs)  # a continued generation
    # ...and every generation before it, each ending as the framework ends it (ContinueAsNew)
    # failures with the retry policy's timers, duplicate result events, a resumed instance
    assert any(retry_events(r.history) for r in recordings)
    assert any(
        len(names := [e["Name"] for e in r.history if e["EventType"] == 15]) > len(set(names))
        for r in recordings
    )
    assert any(r.instance_id == "corpus-resumed" for r in recordings)
    # a timer and an event among the new events of one episode
    assert any(
        {11, 15} <= {e["EventType"] for e in r.history[start:end]}
        for r in recordings
        for start, end in episodes_of(r.history)
    )
    # a late result: attempt 1's event arrives once attempt 2 was scheduled, and starts nothing
    late = next(r for r in recordings if r.instance_id == "corpus-late-result")
    names = [e.get("Name") for e in late.history if e["EventType"] in (4, 15)]
    assert names.index("result:register_dns:1") > names.index("schedule_retry")
    [(start, end)] = [
        (s, e)
        for s, e in episodes_of(late.history)
        if any(x.get("Name") == "result:register_dns:1" for x in late.history[s:e])
    ]
    assert not [e for e in late.history[start:end] if e["EventType"] in (4, 7, 10)]
    chain = [r for r in recordings if r.instance_id == "corpus-chain"]
    assert [r.generation for r in chain] == list(range(1, len(chain) + 1)) and len(chain) >= 2
    assert all(r.history[-1]["EventType"] == 16 for r in chain[:-1])
    assert all(i["version"].startswith(i["workflow"] + "@") and i["definition"] for i in inputs)  # pinned


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_the_committed_corpus_replays_on_the_current_orchestrators(path):
    results = check_file(path)
    assert results
    for result in results:
        assert result.ok, (result.recording.label, result.problems)
        history = result.recording.history  # retry timers and re-scheduled calls are not actions
        assert result.episodes > 1 and result.actions == len(_actions(history)) - len(retry_events(history))


def test_results_the_handler_confirmed_cost_no_verify_read():
    """The fresh corpus: a result event the handler confirmed (it carries the dispatch's token) is
    taken as the ledger's verdict, so a run where every reply was confirmed never calls verify_result."""
    succeed = [a for r in load_recordings(CORPUS / "succeed.json") for a in _actions(r.history)]
    assert ("activity", "dispatch_step") in succeed
    assert ("activity", "verify_result") not in succeed


def test_an_activity_call_inserted_before_another_fails_the_check(monkeypatch):
    """Before every step the scheduler now reserves a quota: a new activity in front of dispatch_step.
    Every recorded workflow run took dispatch_step there, so none of them replays."""
    from orchestrators import shortcuts

    original = shortcuts.run_step

    def run_step_with_quota(context, run, status):
        yield context.call_activity("reserve_quota", {"step_id": run.step_id})
        return (yield from original(context, run, status))

    monkeypatch.setattr(shortcuts, "run_step", run_step_with_quota)
    results = [r for path in FILES for r in check_file(path)]
    broken = [r for r in results if not r.ok]
    assert {r.recording.orchestrator for r in broken} == {WORKFLOW_ORCHESTRATOR}
    assert all(r.ok for r in results if r.recording.orchestrator != WORKFLOW_ORCHESTRATOR)
    succeed = next(r for r in broken if r.recording.instance_id == "corpus-succeed")
    [problem] = succeed.problems
    assert problem.startswith("episode 1: action #0 differs\n    recorded: activity 'dispatch_step' [")
    assert '\n    current:  activity \'reserve_quota\' [{"step_id": "create_storage"}]' in problem


def test_a_dropped_action_and_a_run_that_no_longer_finishes_fail_the_check(monkeypatch):
    from orchestrators import shortcuts

    def never_settles(context, activity, payload, *args, **kwargs):
        if activity == "settle_instance":
            return context.wait_for_external_event("never")  # no activity where one was recorded
        return original(context, activity, payload, *args, **kwargs)

    original = shortcuts.call_activity
    monkeypatch.setattr(shortcuts, "call_activity", never_settles)
    (result,) = check_file(CORPUS / "succeed.json")
    assert not result.ok
    # 3 x (dispatch_step, timer) = 6 actions (the starter created the steps); settle_instance was 7th
    assert "the current code takes only 6" in result.problems[0]
    assert "next recorded: activity 'settle_instance'" in result.problems[0]


def test_a_deterministic_change_still_replays(monkeypatch):
    """Custom status, logging, output wording: nothing the history records, nothing the check flags."""
    from orchestrators import workflow

    original = workflow.Status.__call__

    def louder(self, phase, attempt=None, until=None):
        original(self, phase.upper(), attempt, until)

    monkeypatch.setattr(workflow.Status, "__call__", louder)
    assert all(r.ok for path in FILES for r in check_file(path))


def test_sas_replay_check_exit_codes(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert sas(["replay-check", *map(str, FILES)], stdout=out, stderr=err) == 0, err.getvalue()
    assert "14 of 14 recording(s) replay on the current code" in out.getvalue()

    tampered = json.loads((CORPUS / "succeed.json").read_text())
    history = tampered["recordings"][0]["history"]
    first_dispatch = next(e for e in history if e["EventType"] == 4 and e["Name"] == "dispatch_step")
    first_dispatch["Name"] = "dispatch_step_v0"  # as if an older orchestrator had called another activity
    (tmp_path / "old.json").write_text(json.dumps(tampered))
    out = io.StringIO()
    code = sas(["replay-check", str(tmp_path / "old.json"), "-o", "json"], stdout=out, stderr=io.StringIO())
    assert code == EXIT_NONDETERMINISTIC
    report = json.loads(out.getvalue())
    assert report["ok"] is False and "dispatch_step_v0" in report["recordings"][0]["problems"][0]

    (tmp_path / "junk.json").write_text('{"history": 3}')
    err = io.StringIO()
    assert sas(["replay-check", str(tmp_path / "junk.json")], stdout=io.StringIO(), stderr=err) == 2
    assert "'history' must be a list" in err.getvalue()


def test_python_m_operator_cli_replay_check_runs_as_documented():
    done = subprocess.run(
        [sys.executable, "-m", "operator_cli", "replay-check", str(CORPUS / "succeed.json")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ok  succeed.json" in done.stdout


def test_re_recording_reproduces_the_committed_corpus(azurite, tmp_path):
    """The recorder is the corpus's source: what it records now takes the same actions as what is
    committed (re-record with ``python -m devtools.replay_corpus`` after a deliberate change)."""
    orchestrators = app_orchestrators()
    for name in SCENARIOS:
        fresh = record_scenario(name, azurite)
        assert f"{ROOT}/" not in json.dumps(fresh)  # no stack names where it was recorded
        committed = json.loads((CORPUS / f"{name}.json").read_text())
        assert [r["instanceId"] for r in fresh["recordings"]] == [
            r["instanceId"] for r in committed["recordings"]
        ]
        for new, old in zip(fresh["recordings"], committed["recordings"], strict=True):
            assert _actions(new["history"]) == _actions(old["history"]), (name, new["instanceId"])
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(fresh))
        assert all(r.ok for r in check_file(path, orchestrators))


def _doc_rows() -> tuple[dict[int, list[str]], dict[int, bool]]:
    """The history table of docs/durable-test-host.md: each event type's fields and stored IsPlayed."""
    doc = (ROOT / "docs" / "durable-test-host.md").read_text()
    fields: dict[int, list[str]] = {}
    played: dict[int, bool] = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 4 and cells[1].replace(" / ", "").isdigit():
            numbers = [int(n) for n in cells[1].split(" / ")]
            flags = cells[3].split(" / ")
            for i, number in enumerate(numbers):
                fields[number] = re.findall(r"`([A-Z][A-Za-z]+)`", cells[2])
                played[number] = flags[min(i, len(flags) - 1)] == "true"
    return fields, played


def test_the_corpus_is_in_the_shape_the_docs_give_for_the_extensions_histories():
    """Field sets, time format, IsPlayed and time progress as docs/durable-test-host.md says the
    extension writes them."""
    rows, played = _doc_rows()
    assert rows[0] == [
        "Name",
        "Input",
        "Version",
        "OrchestrationInstance",
        "ParentInstance",
        "Tags",
        "ParentTraceContext",
        "Generation",
    ]
    assert played[12] is False and played[4] is False and played[15] is True and played[11] is True
    time = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{0,6}[1-9])?Z")  # trailing zeros trimmed
    seen = set()
    for path in FILES:
        for recording in load_recordings(path):
            starts = []
            for event in recording.history:
                kind = event["EventType"]
                seen.add(kind)
                assert {"EventType", "EventId", "IsPlayed", "Timestamp"} <= event.keys()
                assert time.fullmatch(event["Timestamp"]), event["Timestamp"]
                if "FireAt" in event:
                    assert time.fullmatch(event["FireAt"]), event["FireAt"]
                if kind == 0:
                    assert set(rows[0]) <= event.keys()
                assert event["IsPlayed"] is played[kind], (recording.label, event)
                if kind == 12:
                    starts.append(parse_time(event["Timestamp"]))
            # real time progress: every episode starts later than the one before
            assert all(a < b for a, b in itertools.pairwise(starts)), recording.label
    assert {0, 1, 4, 5, 7, 8, 10, 11, 12, 13, 15, 16} <= seen  # the kinds the runs produce
