"""Admission of one dispatch to an agent with declared limits: the circuit, then a slot.

A dispatch asks :func:`admit` before it writes the Dispatched transition. The answer is admitted, or
*waiting* with a reason: nothing of the step changed, no attempt was spent, and the scheduler asks
again after ``retry_after``. Reads one partition (the agent's rows) per ask; writes only when it
takes the probe or a slot, joins the queue, or refreshes its place in it.

Slots: ``max_in_flight`` rows ``slot~NNN``. A slot is held from its admission until its holder's
attempt is settled, whatever the step's status in between (:class:`Phase`): an admitted attempt whose
Dispatched write has not landed yet holds it like one in flight. It is free when empty, when the
ledger has the holder's attempt settled or superseded, or when an attempt in flight overran its
deadline (a crashed holder). An admission whose dispatch never happened is freed by the watchdog's
sweep (:func:`free_lapsed_slots`) once the attempt's deadline passed, after it fenced the step row so
that a late Dispatched write of that admission fails its ETag. Fair: a step takes a slot only when no
older live waiter is queued (oldest waiter first); a waiter that stopped asking for ``STALE_POLLS``
polls (its scheduler gave up, was stopped) loses its place.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError
from azure.data.tables import TableClient, TableTransactionError, UpdateMode

from workflow_core.ledger.entities import _deadline_key
from workflow_core.limits.circuit_rules import CircuitEvent, CircuitState
from workflow_core.limits.circuits import move_circuit
from workflow_core.limits.rows import (
    WAIT_PREFIX,
    AgentRows,
    Holder,
    Slot,
    guarded,
    partition_of,
    read_rows,
    slot_key,
)
from workflow_core.workflows.agent_limits import AgentLimits

log = logging.getLogger(__name__)

STALE_POLLS = 3  # a waiter silent this many polls is skipped and removed


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


# holder -> what the ledger says of its attempt (workflow_core.limits.store.LimitsStore.holder_state)
StateOf = Callable[[Holder], HolderState]
# the sweep's fence: write the admitted step's row (If-Match the row read); False if it moved meanwhile
Fence = Callable[[str, Holder, HolderState], bool]


def lapsed(state: HolderState, now: datetime) -> bool:
    """No longer holding: settled, or in flight past its deadline (a crashed holder)."""
    if state.phase is Phase.SETTLED:
        return True
    return state.phase is Phase.IN_FLIGHT and (state.deadline is None or state.deadline <= now)


@dataclass(frozen=True)
class Admission:
    admitted: bool
    reason: str | None = None  # why it waits
    retry_after: float = 0.0  # seconds until it asks again
    first_wait: bool = False  # it joined the queue now (worth one audit note)


def admit(
    table: TableClient,
    agent: str,
    limits: AgentLimits,
    holder: Holder,
    deadline: datetime,
    now: datetime,
    state_of: StateOf,
) -> Admission:
    rows = read_rows(table, agent)
    poll = limits.wait_poll_seconds
    if limits.circuit is not None:
        why = _circuit_says(table, agent, limits, rows, holder, deadline, now, state_of)
        if why is not None:
            return _wait(table, rows, holder, now, poll, why)
    if limits.max_in_flight is None:
        return Admission(True)
    keys = [slot_key(i) for i in range(limits.max_in_flight)]
    slots = {k: rows.slots.get(k, Slot(k)) for k in keys}
    if any(s.holder == holder for s in slots.values()):
        return Admission(True)  # a re-run of a dispatch that took its slot
    mine = next((w for w in rows.waiters if w.holder.step_key == holder.step_key), None)
    stale_before = now - timedelta(seconds=poll * STALE_POLLS)
    ahead = [
        w
        for w in rows.waiters
        if w is not mine and w.seen >= stale_before and (mine is None or w.key < mine.key)
    ]
    busy = f"{limits.max_in_flight} of {limits.max_in_flight} slots of {agent} in flight"
    if ahead:
        return _wait(table, rows, holder, now, poll, f"{busy}; {len(ahead)} waiting ahead", mine)
    free = next((s for s in slots.values() if s.holder is None or lapsed(state_of(s.holder), now)), None)
    if free is None:
        return _wait(table, rows, holder, now, poll, busy, mine)
    taken = {
        "PartitionKey": partition_of(agent),
        "RowKey": free.key,
        "Holder": holder.key,
        "Deadline": deadline.isoformat(),
    }
    ops: list[tuple] = [guarded(taken, free.etag)]
    if mine is not None:
        ops.append(
            (
                "delete",
                {"PartitionKey": partition_of(agent), "RowKey": mine.key},
                {"etag": mine.etag, "match_condition": MatchConditions.IfNotModified},
            )
        )
    try:
        table.submit_transaction(ops)
    except (TableTransactionError, HttpResponseError) as exc:  # another dispatch took it: ask again soon
        log.info("slot %s of %s taken meanwhile (%s)", free.key, agent, exc)
        return _wait(table, rows, holder, now, poll, busy, mine)
    _drop_stale(table, rows, stale_before, mine)
    return Admission(True)


def _circuit_says(
    table: TableClient,
    agent: str,
    limits: AgentLimits,
    rows: AgentRows,
    holder: Holder,
    deadline: datetime,
    now: datetime,
    state_of: StateOf,
) -> str | None:
    """None when the circuit lets this dispatch through (closed, or it is the probe), else why not."""
    c, settings = rows.circuit, limits.circuit
    assert settings is not None
    if c.state is CircuitState.CLOSED:
        return None
    if c.state is CircuitState.HALF_OPEN and c.probe == holder.key:
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
    seen = c.etag
    moved, changed = move_circuit(
        table,
        agent,
        settings,
        event,
        actor="scheduler",
        reason=f"probe dispatch {holder.key}",
        probe=holder.key,
        probe_deadline=deadline,
        expect=lambda current: current.etag == seen,
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


def _wait(
    table: TableClient,
    rows: AgentRows,
    holder: Holder,
    now: datetime,
    poll: float,
    reason: str,
    mine: object = ...,
) -> Admission:
    """Join the queue (a row keyed by the time, oldest first), or refresh the place already held
    (at most once per half poll: a write per poll at most)."""
    if mine is ...:
        mine = next((w for w in rows.waiters if w.holder.step_key == holder.step_key), None)
    pk = partition_of(rows.agent)
    try:
        if mine is None:
            table.create_entity(
                {
                    "PartitionKey": pk,
                    "RowKey": f"{WAIT_PREFIX}{_deadline_key(now)}~{holder.step_key}",
                    "Holder": holder.key,
                    "Since": now.isoformat(),
                    "Seen": now.isoformat(),
                }
            )
            return Admission(False, reason, poll, first_wait=True)
        if now - mine.seen >= timedelta(seconds=poll / 2):
            table.update_entity(
                {"PartitionKey": pk, "RowKey": mine.key, "Seen": now.isoformat(), "Holder": holder.key},
                mode=UpdateMode.MERGE,
            )
    except HttpResponseError as exc:  # a place is a courtesy: the next poll tries again
        log.info("could not record the wait of %s: %s", holder.key, exc)
    return Admission(False, reason, poll)


def _drop_stale(table: TableClient, rows: AgentRows, stale_before: datetime, mine: object) -> None:
    for w in rows.waiters:
        if w is not mine and w.seen < stale_before:
            with contextlib.suppress(HttpResponseError):  # refreshed meanwhile: alive after all
                table.delete_entity(
                    partition_of(rows.agent),
                    w.key,
                    etag=w.etag,
                    match_condition=MatchConditions.IfNotModified,
                )


def free_lapsed_slots(table: TableClient, agent: str, now: datetime, state_of: StateOf, fence: Fence) -> int:
    """The watchdog's sweep: empty every slot past its deadline whose holder is settled or overran it,
    or whose admission never dispatched (fenced first: its late Dispatched write would fail). If-Match:
    a slot taken meanwhile stays taken. How many it freed."""
    freed = 0
    for slot in read_rows(table, agent).slots.values():
        if slot.holder is None or slot.deadline is None or slot.deadline > now:
            continue
        state = state_of(slot.holder)
        if state.phase is Phase.ADMITTED:
            if not fence(agent, slot.holder, state):
                continue
        elif not lapsed(state, now):
            continue
        if _empty(table, agent, slot):
            freed += 1
    return freed


def _empty(table: TableClient, agent: str, slot: Slot) -> bool:
    """Empty ``slot`` if it is still as read (ETag); False when another writer moved it first."""
    try:
        table.update_entity(
            {"PartitionKey": partition_of(agent), "RowKey": slot.key, "Holder": "", "Deadline": ""},
            mode=UpdateMode.REPLACE,
            etag=slot.etag,
            match_condition=MatchConditions.IfNotModified,
        )
        return True
    except HttpResponseError:
        return False


def release_slot(table: TableClient, agent: str, holder: Holder) -> bool:
    """The holder's outcome was recorded: empty its slot now rather than when a waiter checks."""
    for slot in read_rows(table, agent).slots.values():
        if slot.holder == holder:
            return _empty(table, agent, slot)
    return False
