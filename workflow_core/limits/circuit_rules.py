"""The circuit breaker of one agent as an explicit state table (docs/agent-limits.md; why it counts
*consecutive* failures, not a rate: "Outcomes, and why consecutive failures").

Pure: no clock, no I/O. :func:`next_circuit` answers the circuit after an event, or None (no write).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from workflow_core.workflows.pools import CircuitSettings


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitEvent(StrEnum):
    FAILURE = "failure"  # a retryable failure of the agent was recorded (non-retryable: no event)
    SUCCESS = "success"  # a success of the agent was recorded
    PROBE = "probe"  # a dispatch asks after ``open_until``: it becomes the one probe
    PROBE_LOST = "probe_lost"  # the probe's deadline passed without an outcome: another may probe
    OPERATOR_OPEN = "operator_open"
    OPERATOR_CLOSE = "operator_close"


# Numbers for the ``sas.circuit.state`` gauge.
STATE_VALUES = {CircuitState.CLOSED: 0, CircuitState.HALF_OPEN: 1, CircuitState.OPEN: 2}


@dataclass(frozen=True)
class Circuit:
    state: CircuitState = CircuitState.CLOSED
    failures: int = 0  # consecutive retryable failures (kept while open: the inbox shows them)
    since: datetime | None = None  # when it entered ``state``
    open_until: datetime | None = None  # open: when a dispatch may probe (None while manual)
    last_error: str | None = None
    manual: bool = False  # an operator set this state: nothing automatic moves an open one
    probe: str | None = None  # half-open: the holder key of the probe dispatch
    probe_deadline: datetime | None = None
    changed_by: str | None = None
    version: int = 0  # every write adds one: the circuit's audit rows are keyed (ordered) by it
    etag: str | None = None  # None: no row yet (a closed circuit with no history)


S, E = CircuitState, CircuitEvent

# (state, event) -> the rule that decides; a pair not here changes nothing. The rules follow.
TABLE: dict[tuple[CircuitState, CircuitEvent], str] = {
    (S.CLOSED, E.FAILURE): "count",  # -> open when the count reaches the threshold
    (S.CLOSED, E.SUCCESS): "reset",
    (S.OPEN, E.FAILURE): "note",  # a late failure of a step dispatched before it opened: counted
    (S.OPEN, E.PROBE): "half_open",  # only automatic opens, and only after open_until
    (S.HALF_OPEN, E.FAILURE): "reopen",
    (S.HALF_OPEN, E.SUCCESS): "close",
    (S.HALF_OPEN, E.PROBE_LOST): "half_open",
    **{(state, E.OPERATOR_OPEN): "operator_open" for state in S},  # from any state
    **{(state, E.OPERATOR_CLOSE): "operator_close" for state in S},
}
# (S.OPEN, E.SUCCESS) is absent on purpose: a late success says little; the probe decides.


def next_circuit(
    c: Circuit,
    event: CircuitEvent,
    now: datetime,
    settings: CircuitSettings,
    *,
    error: str | None = None,
    probe: str | None = None,
    probe_deadline: datetime | None = None,
    actor: str = "scheduler",
) -> Circuit | None:
    """The circuit after ``event`` at ``now``, or None when nothing changes (nothing to write)."""
    rule = TABLE.get((c.state, event))
    if rule is None:
        return None
    opened = timedelta(seconds=settings.open_seconds)
    moved = {"since": now, "changed_by": actor, "probe": None, "probe_deadline": None}
    if rule == "count":
        failures = c.failures + 1
        if failures >= settings.failure_threshold:
            return _to(c, S.OPEN, failures=failures, last_error=error, open_until=now + opened, **moved)
        return dataclasses.replace(c, failures=failures, last_error=error, changed_by=actor)
    if rule == "reset":
        return None if c.failures == 0 else dataclasses.replace(c, failures=0, changed_by=actor)
    if rule == "note":
        return dataclasses.replace(c, failures=c.failures + 1, last_error=error)
    if rule == "half_open":
        if c.manual or (event is E.PROBE and (c.open_until is None or now < c.open_until)):
            return None
        return _to(c, S.HALF_OPEN, **{**moved, "probe": probe, "probe_deadline": probe_deadline})
    if rule == "reopen":
        return _to(c, S.OPEN, failures=c.failures + 1, last_error=error, open_until=now + opened, **moved)
    if rule == "close":
        return _to(c, S.CLOSED, failures=0, open_until=None, **moved)
    if rule == "operator_open":
        return _to(c, S.OPEN, manual=True, open_until=None, **moved)
    return _to(c, S.CLOSED, manual=False, failures=0, open_until=None, **moved)  # operator_close


def _to(c: Circuit, state: CircuitState, **changes: object) -> Circuit:
    return dataclasses.replace(c, state=state, manual=changes.pop("manual", False), **changes)
