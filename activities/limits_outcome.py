"""What a recorded outcome tells an agent's limits: its slot is free now, and its circuit counts a
retryable failure or resets on a success (non-retryable failures do not count: retrying them would
not help, so they say nothing about the remote service's health).

Called by the worker (and the message-only agents' reply path) right after the outcome is recorded in
the ledger: the ledger, not a message, is what it reports. An agent without declared limits costs
nothing here; a failure here never undoes or fails the recording (the watchdog and the next
dispatch's own checks free a slot anyway).
"""

from __future__ import annotations

import logging

from workflow_core.limits import Holder
from workflow_core.runtime import Services
from workflow_core.workflows.loader import agent_pools

log = logging.getLogger(__name__)


def observe_outcome(
    services: Services,
    agent: str,
    holder: Holder,
    *,
    ok: bool,
    error: str | None,
    permanent: bool,
) -> None:
    limits = agent_pools().limits_of(agent)
    if limits is None:
        return
    try:
        if limits.max_in_flight is not None:
            services.limits.release(agent, holder)
        if limits.circuit is not None and (ok or not permanent):
            services.circuits.record_outcome(agent, limits.circuit, ok=ok, error=error)
    except Exception as exc:  # the outcome is recorded; limits catch up on their own
        log.warning("limits of %s not updated after %s: %s", agent, holder.key, exc)
