"""The agents' slots and wait queues (``~limits~<agent>``) as the dispatch, the outcome recorder and the
watchdog use them (``Services.limits``): the gate of :mod:`gate`, with the holders' attempts read from
the step ledger in one place."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from workflow_core import clock
from workflow_core.ledger import ConcurrencyConflict, StepLedger, StepNotFound, StepStatus
from workflow_core.limits.gate import (
    Admission,
    HolderState,
    Phase,
    admit,
    free_lapsed_slots,
    release_slot,
    wakeable,
)
from workflow_core.limits.rows import Holder, read_rows
from workflow_core.workflows.agent_limits import AgentLimits

log = logging.getLogger(__name__)

_IN_FLIGHT = (StepStatus.DISPATCHED, StepStatus.RUNNING)
_NOT_STARTED = (StepStatus.PENDING, StepStatus.RETRYING)  # what a dispatch admits (limits_gate)


class LimitsStore:
    def __init__(self, ledger: StepLedger) -> None:
        self.ledger = ledger
        self.table = ledger.table_client()

    def admit(
        self,
        agent: str,
        limits: AgentLimits,
        holder: Holder,
        deadline: datetime,
        now: datetime,
        orchestration: str | None = None,
    ) -> Admission:
        return admit(self.table, agent, limits, holder, deadline, now, self.holder_state, orchestration)

    def release(self, agent: str, holder: Holder) -> bool:
        """The holder's outcome was recorded: empty its slot now rather than when a waiter checks."""
        return release_slot(self.table, agent, holder)

    def tend(self, agents: Iterable[str], now: datetime) -> tuple[int, list[tuple[str, str]]]:
        """The watchdog's tick over ``agents``: free their lapsed slots, and say which parked
        waiters to wake, as (orchestration, event). One partition query per agent, and one step read
        per slot past its deadline: the gate asked once per agent per tick, not once per waiting step."""
        freed, wakes = 0, []
        for agent in agents:
            try:
                rows = read_rows(self.table, agent)
                freed += free_lapsed_slots(self.table, rows, now, self.holder_state, self._fence)
                wakes += [(w.orchestration, w.wake) for w in wakeable(rows, now)]
            except Exception as exc:  # one agent's rows never stop the tick
                log.warning("could not tend the limits of %s: %s", agent, exc)
        return freed, wakes

    def parked(self, agent: str) -> list[tuple[str, str]]:
        """Every parked waiter of ``agent`` whose circuit lets it through now (an operator's close)."""
        return [(w.orchestration, w.wake) for w in wakeable(read_rows(self.table, agent), clock.utcnow())]

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
