"""Moving an agent's circuit: outcomes recorded by the result handler, the probe taken by a dispatch,
an operator's open or close. Each move is one entity-group transaction of the agent's partition: the
circuit row, If-Match the version read, and its audit row; a lost race re-reads and re-decides."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from azure.core.exceptions import HttpResponseError
from azure.data.tables import TableClient, TableTransactionError

from workflow_core import clock, telemetry_instruments
from workflow_core.ledger import AuditEntry, StepRecord
from workflow_core.ledger.families import AUDIT_PREFIX
from workflow_core.limits.circuit_rules import STATE_VALUES, Circuit, CircuitEvent, CircuitState, next_circuit
from workflow_core.limits.rows import audit_entity, circuit_entity, guarded, partition_of, read_rows
from workflow_core.workflows.loader import agent_pools
from workflow_core.workflows.pools import CircuitSettings

log = logging.getLogger(__name__)

MAX_RACES = 5
_OPERATOR_EVENTS = (CircuitEvent.OPERATOR_OPEN, CircuitEvent.OPERATOR_CLOSE)


class CircuitConflict(RuntimeError):
    """The circuit kept changing under us (MAX_RACES lost races)."""


def move_circuit(
    table: TableClient,
    agent: str,
    settings: CircuitSettings,
    event: CircuitEvent,
    *,
    actor: str,
    reason: str,
    error: str | None = None,
    probe: str | None = None,
    probe_deadline: datetime | None = None,
    expect: Callable[[Circuit], bool] | None = None,
    now: datetime | None = None,
) -> tuple[Circuit, bool]:
    """Apply ``event``; the circuit as it stands and whether this call changed it. ``expect``: apply
    only while it holds for the circuit read (the probe: only the one a dispatch saw)."""
    for _ in range(MAX_RACES):
        current = read_rows(table, agent).circuit
        at = now or clock.utcnow()
        if expect is not None and not expect(current):
            return current, False
        moved = next_circuit(
            current, event, at, settings, error=error, probe=probe, probe_deadline=probe_deadline, actor=actor
        )
        if moved is None:
            return current, False
        moved = dataclasses.replace(moved, version=current.version + 1)
        ops: list[tuple] = [guarded(circuit_entity(agent, moved), current.etag)]
        if moved.state is not current.state or event in _OPERATOR_EVENTS:  # audited
            states = current.state.value, moved.state.value
            ops.append(
                ("create", audit_entity(agent, moved.version, at, actor, event.value, *states, reason))
            )
        try:
            table.submit_transaction(ops)
        except (TableTransactionError, HttpResponseError) as exc:
            log.info("circuit of %s changed under %s (%s): re-reading", agent, event.value, exc)
            continue
        if moved.state is not current.state:
            log.warning("circuit of %s: %s -> %s (%s)", agent, current.state.value, moved.state.value, reason)
            gauge = telemetry_instruments.current().circuit_state  # sas.circuit.state, per agent
            gauge.set(STATE_VALUES[moved.state], {"sas.agent": agent})
        return moved, True
    raise CircuitConflict(f"the circuit of {agent} kept changing ({MAX_RACES} lost races)")


@dataclass(frozen=True)
class CircuitView:
    agent: str
    circuit: Circuit
    max_in_flight: int | None
    in_flight: int  # slots held
    waiting: int  # steps waiting for a slot

    def to_json(self) -> dict[str, Any]:
        c = self.circuit
        names = ("manual", "failures", "since", "open_until", "last_error", "changed_by")
        shown = {k: v.isoformat() if isinstance(v := getattr(c, k), datetime) else v for k in names}
        slots = {"max_in_flight": self.max_in_flight, "in_flight": self.in_flight, "waiting": self.waiting}
        return {"agent": self.agent, "state": c.state.value, **shown, **slots}

    def attention_text(self) -> str | None:
        """The inbox line while it is not closed."""
        c = self.circuit
        if c.state is CircuitState.CLOSED:
            return None
        since = c.since.strftime("%H:%M") if c.since else "?"
        what = "open" if c.state is CircuitState.OPEN else "half-open (one probe in flight)"
        how = " by an operator" if c.manual else ""
        last = f", last {c.last_error[:200]}" if c.last_error else ""
        return f"circuit {what}{how} for {self.agent} since {since}: {c.failures} failures{last}"


class CircuitStore:
    """The agents' circuits (``Services.circuits``): outcomes, operators' moves, and what the API, the
    inbox, ``sas circuit`` and ``sas doctor`` show."""

    def __init__(self, ledger: Any) -> None:
        self.table = ledger.table_client()

    def record_outcome(
        self, agent: str, settings: CircuitSettings, *, ok: bool, error: str | None = None
    ) -> Circuit:
        """A recorded outcome of ``agent``: a success resets or closes, a retryable failure counts
        (the caller leaves non-retryable ones out)."""
        event = CircuitEvent.SUCCESS if ok else CircuitEvent.FAILURE
        why = "a success was recorded" if ok else f"a retryable failure was recorded: {error or 'no reason'}"
        return move_circuit(self.table, agent, settings, event, actor="results", reason=why, error=error)[0]

    def operator_move(
        self, agent: str, settings: CircuitSettings, *, open_it: bool, actor: str, reason: str
    ) -> Circuit:
        """An operator's open (held until an operator closes it) or close (count reset), audited."""
        event = CircuitEvent.OPERATOR_OPEN if open_it else CircuitEvent.OPERATOR_CLOSE
        return move_circuit(self.table, agent, settings, event, actor=actor, reason=reason)[0]

    def states(self, agents: dict[str, Any] | None = None) -> list[CircuitView]:
        """Every agent with declared limits (or ``agents``), its circuit and slots (``GET
        /api/circuits``, the inbox, ``sas doctor``): one query per such agent, none when none is
        declared."""
        if agents is None:
            agents = {a: lim for a, lim in agent_pools().agents.items() if lim.active}
        views = []
        for agent in sorted(agents):
            rows = read_rows(self.table, agent)
            held = sum(1 for s in rows.slots.values() if s.holder is not None)
            views.append(
                CircuitView(agent, rows.circuit, agents[agent].max_in_flight, held, len(rows.waiters))
            )
        return views

    def audit(self, agent: str, limit: int = 200) -> list[dict[str, Any]]:
        """The circuit's audit rows, oldest first (at most ``limit``, the newest)."""
        rows = self.table.query_entities(
            "PartitionKey eq @pk and RowKey gt @lo and RowKey lt @hi",
            parameters={"pk": partition_of(agent), "lo": AUDIT_PREFIX, "hi": AUDIT_PREFIX + "~"},
        )
        shown = {"at": "At", "actor": "Actor", "action": "Action", "from": "FromState", "to": "ToState"}
        shown["reason"] = "Reason"
        return [{k: e.get(p, "") for k, p in shown.items()} for e in rows][-limit:]


WAITING_ACTION = "waiting"  # the dispatch's audit note when a step joins its agent's queue (limits_gate)


def waiting_steps(steps: Iterable[StepRecord], audit: Iterable[AuditEntry]) -> dict[str, str]:
    """step id -> why it waits, for each step its agent's limits hold back now, read off the ledger:
    the dispatch noted its *next* attempt ``waiting`` (once, on joining the queue) and it has not started."""
    pending = {s.step_id: s.attempt + 1 for s in steps if s.status.value in ("Pending", "Retrying")}
    noted = [a for a in audit if a.action == WAITING_ACTION]
    return {a.step_id: a.reason for a in noted if pending.get(a.step_id) == a.attempt}
