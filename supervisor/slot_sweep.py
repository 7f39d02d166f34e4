"""The watchdog's part in per-agent limits (docs/agent-limits.md): once per agent per tick it frees
the slots whose holder crashed, or whose admission never dispatched, once the holder's attempt
deadline passed, and wakes the steps parked behind a circuit that now lets them through (all of them
when it closed, the oldest when a dispatch may probe). An operator's close through the API wakes them
at once (:func:`wake_parked`). Circuits are not moved here: an operator's open or close holds until
an operator (or, for an automatic open, a probe's outcome) changes it.

One partition query per limited agent and one step read per slot past its deadline; nothing at all
when no agent declares limits.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from workflow_core.workflows.loader import agent_pools

log = logging.getLogger(__name__)


async def tend_limits(client: Any, services: Any, now: datetime) -> int:
    """Free the lapsed slots of every limited agent and wake its parked steps; how many slots were freed."""
    limited = [a for a, lim in agent_pools().agents.items() if lim.active]
    if not limited:
        return 0
    freed, wakes = await asyncio.to_thread(services.limits.tend, limited, now)
    if freed:
        log.info("watchdog freed %d slot(s) of crashed holders or lapsed admissions", freed)
    await _raise(client, wakes)
    return freed


async def wake_parked(client: Any, services: Any, agent: str) -> int:
    """Wake the steps parked behind ``agent``'s circuit if it lets them through now; how many."""
    try:
        wakes = await asyncio.to_thread(services.limits.parked, agent)
    except Exception as exc:  # the close is recorded; the watchdog's tick wakes them instead
        log.warning("could not read the parked steps of %s: %s", agent, exc)
        return 0
    await _raise(client, wakes)
    return len(wakes)


async def _raise(client: Any, wakes: list[tuple[str, str]]) -> None:
    for orchestration, event in wakes:
        try:
            await client.raise_event(orchestration, event, None)
        except Exception as exc:  # gone, or finished: the park's own timer ends any wait anyway
            log.info("could not wake %s (%s): %s", orchestration, event, exc)
