"""The canary's and the circuits' rows in ``GET /api/diagnostics`` (what ``sas doctor`` prints),
decided from real ledger rows on Azurite."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from api import diagnostics
from workflow_core import clock
from workflow_core.canary import CANARY_WORKFLOW
from workflow_core.workflows.pools import AgentLimits, CircuitSettings


def _rows(rows):
    return {r["check"]: r for r in rows}


def _run(ledger, n: int, outcome: str, at, cause: str = "", pool: str = "default") -> str:
    iid = f"canary-{n}"
    ledger.create_instance(
        iid,
        CANARY_WORKFLOW,
        actor="test",
        input_json=json.dumps({"scenario": "retry"}),
        scheduler_deadline=at + timedelta(minutes=5),
        business_key="retry",
        version=f"{CANARY_WORKFLOW}@test",
    )
    verdict = {
        "instance_id": iid,
        "scenario": "retry",
        "pool": pool,
        "outcome": outcome,
        "expected": "retry",
        "observed": "retried once",
        "expected_seconds": 90,
        "recovery_seconds": 30 if outcome == "passed" else None,
        "cause": cause,
        "at": at.isoformat(),
    }
    ledger.note(iid, "*", actor="canary", action="canary-verdict", reason=json.dumps(verdict))
    return iid


def test_the_providers_are_installed_with_the_diagnostics(services):
    body = diagnostics.collect(services)
    checks = {r["check"] for r in body["sections"]["providers"]}
    assert "canary" in checks and "circuits" in checks
    assert not any("no canary provider" in r["detail"] for r in body["sections"]["providers"])


def test_a_disabled_canary_is_shown_not_failed(services, monkeypatch):
    monkeypatch.delenv("CANARY_ENABLED", raising=False)
    (only,) = diagnostics.canary_rows(services)
    assert only["ok"] is None and "CANARY_ENABLED" in only["detail"]


def test_the_newest_failed_verdict_fails_doctor_and_older_ones_do_not(services, monkeypatch):
    monkeypatch.setenv("CANARY_ENABLED", "true")
    now = clock.utcnow()
    _run(services.ledger, 1, "failed", now - timedelta(minutes=50), cause="old cause")
    _run(services.ledger, 2, "passed", now - timedelta(minutes=20))
    rows = diagnostics.canary_rows(services)
    assert rows[0]["check"] == "canary" and rows[0]["ok"] is True and "passed" in rows[0]["detail"]
    assert [r["ok"] for r in rows if r["check"] == "canary pool default"] == [True]
    verdicts = [r["ok"] for r in rows if r["check"].startswith("canary verdict")]
    assert verdicts == [True, None]  # the superseded failure is shown, not failed

    _run(services.ledger, 3, "failed", now - timedelta(minutes=1), cause="watchdog did not resume")
    rows = diagnostics.canary_rows(services)
    assert rows[0]["ok"] is False and "watchdog did not resume" in rows[0]["detail"]
    assert rows[0]["fix"] and rows[1]["ok"] is False and rows[1]["check"] == "canary pool default"


def test_a_pool_whose_newest_verdict_failed_fails_doctor_though_another_pool_passed(services, monkeypatch):
    monkeypatch.setenv("CANARY_ENABLED", "true")
    now = clock.utcnow()
    _run(services.ledger, 1, "failed", now - timedelta(minutes=5), cause="pool 'beta': no agent", pool="beta")
    _run(services.ledger, 2, "passed", now - timedelta(minutes=1))
    rows = {r["check"]: r for r in diagnostics.canary_rows(services)}
    assert rows["canary"]["ok"] is False and "pool 'beta': no agent" in rows["canary"]["detail"]
    assert rows["canary pool beta"]["ok"] is False and rows["canary pool default"]["ok"] is True


def test_no_pass_within_two_periods_is_stale(services, monkeypatch):
    monkeypatch.setenv("CANARY_ENABLED", "true")
    _run(services.ledger, 1, "passed", clock.utcnow() - timedelta(hours=3))
    head = diagnostics.canary_rows(services)[0]
    assert head["ok"] is False and head["detail"].startswith("stale")


@pytest.mark.parametrize("open_it", [False, True])
def test_an_open_circuit_fails_doctor(services, open_it):
    agents = {"payments.refund": AgentLimits(max_in_flight=2, circuit=CircuitSettings())}
    if open_it:
        services.circuits.operator_move(
            "payments.refund", CircuitSettings(), open_it=True, actor="op", reason="down"
        )
    (row,) = diagnostics.circuit_rows(services, agents)
    assert row["check"] == "circuit payments.refund"
    if open_it:
        assert row["ok"] is False and "open" in row["detail"] and "sas circuit close" in row["fix"]
    else:
        assert row["ok"] is True and "slots held 0/2" in row["detail"]


def test_no_declared_limits_is_not_a_failure(services):
    (row,) = diagnostics.circuit_rows(services, {})
    assert row["ok"] is None


def test_a_feature_with_a_bad_setting_is_a_failing_row_naming_it(services, monkeypatch):
    assert diagnostics.feature_rows(services) == []
    monkeypatch.setenv("BULK_RATE_PER_SECOND", "fast")
    monkeypatch.setenv("CANARY_SCHEDULE", "0 0,10 * * * *")
    rows = _rows(diagnostics.collect(services)["sections"]["providers"])
    assert rows["feature bulk"]["ok"] is False
    assert (
        rows["feature bulk"]["detail"] == "bulk is off: BULK_RATE_PER_SECOND must be an integer, got 'fast'"
    )
    assert rows["feature canary"]["ok"] is False and "CANARY_SCHEDULE" in rows["feature canary"]["detail"]
    assert "canary" not in rows  # the canary's own rows wait for its settings
