"""The watchdog's part in per-agent limits: a slot whose holder crashed, or whose admission never
dispatched, is freed once the holder's attempt deadline passes (docs/agent-limits.md). Circuits are
not touched here: an operator's open or close holds until an operator (or, for an automatic open, a
probe's outcome) changes it.

One partition query per agent with ``max_in_flight`` and one step read per slot past its deadline;
nothing at all when no agent declares limits.
"""

from __future__ import annotations

import logging
from datetime import datetime

from workflow_core.workflows.loader import agent_pools

log = logging.getLogger(__name__)


def sweep_slots(services, now: datetime) -> int:
    """Free the lapsed slots of every limited agent; how many were freed."""
    limited = [a for a, lim in agent_pools().agents.items() if lim.max_in_flight is not None]
    if not limited:
        return 0
    freed = services.limits.sweep(limited, now)
    if freed:
        log.info("watchdog freed %d slot(s) of crashed holders or lapsed admissions", freed)
    return freed
