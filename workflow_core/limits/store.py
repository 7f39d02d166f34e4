"""The agents' slots and wait queues (``~limits~<agent>``) as the dispatch, the outcome recorder and the
watchdog use them (``Services.limits``): the gate of :mod:`gate`, with the holders' attempts read from
the step ledger in one place."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from workflow_core.ledger import ConcurrencyConflict, StepLedger, StepNotFound, StepStatus
from workflow_core.limits.gate import (
    Admission,
    HolderState,
    Phase,
    admit,
    free_lapsed_slots,
    release_slot,
)
from workflow_core.limits.rows import Holder
from workflow_core.workflows.agent_limits import AgentLimits

log = logging.getLogger(__name__)

_IN_FLIGHT = (StepStatus.DISPATCHED, StepStatus.RUNNING)
_NOT_STARTED = (StepStatus.PENDING, StepStatus.RETRYING)  # what a dispatch admits (limits_gate)


class LimitsStore:
    def __init__(self, ledger: StepLedger) -> None:
        self.ledger = ledger
        self.table = ledger.table_client()

    def admit(
        self, agent: str, limits: AgentLimits, holder: Holder, deadline: datetime, now: datetime
    ) -> Admission:
        return admit(self.table, agent, limits, holder, deadline, now, self.holder_state)

    def release(self, agent: str, holder: Holder) -> bool:
        """The holder's outcome was recorded: empty its slot now rather than when a waiter checks."""
        return release_slot(self.table, agent, holder)

    def sweep(self, agents: Iterable[str], now: datetime) -> int:
        """Free the lapsed slots of ``agents`` (the watchdog's tick); how many were freed. One
        partition query per agent and one step read per slot past its deadline."""
        freed = 0
        for agent in agents:
            try:
                freed += free_lapsed_slots(self.table, agent, now, self.holder_state, self._fence)
            except Exception as exc:  # one agent's rows never stop the tick
                log.warning("could not sweep the slots of %s: %s", agent, exc)
        return freed

    def holder_state(self, holder: Holder) -> HolderState:
        """What the ledger says of ``holder``'s attempt. Behind the step's attempt, the step still
        Pending/Retrying: admitted, its Dispatched write not made (it holds). Any other row moved
        since the admission read it, so that admission's If-Match write can no longer land."""
        try:
            step = self.ledger.get(holder.instance_id, holder.step_id)
        except StepNotFound:  # the instance is gone
            return HolderState(Phase.SETTLED)
        if step.attempt == holder.attempt and step.status in _IN_FLIGHT:
            return HolderState(Phase.IN_FLIGHT, step.deadline)
        if step.attempt < holder.attempt and step.status in _NOT_STARTED:
            return HolderState(Phase.ADMITTED, step=step)
        return HolderState(Phase.SETTLED)

    def _fence(self, agent: str, holder: Holder, state: HolderState) -> bool:
        """Write the step row of an admission that never dispatched (If-Match the row read), so that
        its Dispatched write, should it still come, fails its ETag and asks the gate again."""
        step = state.step
        try:
            self.ledger.update(
                step,
                actor="watchdog",
                reason=f"the admission of attempt {holder.attempt} to {agent} was never dispatched "
                "by its deadline: its slot is released",
            )
        except (ConcurrencyConflict, StepNotFound):  # it moved meanwhile: the next tick decides again
            return False
        return True
