"""Admission of one dispatch to an agent with declared limits: the circuit, then a slot.

A dispatch asks :func:`admit` before it writes the Dispatched transition. The answer is admitted, or
*waiting* with a reason: nothing of the step changed, no attempt was spent, and the scheduler asks
again after ``retry_after``. Reads one partition (the agent's rows) per ask; writes only when it
takes the probe or a slot, joins the queue, or refreshes its place in it.

Slots are held from the admission until the holder's attempt is settled (:class:`Phase`), oldest
waiter first (docs/agent-limits.md, "The dispatch's side"). An admission whose dispatch never happened
is freed by the watchdog's sweep (:meth:`LimitsStore.tend`) after it fenced the step row, so that a
late Dispatched write of that admission fails its ETag.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from azure.core.exceptions import HttpResponseError
from azure.data.tables import TableClient, TableTransactionError, UpdateMode

from workflow_core import clock
from workflow_core.ledger import ConcurrencyConflict, StepLedger, StepNotFound, StepStatus
from workflow_core.ledger.entities import _deadline_key, if_match
from workflow_core.limits.circuit_rules import Circuit, CircuitEvent, CircuitState
from workflow_core.limits.circuits import move_circuit
from workflow_core.limits.rows import (
    WAIT_PREFIX,
    AgentRows,
    Holder,
    Slot,
    Waiter,
    guarded,
    partition_of,
    read_rows,
    slot_key,
)
from workflow_core.workflows.pools import AgentLimits, CircuitSettings

log = logging.getLogger(__name__)

STALE_POLLS = 3  # a waiter silent this many polls past its next ask is skipped and removed
PARK_SECONDS = 60.0  # the longest a step held back by the circuit parks before it asks again


class Phase(StrEnum):
    """Where a holder's attempt stands in the ledger."""

    ADMITTED = "admitted"  # let through, its Dispatched write not (yet) made: holds its slot
    IN_FLIGHT = "in_flight"  # Dispatched or Running: holds its slot until its deadline
    SETTLED = "settled"  # over, superseded, or the row moved on: the slot is free


@dataclass(frozen=True)
class HolderState:
    phase: Phase
    deadline: datetime | None = None  # in flight: the attempt's (heartbeats extend it)
    step: Any = None  # admitted: the step row as read, which the sweep's fence writes against


# holder -> what the ledger says of its attempt (LimitsStore.holder_state)
StateOf = Callable[[Holder], HolderState]


def lapsed(state: HolderState, now: datetime) -> bool:
    """No longer holding: settled, or in flight past its deadline (a crashed holder)."""
    overran = state.phase is Phase.IN_FLIGHT and (state.deadline is None or state.deadline <= now)
    return state.phase is Phase.SETTLED or overran


@dataclass(frozen=True)
class Admission:
    admitted: bool
    reason: str | None = None  # why it waits
    retry_after: float = 0.0  # seconds until it asks again
    first_wait: bool = False  # it joined the queue now (worth one audit note)
    wake: str | None = None  # parked: the event that ends the wait early (raised by :func:`wakeable`'s users)


def admit(
    table: TableClient,
    agent: str,
    limits: AgentLimits,
    holder: Holder,
    deadline: datetime,
    now: datetime,
    state_of: StateOf,
    orchestration: str | None = None,
) -> Admission:
    """``orchestration``: the waiting scheduler, which a parked wait names for its wake-up."""
    rows = read_rows(table, agent)
    poll = limits.wait_poll_seconds
    mine = next((w for w in rows.waiters if w.holder.step_key == holder.step_key), None)
    if limits.circuit is not None:
        why = _circuit_says(table, rows, limits.circuit, holder, deadline, now, state_of)
        if why is not None:
            park = park_seconds(rows.circuit, now, poll)
            return _wait(table, rows, holder, now, poll, why, mine, park, orchestration or "")
    if limits.max_in_flight is None:
        _leave(table, agent, mine)
        return Admission(True)
    slots = {k: rows.slots.get(k, Slot(k)) for k in map(slot_key, range(limits.max_in_flight))}
    if any(s.holder == holder for s in slots.values()):
        return Admission(True)  # a re-run of a dispatch that took its slot
    live = [w for w in rows.waiters if w is not mine and _live(w, now, poll)]
    ahead = [w for w in live if mine is None or w.key < mine.key]
    busy = f"{limits.max_in_flight} of {limits.max_in_flight} slots of {agent} in flight"
    if ahead:
        park = slot_park(len(ahead), limits.max_in_flight, poll)
        return _wait(table, rows, holder, now, poll, f"{busy}; {len(ahead)} waiting ahead", mine, park=park)
    free = next((s for s in slots.values() if s.holder is None or lapsed(state_of(s.holder), now)), None)
    if free is None:
        return _wait(table, rows, holder, now, poll, busy, mine)
    pk = partition_of(agent)
    taken = {"PartitionKey": pk, "RowKey": free.key, "Holder": holder.key, "Deadline": deadline.isoformat()}
    ops: list[tuple] = [guarded(taken, free.etag)]
    if mine is not None:
        ops.append(("delete", {"PartitionKey": pk, "RowKey": mine.key}, if_match(mine.etag)))
    try:
        table.submit_transaction(ops)
    except (TableTransactionError, HttpResponseError) as exc:  # another dispatch took it: ask again soon
        log.info("slot %s of %s taken meanwhile (%s)", free.key, agent, exc)
        return _wait(table, rows, holder, now, poll, busy, mine)
    for w in rows.waiters:  # drop the stale (refreshed meanwhile: alive after all, the If-Match keeps it)
        if w is not mine and not _live(w, now, poll):
            _leave(table, agent, w)
    return Admission(True)


