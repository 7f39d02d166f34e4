"""The watchdog's part in per-agent limits: a slot whose holder crashed is freed when the holder's
step deadline passes (docs/agent-limits.md). Circuits are not touched here: an operator's open or
close holds until an operator (or, for an automatic open, a probe's outcome) changes it.

One partition query per agent with ``max_in_flight`` and one step read per slot past its deadline;
nothing at all when no agent declares limits.
"""

from __future__ import annotations

import logging
from datetime import datetime

from workflow_core.ledger import StepNotFound
from workflow_core.limits import Holder, free_expired_slots
from workflow_core.workflows.loader import agent_pools

log = logging.getLogger(__name__)
IN_FLIGHT = frozenset({"Dispatched", "Running"})


def sweep_slots(services, now: datetime) -> int:
    """Free the expired slots of every limited agent; how many were freed."""
    limited = [a for a, lim in agent_pools().agents.items() if lim.max_in_flight is not None]
    if not limited:
        return 0
    ledger = services.ledger

    def in_flight(holder: Holder) -> datetime | None:
        try:
            step = ledger.get(holder.instance_id, holder.step_id)
        except StepNotFound:
            return None
        if step.attempt == holder.attempt and step.status.value in IN_FLIGHT:
            return step.deadline
        return None

    freed = 0
    table = ledger.table_client()
    for agent in limited:
        try:
            freed += free_expired_slots(table, agent, now, in_flight)
        except Exception as exc:  # one agent's rows never stop the tick
            log.warning("could not sweep the slots of %s: %s", agent, exc)
    if freed:
        log.info("watchdog freed %d slot(s) of crashed holders", freed)
    return freed
