"""Agents without declared limits cost what they cost before limits existed: the per-operation
request counts of ``tests/perf`` hold with limits declared for some *other* agent."""

from __future__ import annotations

from tests.activities.test_pool_routing import declare_pools
from tests.helpers import request_counter as rc
from tests.helpers.request_scenarios import step_operations
from tests.perf.test_request_counts import EXPECTED, PER_WORKFLOW, counted  # noqa: F401 - the fixture
from workflow_core.workflows.pools import clear_pools_cache

OTHER_AGENT_LIMITED = """agents:
  payments.refund:
    max_in_flight: 2
    circuit: {failure_threshold: 3, open_seconds: 30}
"""


def test_unlimited_agents_cost_no_extra_request(counted, monkeypatch, tmp_path):  # noqa: F811
    clear_pools_cache()
    declare_pools(monkeypatch, tmp_path, OTHER_AGENT_LIMITED)
    try:
        counter, services = counted
        counts = step_operations(services, counter)
    finally:
        clear_pools_cache()
    measured = {
        label: (n if label in PER_WORKFLOW else n / counts.steps)
        for label, n in counts.by_operation.items()
        if label != rc.AGENT_EFFECT
    }
    assert measured == EXPECTED