def _circuit_says(
    table: TableClient,
    rows: AgentRows,
    settings: CircuitSettings,
    holder: Holder,
    deadline: datetime,
    now: datetime,
    state_of: StateOf,
) -> str | None:
    """None when the circuit lets this dispatch through (closed, or it is the probe), else why not."""
    c, agent = rows.circuit, rows.agent
    if c.state is CircuitState.CLOSED or (c.state is CircuitState.HALF_OPEN and c.probe == holder.key):
        return None
    since = c.since.strftime("%H:%M:%S") if c.since else "?"
    if c.state is CircuitState.OPEN and (c.manual or c.open_until is None or now < c.open_until):
        how = " by an operator" if c.manual else f" until {c.open_until:%H:%M:%S}"
        return f"circuit of {agent} open{how} (since {since}, {c.failures} failures)"
    if c.state is CircuitState.HALF_OPEN:
        probe = Holder.parse(c.probe)
        probe_lost = probe is None or _probe_lost(state_of(probe), c.probe_deadline, now)
        if not probe_lost:
            return f"circuit of {agent} half-open: its probe is in flight"
        event = CircuitEvent.PROBE_LOST
    else:
        event = CircuitEvent.PROBE
    moved, changed = move_circuit(
        table,
        agent,
        settings,
        event,
        actor="scheduler",
        reason=f"probe dispatch {holder.key}",
        probe=holder.key,
        probe_deadline=deadline,
        expect=lambda current: current.etag == c.etag,
        now=now,
    )
    if changed and moved.probe == holder.key:
        return None
    return f"circuit of {agent} half-open: another dispatch probes"


def _probe_lost(state: HolderState, deadline: datetime | None, now: datetime) -> bool:
    """An admitted probe that never dispatched is lost at its deadline; otherwise as :func:`lapsed`."""
    if state.phase is Phase.ADMITTED:
        return deadline is None or deadline <= now
    return lapsed(state, now)


def park_seconds(circuit: Circuit, now: datetime, poll: float) -> float:
    """How long a step the circuit holds back parks: until an automatic open's probe time, else (an
    operator's open, a probe in flight) ``PARK_SECONDS``, a probe's deadline sooner. A wake-up
    (:func:`wakeable`) ends it early when the circuit lets steps through."""
    until = circuit.open_until
    if circuit.state is CircuitState.OPEN and not circuit.manual and until is not None and until > now:
        return (until - now).total_seconds()
    if circuit.state is CircuitState.HALF_OPEN and circuit.probe_deadline is not None:
        return min(PARK_SECONDS, max((circuit.probe_deadline - now).total_seconds(), poll))
    return PARK_SECONDS


def wakeable(rows: AgentRows, now: datetime) -> list[Waiter]:
    """The parked waiters a tick should wake: every one when the circuit is closed, the oldest when a
    dispatch may probe (an automatic open past its probe time, a probe past its deadline)."""
    parked = [w for w in rows.waiters if w.wake and w.orchestration]
    c = rows.circuit
    if c.state is CircuitState.CLOSED:
        return parked
    due = (
        c.state is CircuitState.OPEN and not c.manual and c.open_until is not None and c.open_until <= now
    ) or (c.state is CircuitState.HALF_OPEN and c.probe_deadline is not None and c.probe_deadline <= now)
    return parked[:1] if due else []


def _live(w: Waiter, now: datetime, poll: float) -> bool:
    """Still asking: not silent for ``STALE_POLLS`` polls past when it said it would ask again."""
    return now - w.next_ask < timedelta(seconds=poll * STALE_POLLS)


