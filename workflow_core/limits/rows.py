"""An agent's limits rows, one partition of the ledger table per agent, ``~limits~<agent>`` (the rows:
docs/agent-limits.md): one query reads all but the audit, which is what a dispatch needs to decide.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from azure.data.tables import TableClient, UpdateMode

from workflow_core.ledger.entities import if_match
from workflow_core.ledger.families import AUDIT_PREFIX, LIMITS_PREFIX
from workflow_core.ledger.model import camel_case
from workflow_core.limits.circuit_rules import Circuit, CircuitState

CIRCUIT_ROW = "circuit"
SLOT_PREFIX = "slot~"
WAIT_PREFIX = "wait~"
MAX_ERROR_CHARS = 1_000


def partition_of(agent: str) -> str:
    return f"{LIMITS_PREFIX}{agent}"


def slot_key(index: int) -> str:
    return f"{SLOT_PREFIX}{index:03d}"


@dataclass(frozen=True)
class Holder:
    """One attempt of one step: what holds a slot or the probe, or waits."""

    instance_id: str
    step_id: str
    attempt: int

    @property
    def key(self) -> str:
        return f"{self.instance_id}|{self.step_id}|{self.attempt}"

    @property
    def step_key(self) -> str:
        """The step, whatever the attempt: a waiter keeps its place across polls."""
        return hashlib.sha256(f"{self.instance_id}|{self.step_id}".encode()).hexdigest()[:20]

    @classmethod
    def parse(cls, key: str | None) -> Holder | None:
        if not key:
            return None
        instance_id, step_id, attempt = key.rsplit("|", 2)
        return cls(instance_id, step_id, int(attempt))


@dataclass(frozen=True)
class Slot:
    key: str
    holder: Holder | None = None
    deadline: datetime | None = None
    etag: str | None = None  # None: the row does not exist yet


@dataclass(frozen=True)
class Waiter:
    key: str
    holder: Holder
    since: datetime
    seen: datetime
    etag: str
    until: datetime | None = None  # parked: when it asks again at the latest
    orchestration: str | None = None  # parked: whose scheduler waits for ``wake``
    wake: str | None = None  # parked: the event that ends its park early

    @property
    def next_ask(self) -> datetime:
        return max(self.until, self.seen) if self.until else self.seen


@dataclass
class AgentRows:
    agent: str
    circuit: Circuit = field(default_factory=Circuit)
    slots: dict[str, Slot] = field(default_factory=dict)
    waiters: list[Waiter] = field(default_factory=list)  # oldest first


def read_rows(table: TableClient, agent: str) -> AgentRows:
    """Everything of ``agent`` but its audit, in one partition query."""
    rows = AgentRows(agent)
    for e in table.query_entities(
        "PartitionKey eq @pk and RowKey lt @audit",
        parameters={"pk": partition_of(agent), "audit": AUDIT_PREFIX},
    ):
        key, etag = e["RowKey"], e.metadata["etag"]
        if key == CIRCUIT_ROW:
            rows.circuit = circuit_of(e)
        elif key.startswith(SLOT_PREFIX):
            rows.slots[key] = Slot(key, Holder.parse(e.get("Holder")), _time(e.get("Deadline")), etag)
        elif key.startswith(WAIT_PREFIX):
            holder = Holder.parse(e.get("Holder"))
            if holder is not None:
                parked = (_time(e.get("Until")), e.get("Orchestration") or None, e.get("Wake") or None)
                rows.waiters.append(Waiter(key, holder, _time(e["Since"]), _time(e["Seen"]), etag, *parked))
    rows.waiters.sort(key=lambda w: w.key)
    return rows


# Circuit field -> entity property (the field's name in CamelCase); a time is ISO text, None is ""
_CIRCUIT = {f.name: camel_case(f.name) for f in dataclasses.fields(Circuit) if f.name != "etag"}
_CIRCUIT_TIMES = {"since", "open_until", "probe_deadline"}


def circuit_of(e: Any) -> Circuit:
    values = {f: e.get(p) for f, p in _CIRCUIT.items() if e.get(p) not in (None, "")}
    values |= {f: _time(values.get(f)) for f in _CIRCUIT_TIMES}
    values |= {"state": CircuitState(values.get("state", "closed")), "etag": e.metadata["etag"]}
    return Circuit(**values)


def circuit_entity(agent: str, c: Circuit) -> dict[str, Any]:
    entity = {"PartitionKey": partition_of(agent), "RowKey": CIRCUIT_ROW}
    for f, prop in _CIRCUIT.items():
        value = getattr(c, f)
        entity[prop] = _iso(value) if f in _CIRCUIT_TIMES else "" if value is None else value
    entity["State"] = c.state.value
    entity["LastError"] = entity["LastError"][:MAX_ERROR_CHARS]
    return entity


def guarded(entity: dict[str, Any], etag: str | None) -> tuple:
    """The transaction operation writing ``entity`` over the row read with ``etag`` (If-Match), or
    creating it when it was absent (fails if someone created it meanwhile)."""
    if etag is None:
        return ("create", entity)
    return ("update", entity, {"mode": UpdateMode.REPLACE, **if_match(etag)})


def audit_entity(
    agent: str, version: int, at: datetime, actor: str, action: str, before: str, after: str, reason: str
) -> dict[str, Any]:
    return {
        "PartitionKey": partition_of(agent),
        "RowKey": f"{AUDIT_PREFIX}{version:012d}",
        "At": _iso(at),
        "Actor": actor[:200],
        "Action": action,
        "FromState": before,
        "ToState": after,
        "Reason": reason[:4_000],
    }


def _iso(moment: datetime | None) -> str:
    return moment.isoformat() if moment is not None else ""


def _time(text: Any) -> datetime | None:
    if isinstance(text, datetime):
        return text
    return datetime.fromisoformat(text) if text else None
