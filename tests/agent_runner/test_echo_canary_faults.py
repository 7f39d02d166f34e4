"""The conformance echo's canary faults and compensation (docs/agents.md, "Check an agent with the
conformance kit"), as ``sas-agent`` runs them: each fault is the handler exception the worker maps to
no reply, a failed attempt or a permanent failure, only while ``attempt <= fault_attempts``, and a
faulted attempt makes no effect."""

from __future__ import annotations

import pytest

from activities.worker.handlers.base import NoReply, PermanentError, StepContext
from agent_runner.conformance_echo import EchoFault, echo


def ctx(input_: dict, attempt: int = 1, kind: str = "work", beats: list | None = None) -> StepContext:
    return StepContext(
        instance_id="i",
        step_id="probe",
        attempt=attempt,
        agent="conformance.echo",
        kind=kind,
        input=input_,
        deadline=None,
        _heartbeat=None if beats is None else (lambda seconds: beats.append(seconds)),
    )


@pytest.fixture
def effects(tmp_path, monkeypatch):
    path = tmp_path / "effects"
    monkeypatch.setenv("CONFORMANCE_EFFECTS", str(path))
    return path


@pytest.mark.parametrize(
    ("fault", "raised"),
    [("silent", NoReply), ("fail", EchoFault), ("fail-permanently", PermanentError)],
)
def test_each_fault_is_its_handler_exception_until_fault_attempts(effects, fault, raised):
    with pytest.raises(raised):
        echo(ctx({"value": 1, "fault": fault}))
    assert not effects.exists()  # no effect line for a faulted attempt
    assert echo(ctx({"value": 1, "fault": fault}, attempt=2)) == {"echo": 1}
    with pytest.raises(raised):
        echo(ctx({"value": 1, "fault": fault, "fault_attempts": 2}, attempt=2))
    assert effects.read_text() == "i:probe\n"


def test_heartbeat_then_silent_beats_once_then_sends_nothing(effects):
    beats: list = []
    with pytest.raises(NoReply):
        echo(ctx({"fault": "heartbeat-then-silent"}, beats=beats))
    assert beats == [None] and not effects.exists()


def test_a_compensation_succeeds_idempotently_and_undoes_nothing(effects):
    message = ctx({"input": {"fault": "fail-permanently"}, "output": None}, kind="compensate")
    assert echo(message) == echo(message) == {"undone": True}
    assert not effects.exists()


@pytest.mark.parametrize("bad", [{"fault": "explode"}, {"fault": "fail", "fault_attempts": "1"}])
def test_an_unknown_fault_fails_for_good_naming_the_faults(effects, bad):
    with pytest.raises(PermanentError, match="heartbeat-then-silent"):
        echo(ctx(bad))


def test_without_an_effects_file_there_is_no_effect_to_make(monkeypatch):
    monkeypatch.delenv("CONFORMANCE_EFFECTS", raising=False)
    assert echo(ctx({"value": "x", "fault": "none"})) == {"echo": "x"}
