"""The recovery canary end to end in the in-process durable host (real orchestrators, agents, watchdog,
Azurite ledger): every scenario passes within its stated recovery time, and each fails with a verdict
naming the cause when its recovery path is broken on purpose."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest

from devtools.harness import PatternHarness
from supervisor.canary import latest_verdicts, verify_runs
from workflow_core.canary import SCENARIOS, expected_recovery_seconds

PERIOD, GRACE = 30.0, 30.0


@pytest.fixture
def harness_options():
    return {"settings": {"WATCHDOG_GRACE_SECONDS": str(int(GRACE))}}


def _run(h: PatternHarness, scenario: str, *, terminate: bool = False) -> str:
    iid = h.start_workflow("sas-canary", {"scenario": scenario})
    if terminate:
        h.host.terminate(iid, "canary: scheduler-lost")
    bound = expected_recovery_seconds(scenario, watchdog_period=PERIOD, grace=GRACE)
    h.run_until(
        lambda: h.ledger.get_instance(iid).status.value not in ("Running", "Compensating"),
        timeout=timedelta(seconds=bound * 2),
    )
    return iid


def _idle(h: PatternHarness, minutes: int) -> None:
    """Let host time pass (nothing may be left to run: a broken recovery path leaves the run stuck)."""
    with contextlib.suppress(TimeoutError):
        h.run_until(lambda: False, timeout=timedelta(minutes=minutes))


def _verdict(h: PatternHarness, iid: str, *, later: float = 0.0):
    now = h.now() + timedelta(seconds=later)
    verdicts = verify_runs(h.ledger, watchdog_period=PERIOD, grace=GRACE, now=now)
    return next(v for v in verdicts if v.instance_id == iid)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_scenario_passes_within_its_stated_recovery(harness, scenario):
    iid = _run(harness, scenario, terminate=scenario == "scheduler-lost")
    verdict = _verdict(harness, iid)
    assert verdict.outcome == "passed", verdict
    assert verdict.recovery_seconds is not None and verdict.recovery_seconds <= verdict.expected_seconds
    assert verify_runs(harness.ledger, watchdog_period=PERIOD, grace=GRACE, now=harness.now()) == []  # once
    summary = latest_verdicts(harness.ledger, now=harness.now())
    assert summary["state"] == "passed" and summary["verdicts"][0]["instance_id"] == iid


def test_scheduler_lost_without_a_watchdog_fails_naming_it(azurite):
    with PatternHarness(azurite, watchdog_every=None) as h:
        iid = h.start_workflow("sas-canary", {"scenario": "scheduler-lost"})
        h.host.terminate(iid, "canary: scheduler-lost")
        _idle(h, 10)
        verdict = _verdict(h, iid, later=600)
    assert verdict.outcome == "failed" and "watchdog" in verdict.cause


def test_compensation_disabled_fails_naming_it(azurite, monkeypatch):
    from activities.worker.handlers import base

    monkeypatch.delitem(base.AGENT_HANDLERS, "canary.undo")  # compensation cannot run
    with PatternHarness(azurite) as h:
        iid = h.start_workflow("sas-canary", {"scenario": "compensate"})
        _idle(h, 20)
        verdict = _verdict(h, iid, later=600)
    assert verdict.outcome == "failed" and "compensat" in verdict.cause, verdict


def test_a_pool_without_an_agent_fails_naming_it(azurite, monkeypatch):
    with PatternHarness(azurite) as h:
        h.agents_paused = True  # nobody serves the pool
        iid = h.start_workflow("sas-canary", {"scenario": "retry"})
        _idle(h, 10)
        verdict = _verdict(h, iid, later=600)
    assert verdict.outcome == "failed" and "agent" in verdict.cause, verdict


def test_a_resume_path_that_refuses_fails_naming_it(azurite, monkeypatch):
    from supervisor import instance_actions

    async def refuse(self, record, why, **kwargs):
        raise RuntimeError("resume refused (broken on purpose)")

    monkeypatch.setattr(instance_actions._InstanceActions, "resume", refuse)
    with PatternHarness(azurite) as h:
        iid = h.start_workflow("sas-canary", {"scenario": "scheduler-lost"})
        h.host.terminate(iid, "canary: scheduler-lost")
        _idle(h, 10)
        verdict = _verdict(h, iid, later=600)
    assert verdict.outcome == "failed" and "resume" in verdict.cause, verdict


def test_a_verdict_is_the_metric_the_alerts_read(harness):
    """What tests/infra/test_canary_alerts.py checks the KQL against: the name and the dimensions."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from workflow_core import telemetry_instruments
    from workflow_core.telemetry_instruments import CANARY_RECOVERY_HISTOGRAM as RECOVERY_METRIC
    from workflow_core.telemetry_instruments import CANARY_RUNS_COUNTER as RUNS_METRIC

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry_instruments.use_providers(meters, None)
    try:
        iid = _run(harness, "retry")
        verdict = _verdict(harness, iid)
        data = reader.get_metrics_data()
    finally:
        telemetry_instruments.use_providers(None, None)
        meters.shutdown()
    found = {
        metric.name: [dict(p.attributes) for p in metric.data.data_points]
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert found[RUNS_METRIC] == [{"outcome": "passed", "scenario": "retry", "pool": "default"}]
    assert found[RECOVERY_METRIC] == [{"scenario": "retry", "pool": "default"}]
    assert verdict.outcome == "passed"


CANARY_POOL = "pools:\n  canaries:\n    agents: [canary.probe, canary.undo]\n"


def test_a_pool_that_opts_in_is_exercised_and_named(azurite):
    """A pool opts in by listing the canary's agents (workflows/pools.yaml): its queue carries the run."""
    from supervisor.canary.runs import start_canary_run

    with PatternHarness(azurite, extra_workflows={"pools": CANARY_POOL}) as h:
        iid = h.host.run_async(start_canary_run(h.host.client, h.services, "retry"))
        h.run_until_complete(iid)
        verdict = _verdict(h, iid)
    assert verdict.pool == "canaries" and verdict.outcome == "passed", verdict


def test_an_opted_in_pool_nobody_serves_fails_naming_the_agent(azurite):
    from supervisor.canary.runs import start_canary_run

    with PatternHarness(azurite, extra_workflows={"pools": CANARY_POOL}, hosted_pools=["default"]) as h:
        iid = h.host.run_async(start_canary_run(h.host.client, h.services, "retry"))
        _idle(h, 10)
        verdict = _verdict(h, iid, later=600)
    assert verdict.pool == "canaries" and verdict.outcome == "failed" and "agent" in verdict.cause, verdict


def test_an_unreadable_verdict_row_shows_as_a_failure_not_a_crash(harness):
    from supervisor.canary import ACTOR, VERDICT_ACTION

    iid = harness.start_workflow("sas-canary", {"scenario": "retry"})
    harness.ledger.note(iid, "*", actor=ACTOR, action=VERDICT_ACTION, reason='{"outcome": "pass')
    summary = latest_verdicts(harness.ledger, now=harness.now())
    assert summary["state"] == "failed" and summary["verdicts"][0]["cause"] == "unreadable verdict row"


TWO_POOLS = "pools:\n  alpha:\n    agents: []\n  beta:\n    agents: []\n    canary: true\n"


def _tick_and_judge(h: PatternHarness, minutes: int) -> dict:
    from supervisor.canary.runs import canary_tick
    from workflow_core.settings import canary_settings

    done = h.host.run_async(
        canary_tick(h.services, h.host.client, canary_settings({"CANARY_ENABLED": "true"}), now=h.now())
    )
    _idle(h, minutes)
    verify_runs(h.ledger, watchdog_period=PERIOD, grace=GRACE, now=h.now() + timedelta(seconds=600))
    return done


def test_a_tick_exercises_every_hosted_pool_and_each_gets_its_verdict(azurite):
    """Two hosted pools besides default: one run each per tick, each verdict names the pool its probe
    was sent to (the harness serves each pool's queue separately)."""
    with PatternHarness(
        azurite, extra_workflows={"pools": TWO_POOLS}, hosted_pools=["default", "alpha", "beta"]
    ) as h:
        done = _tick_and_judge(h, 10)
        summary = latest_verdicts(h.ledger, now=h.now(), pools=["default", "alpha", "beta"])
    assert sorted(done["started"]) == ["alpha", "beta", "default"] and done["stale"] == []
    by_id = {v["instance_id"]: v for v in summary["verdicts"]}
    for pool, iid in done["started"].items():
        assert by_id[iid]["pool"] == pool and by_id[iid]["outcome"] == "passed", by_id[iid]
    assert summary["state"] == "passed"
    states = {p: s["state"] for p, s in summary["pools"].items()}
    assert states == dict.fromkeys(["default", "alpha", "beta"], "passed")


def test_a_pool_nobody_serves_fails_naming_that_pool_while_the_others_pass(azurite):
    """beta opts in (canary: true) but no worker serves its queue: its verdict fails naming beta, the
    hosted pools pass, and the overall state is failed (red) although other pools passed."""
    hosted = ["default", "alpha"]
    with PatternHarness(azurite, extra_workflows={"pools": TWO_POOLS}, hosted_pools=hosted) as h:
        done = _tick_and_judge(h, 10)
        summary = latest_verdicts(h.ledger, now=h.now(), pools=["default", "alpha", "beta"])
    assert sorted(done["started"]) == ["alpha", "beta", "default"]
    pools = summary["pools"]
    assert pools["beta"]["state"] == "failed" and "pool 'beta'" in pools["beta"]["last"]["cause"], pools
    assert "agent" in pools["beta"]["last"]["cause"]
    assert pools["alpha"]["state"] == "passed" and pools["default"]["state"] == "passed"
    assert summary["state"] == "failed"