def _wait(
    table: TableClient,
    rows: AgentRows,
    holder: Holder,
    now: datetime,
    poll: float,
    reason: str,
    mine: Waiter | None,
    park: float | None = None,
    orchestration: str | None = None,
) -> Admission:
    """Join the queue (a row keyed by the time, oldest first), or refresh the place already held (at
    most once per half poll), saying when it asks again: after ``park`` (a slot wait: behind others)
    or ``poll``. ``orchestration``: the circuit holds it back, and the park is named for a wake-up (a
    fresh event name each time: a raised event is handed to every later wait for its name)."""
    pk = partition_of(rows.agent)
    after = poll if park is None else park
    until = (now + timedelta(seconds=after)).isoformat()
    seen: dict[str, Any] = {"Seen": now.isoformat(), "Holder": holder.key, "Until": until}
    wake = None
    if orchestration is not None:
        wake = f"wake:{holder.step_id}:{holder.attempt}:{secrets.token_hex(4)}"
        seen |= {"Orchestration": orchestration, "Wake": wake}
    elif mine is not None and mine.wake:  # parked behind the circuit before, a slot wait now
        seen |= {"Orchestration": "", "Wake": ""}
    try:
        if mine is None:
            key = f"{WAIT_PREFIX}{_deadline_key(now)}~{holder.step_key}"
            table.create_entity({"PartitionKey": pk, "RowKey": key, "Since": now.isoformat(), **seen})
            return Admission(False, reason, after, first_wait=True, wake=wake)
        if "Wake" in seen or now - mine.seen >= timedelta(seconds=poll / 2):
            table.update_entity({"PartitionKey": pk, "RowKey": mine.key, **seen}, mode=UpdateMode.MERGE)
    except HttpResponseError as exc:  # a place is a courtesy: the next poll tries again
        log.info("could not record the wait of %s: %s", holder.key, exc)
    return Admission(False, reason, after, wake=wake)


def slot_park(ahead: int, slots: int, poll: float) -> float:
    """How long a step waiting for a slot parks: a poll at the head of the queue, one more for every
    ``slots`` waiters ahead of it (it cannot be let through before they are), at most
    ``PARK_SECONDS``: the agent's waiters ask about ``slots`` x log(waiters) times a poll, not once each."""
    return min(poll * (ahead // slots + 1), max(PARK_SECONDS, poll))


def _leave(table: TableClient, agent: str, mine: Waiter | None) -> None:
    """An admitted step's place in the queue is given up (If-Match: a refresh meanwhile stays)."""
    if mine is not None:
        with contextlib.suppress(HttpResponseError):
            table.delete_entity(partition_of(agent), mine.key, **if_match(mine.etag))


def _empty(table: TableClient, agent: str, slot: Slot) -> bool:
    """Empty ``slot`` if it is still as read (ETag); False when another writer moved it first."""
    try:
        table.update_entity(
            {"PartitionKey": partition_of(agent), "RowKey": slot.key, "Holder": "", "Deadline": ""},
            mode=UpdateMode.REPLACE,
            **if_match(slot.etag),
        )
        return True
    except HttpResponseError:
        return False


class LimitsStore:
    """The agents' slots and wait queues as the dispatch, the outcome recorder and the watchdog use
    them (``Services.limits``): the gate above, with the holders' attempts read from the step ledger."""

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
        held = [s for s in read_rows(self.table, agent).slots.values() if s.holder == holder]
        return bool(held) and _empty(self.table, agent, held[0])

    def tend(self, agents: Iterable[str], now: datetime) -> tuple[int, list[tuple[str, str]]]:
        """The watchdog's tick over ``agents``: free their lapsed slots, and say which parked
        waiters to wake, as (orchestration, event). One partition query per agent, and one step read
        per slot past its deadline: the gate asked once per agent per tick, not once per waiting step."""
        freed, wakes = 0, []
        for agent in agents:
            try:
                rows = read_rows(self.table, agent)
                freed += self._free_lapsed_slots(rows, now)
                wakes += [(w.orchestration, w.wake) for w in wakeable(rows, now)]
            except Exception as exc:  # one agent's rows never stop the tick
                log.warning("could not tend the limits of %s: %s", agent, exc)
        return freed, wakes

    def _free_lapsed_slots(self, rows: AgentRows, now: datetime) -> int:
        """Empty every slot past its deadline whose holder is settled or overran it, or whose admission
        never dispatched (fenced first: its late Dispatched write would fail). If-Match: a slot taken
        meanwhile stays taken. How many it freed."""
        freed = 0
        for slot in rows.slots.values():
            if slot.holder is None or slot.deadline is None or slot.deadline > now:
                continue
            state = self.holder_state(slot.holder)
            if state.phase is Phase.ADMITTED:
                if not self._fence(rows.agent, slot.holder, state):
                    continue
            elif not lapsed(state, now):
                continue
            freed += _empty(self.table, rows.agent, slot)
        return freed

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
        if step.attempt == holder.attempt and step.status in (StepStatus.DISPATCHED, StepStatus.RUNNING):
            return HolderState(Phase.IN_FLIGHT, step.deadline)
        if step.attempt < holder.attempt and step.status in (StepStatus.PENDING, StepStatus.RETRYING):
            return HolderState(Phase.ADMITTED, step=step)
        return HolderState(Phase.SETTLED)

    def _fence(self, agent: str, holder: Holder, state: HolderState) -> bool:
        """Write the step row of an admission that never dispatched (If-Match the row read), so that
        its Dispatched write, should it still come, fails its ETag and asks the gate again."""
        why = f"the admission of attempt {holder.attempt} to {agent} was never dispatched by its deadline"
        try:
            self.ledger.update(state.step, actor="watchdog", reason=f"{why}: its slot is released")
        except (ConcurrencyConflict, StepNotFound):  # it moved meanwhile: the next tick decides again
            return False
        return True
