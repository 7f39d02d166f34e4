"""Storage requests of whole workflows run end to end on the in-process durable host, per operation.

The driven scenario (``devtools.request_scenarios.step_operations``) calls the function bodies one
by one and leaves out what only a real run does: the HTTP start with its instance record, the
orchestrator's activities (settling the instance), batched receives. This runs ``workflows``
three-step ``provision-tenant`` workflows through the real starter, orchestrators, worker and result
handler on the durable test host (``devtools.harness``) and labels every request with the pattern's
operation. ``bench/requests_per_step.py`` prints it; ``tests/perf/test_request_counts.py`` pins it.

Left out of the per-step figure, and counted apart: receives that came back empty (how often an idle
queue is polled is the host's choice, not a step's cost), the example agent's own effect, and the
harness reading its ledger to observe it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from devtools import request_counter as rc
from devtools.harness import PatternHarness
from devtools.request_counter import RequestCounter, StorageRequest, pattern_operation
from devtools.request_scenarios import WORKFLOW, WORKFLOW_INPUT, forget_effect_clients


@dataclass
class EndToEndCounts:
    """What ``workflows`` whole runs cost: ``counted`` are the product's requests."""

    workflows: int
    steps: int
    index_table: str  # the deadline index's table (its requests are named by it)
    counted: list[StorageRequest] = field(default_factory=list)
    idle: list[StorageRequest] = field(default_factory=list)
    effect: list[StorageRequest] = field(default_factory=list)
    observed: list[StorageRequest] = field(default_factory=list)

    @property
    def by_operation(self) -> Counter[str | None]:
        return Counter(r.label for r in self.counted)

    @property
    def per_step(self) -> float:
        return len(self.counted) / self.steps


def end_to_end(azurite: Any, workflows: int, workflow_input: dict[str, Any] | None = None) -> EndToEndCounts:
    """Start ``workflows`` workflows together, run them to completion, count what they cost
    (``workflow_input``: another input than ``WORKFLOW_INPUT``, e.g. one with a large field)."""
    base = WORKFLOW_INPUT if workflow_input is None else workflow_input
    forget_effect_clients()
    with (
        RequestCounter(classify=pattern_operation) as counter,
        PatternHarness(azurite, watchdog_every=None, settings={"WATCHDOG_GRACE_SECONDS": "30"}) as h,
    ):
        counter.reset()  # the harness's setup (tables, queues) is not a step's cost
        iids = [h.start_workflow(WORKFLOW, {**base, "tenant_id": f"t{n}"}) for n in range(workflows)]
        for iid in iids:
            status = h.run_until_complete(iid, timeout=timedelta(hours=1))
            if not isinstance(status.output, dict) or status.output.get("status") != "succeeded":
                raise RuntimeError(f"{iid} did not succeed: {status.runtime_status} {status.output}")
        made = counter.snapshot()
        steps = sum(len(h.steps(iid)) for iid in iids)
        index_table = h.settings.deadline_index_table
    idle = [r for r in made if r.op == "receive" and r.empty]
    effect = [r for r in made if r.label == rc.AGENT_EFFECT]
    observed = [r for r in made if r.label == rc.HARNESS]
    excluded = {id(r) for r in (*idle, *effect, *observed)}
    counted = [r for r in made if id(r) not in excluded]
    return EndToEndCounts(workflows, steps, index_table, counted, idle, effect, observed)
