"""The canary alerts' KQL names the metric and the outcomes the code emits (both read here)."""

from __future__ import annotations

import re

from tests.infra import bicep_checks as bc
from workflow_core.telemetry_instruments import CANARY_RECOVERY_HISTOGRAM as RECOVERY_METRIC
from workflow_core.telemetry_instruments import CANARY_RUNS_COUNTER as RUNS_METRIC


def _rules():
    files, problems = bc.load()
    assert problems == []
    resolver = bc.Resolver(files)
    rules = {r.symbol: r for r in bc.declared(files, "Microsoft.Insights/scheduledQueryRules")}
    return resolver, rules


def test_the_failed_alert_reads_the_runs_metric_with_the_failed_outcome():
    resolver, rules = _rules()
    ((query, criterion),) = bc._query_text(resolver, rules["canaryFailedAlert"])
    assert f'name == "{RUNS_METRIC}"' in query
    assert 'outcome == "failed"' in query and 'customDimensions["outcome"]' in query
    assert criterion["operator"] == "GreaterThan" and criterion["threshold"] == 0
    assert RECOVERY_METRIC.startswith("sas.canary.")


def test_the_stale_alert_wants_a_pass_within_two_periods():
    resolver, rules = _rules()
    ((query, criterion),) = bc._query_text(resolver, rules["canaryStaleAlert"])
    assert f'name == "{RUNS_METRIC}"' in query and 'outcome == "passed"' in query
    assert criterion["operator"] == "LessThan" and criterion["threshold"] == 1
    window = rules["canaryStaleAlert"].properties.get("windowSize")
    assert re.search(r"2 \* canaryPeriodHours", str(window)), window


def test_the_pool_stale_alert_reads_the_stale_pools_metric_per_pool():
    from workflow_core.telemetry_instruments import CANARY_STALE_COUNTER as STALE_METRIC

    resolver, rules = _rules()
    ((query, criterion),) = bc._query_text(resolver, rules["canaryPoolStaleAlert"])
    assert f'name == "{STALE_METRIC}"' in query and 'customDimensions["pool"]' in query
    assert "by pool" in query
    assert criterion["operator"] == "GreaterThan" and criterion["threshold"] == 0
    assert [d["name"] for d in criterion["dimensions"]] == ["pool"]
    window = rules["canaryPoolStaleAlert"].properties.get("windowSize")
    assert re.search(r"canaryPeriodHours", str(window)), window


def test_the_alerts_follow_canary_enabled():
    """With CANARY_ENABLED false no verdict is emitted: the stale alerts would fire for ever."""
    from tests.infra import pool_checks as pc

    files, _problems = bc.load()
    _resolver, rules = _rules()
    assert {name: rule.properties.get("enabled") for name, rule in rules.items() if "canary" in name} == {
        "canaryFailedAlert": "enabled",
        "canaryStaleAlert": "enabled",
        "canaryPoolStaleAlert": "enabled",
    }
    ev = pc.PoolEvaluator(files)
    ev.params["canaryEnabled"] = False
    assert ev.module_param("modules/canary-alerts.bicep", "enabled") is False
