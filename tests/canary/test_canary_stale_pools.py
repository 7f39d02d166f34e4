"""A pool whose canary runs never start (or are never judged) is stale on its own, and each tick counts
it in ``sas.canary.stale_pools`` (the per-pool alert's metric), while other pools pass. Verdict rows
are written as the verifier writes them, with chosen times, on Azurite."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from devtools.harness import PatternHarness
from supervisor.canary import ACTOR, VERDICT_ACTION, latest_verdicts
from supervisor.canary.runs import report_stale_pools
from workflow_core import telemetry_instruments
from workflow_core.telemetry_instruments import CANARY_STALE_COUNTER

PERIOD = timedelta(hours=1)
POOLS = ["default", "alpha", "beta"]
TWO_POOLS = "pools:\n  alpha:\n    agents: []\n  beta:\n    agents: []\n    canary: true\n"


@pytest.fixture
def h(azurite):
    pools = {"extra_workflows": {"pools": TWO_POOLS}, "hosted_pools": ["default", "alpha"]}
    with PatternHarness(azurite, **pools) as h:
        yield h


def _verdict(h: PatternHarness, pool: str, outcome: str, ago: timedelta) -> None:
    iid = h.start_workflow("sas-canary", {"scenario": "retry", "pool": pool})
    at = (h.now() - ago).isoformat()
    row = {"instance_id": iid, "scenario": "retry", "pool": pool, "outcome": outcome, "at": at, "cause": ""}
    h.ledger.note(iid, "*", actor=ACTOR, action=VERDICT_ACTION, reason=json.dumps(row))


def _stale_points(h: PatternHarness) -> tuple[dict, list[dict]]:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry_instruments.use_providers(meters, None)
    try:
        stale = report_stale_pools(latest_verdicts(h.ledger, now=h.now(), period=PERIOD, pools=POOLS), POOLS)
        data = reader.get_metrics_data()
    finally:
        telemetry_instruments.use_providers(None, None)
        meters.shutdown()
    points = [
        dict(p.attributes)
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == CANARY_STALE_COUNTER
        for p in metric.data.data_points
    ]
    return stale, points


def test_a_pool_whose_runs_never_start_is_stale_and_counted_while_others_pass(h):
    for pool in ("default", "alpha"):
        _verdict(h, pool, "passed", 3 * PERIOD)  # the canary has run for three periods
        _verdict(h, pool, "passed", timedelta(minutes=10))
    stale, points = _stale_points(h)
    assert stale == {"beta": None} and points == [{"pool": "beta"}]
    summary = latest_verdicts(h.ledger, now=h.now(), period=PERIOD, pools=POOLS)
    assert {p: s["state"] for p, s in summary["pools"].items()} == {
        "default": "passed",
        "alpha": "passed",
        "beta": "stale",
    }
    assert summary["state"] == "stale"


def test_a_pool_whose_last_pass_is_two_periods_old_is_counted_with_that_pass(h):
    _verdict(h, "beta", "passed", 3 * PERIOD)
    _verdict(h, "default", "passed", timedelta(minutes=5))
    _verdict(h, "alpha", "failed", timedelta(minutes=5))  # failing is the failed alert's, not this one's
    stale, points = _stale_points(h)
    assert list(stale) == ["beta"] and stale["beta"] is not None
    assert points == [{"pool": "beta"}]


def test_a_new_deployment_is_not_stale_before_two_periods(h):
    _verdict(h, "default", "passed", timedelta(minutes=10))
    _verdict(h, "alpha", "passed", timedelta(minutes=10))
    stale, points = _stale_points(h)
    assert stale == {} and points == []
    pools = latest_verdicts(h.ledger, now=h.now(), period=PERIOD, pools=POOLS)["pools"]
    assert pools["beta"]["state"] == "none"
