"""The scheduler's pure decision helpers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrators.decisions import (
    MIN_EXTENSION_WAIT,
    AttemptOutcome,
    ContractViolation,
    Extended,
    claim_of,
    confirmed_outcome,
    dispatch_token,
    interpret_check,
    interpret_verdict,
    parse_iso,
    provisional_outcome,
    retry_at,
    should_checkpoint,
    to_iso,
)
from workflow_core.contracts import ResultMessage
from workflow_core.messages import payload_digest, reply_digest
from workflow_core.workflows import RetryPolicy

NOW = datetime(2030, 1, 1, tzinfo=UTC)
DEADLINE = NOW - timedelta(seconds=1)


def _result(**overrides):
    message = {
        "kind": "work",
        "instance_id": "i",
        "orchestration_id": "i",
        "step_id": "s",
        "attempt": 2,
        "outcome": "succeeded",
        "output": {"x": 1},
        "error": None,
    }
    return {**message, **overrides}


def test_the_outcome_is_the_ledgers_verdict_never_the_event():
    assert interpret_verdict({"state": "succeeded", "output": {"x": 1}}, DEADLINE) == AttemptOutcome(
        True, output={"x": 1}
    )
    assert interpret_verdict({"state": "succeeded"}, DEADLINE).output == {}
    failed = interpret_verdict({"state": "failed", "error": "nope", "permanent": True}, DEADLINE)
    assert failed == AttemptOutcome(False, error="nope", permanent=True)
    timed_out = interpret_verdict({"state": "timed_out"}, DEADLINE)
    assert timed_out.timed_out and to_iso(DEADLINE) in timed_out.error
    assert interpret_verdict({"state": "unconfirmed"}, DEADLINE) is None  # ignore the event


def _confirmed(**overrides):
    verdict = {"state": "succeeded", "output": {"x": 1}, "error": None, "permanent": False}
    return {**_result(), "ledger_token": "t" * 32, "verdict": verdict, **overrides}


def test_a_confirmed_event_with_the_attempts_token_is_taken_without_a_ledger_read():
    event = _confirmed()
    assert confirmed_outcome(event, "t" * 32, "work", "s", 2, DEADLINE) == AttemptOutcome(
        True, output={"x": 1}
    )
    failed = _confirmed(outcome="failed", verdict={"state": "failed", "error": "no", "permanent": True})
    assert confirmed_outcome(failed, "t" * 32, "work", "s", 2, DEADLINE) == AttemptOutcome(
        False, error="no", permanent=True
    )


@pytest.mark.parametrize(
    ("event", "token", "kind", "step", "attempt"),
    [
        (_confirmed(), None, "work", "s", 2),  # the dispatch returned no token (older activity)
        (_confirmed(), "u" * 32, "work", "s", 2),  # another attempt's (or a made-up) token
        (_result(), "t" * 32, "work", "s", 2),  # a plain event: no token at all
        (_confirmed(), "t" * 32, "work", "s", 3),  # for another attempt
        (_confirmed(), "t" * 32, "work", "other", 2),  # for another step
        (_confirmed(), "t" * 32, "compensate", "s", 2),  # for the compensation
        (_confirmed(verdict={"state": "maybe"}), "t" * 32, "work", "s", 2),  # a malformed verdict
        (_confirmed(verdict={"state": "unconfirmed"}), "t" * 32, "work", "s", 2),
        ("not a dict", "t" * 32, "work", "s", 2),
    ],
)
def test_anything_else_is_only_a_signal_to_check_against_the_ledger(event, token, kind, step, attempt):
    assert confirmed_outcome(event, token, kind, step, attempt, DEADLINE) is None


def _keyed(**overrides):
    ledger = {
        "instance": {"instance_id": "i", "status": "Running", "watched": []},
        "etags": {"instance": "e1"},
    }
    return {**_result(), "ledger": ledger, **overrides}


def test_a_keyed_success_is_taken_with_the_basis_its_next_write_must_prove():
    event = _keyed()
    taken = provisional_outcome(event, "work", "i", "s", 2)
    assert taken is not None and taken.succeeded and taken.output == {"x": 1}
    assert taken.instance == {"instance_id": "i", "status": "Running", "watched": [], "etag": "e1"}
    # the digest the worker named its basis row by: the reply as sent, its ETag aside
    sent = ResultMessage.model_validate({**event, "ledger": {**event["ledger"], "etags": {}}})
    assert taken.basis == {
        "step_id": "s",
        "attempt": 2,
        "digest": reply_digest(sent),
        "output_digest": payload_digest({"x": 1}),
    }
    # any change of content changes the digest, so names no row
    other = provisional_outcome(_keyed(output={"x": 2}), "work", "i", "s", 2)
    assert other is not None and other.basis["digest"] != taken.basis["digest"]


@pytest.mark.parametrize(
    ("event", "kind", "instance", "step", "attempt"),
    [
        (_result(), "work", "i", "s", 2),  # not keyed: verified as any event
        (_keyed(outcome="failed", output=None, error="no"), "work", "i", "s", 2),  # failures are read
        (_keyed(ledger={"instance": {}, "etags": {}}), "work", "i", "s", 2),  # no ETag to write against
        (_keyed(), "compensate", "i", "s", 2),
        (_keyed(), "work", "other", "s", 2),  # for another instance's partition
        (_keyed(), "work", "i", "other", 2),
        (_keyed(), "work", "i", "s", 3),
        (_keyed(surprise=True), "work", "i", "s", 2),  # outside the contract
        ("not a dict", "work", "i", "s", 2),
    ],
)
def test_anything_else_is_not_taken_unread(event, kind, instance, step, attempt):
    assert provisional_outcome(event, kind, instance, step, attempt) is None


def test_the_dispatch_token_is_read_only_from_a_dispatch_answer():
    assert dispatch_token({"outcome": "dispatched", "token": "t" * 32}) == "t" * 32
    assert dispatch_token({"outcome": "dispatched"}) is None
    assert dispatch_token({"token": ""}) is None
    assert dispatch_token(None) is None


def test_a_verdict_outside_the_contract_fails_loudly():
    with pytest.raises(ContractViolation):
        interpret_verdict({"state": "maybe"}, DEADLINE)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (None, {"type": "NoneType"}),
        (_result(), {"outcome": "succeeded", "attempt": "2", "step_id": "s", "kind": "work"}),
        ({"outcome": "x" * 500}, {"outcome": "x" * 200}),
    ],
)
def test_the_claim_kept_for_the_audit_is_short(payload, expected):
    assert claim_of(payload) == expected


def test_check_answers():
    assert interpret_check({"state": "succeeded", "output": {"a": 1}}, NOW, DEADLINE) == AttemptOutcome(
        True, {"a": 1}
    )
    assert interpret_check({"state": "failed", "error": "e"}, NOW, DEADLINE) == AttemptOutcome(
        False, error="e"
    )
    assert interpret_check({"state": "failed", "error": "e", "permanent": True}, NOW, DEADLINE).permanent
    timed_out = interpret_check({"state": "timed_out"}, NOW, DEADLINE)
    assert timed_out.timed_out and to_iso(DEADLINE) in timed_out.error
    later = NOW + timedelta(minutes=5)
    assert interpret_check({"state": "extended", "deadline": later.isoformat()}, NOW, DEADLINE) == Extended(
        later
    )


def test_extension_to_the_past_still_waits_a_little():
    stale = NOW - timedelta(minutes=5)
    verdict = interpret_check({"state": "extended", "deadline": stale.isoformat()}, NOW, DEADLINE)
    assert verdict == Extended(NOW + MIN_EXTENSION_WAIT)


@pytest.mark.parametrize("payload", [{"state": "extended"}, {"state": "maybe"}, None])
def test_check_outside_the_contract_fails_loudly(payload):
    with pytest.raises(ContractViolation):
        interpret_check(payload, NOW, DEADLINE)


def test_retry_at_uses_the_policy_and_stops_at_max_attempts():
    policy = RetryPolicy(max_attempts=3, initial_interval_seconds=10, backoff_coefficient=3, jitter=0)
    assert retry_at(policy, 1, NOW, "seed") == NOW + timedelta(seconds=10)
    assert retry_at(policy, 2, NOW, "seed") == NOW + timedelta(seconds=30)
    assert retry_at(policy, 3, NOW, "seed") is None


def test_checkpoint_only_when_work_is_left():
    assert should_checkpoint(25, 25, steps_left=1)
    assert not should_checkpoint(25, 25, steps_left=0)
    assert not should_checkpoint(24, 25, steps_left=3)


def test_iso_round_trip_is_utc():
    assert parse_iso("2030-01-01T00:00:00Z") == NOW
    assert to_iso(datetime(2030, 1, 1)) == "2030-01-01T00:00:00+00:00"  # naive host time is UTC


def test_timers_never_exceed_the_maximum_span():
    from orchestrators.decisions import MAX_TIMER_SPAN, timer_fire_at

    assert timer_fire_at(NOW, NOW + timedelta(hours=1)) == NOW + timedelta(hours=1)
    assert timer_fire_at(NOW, NOW + timedelta(days=30)) == NOW + MAX_TIMER_SPAN
