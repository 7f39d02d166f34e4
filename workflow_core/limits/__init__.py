"""Per-agent concurrency slots and circuit breakers, as ledger rows behind the dispatch
(docs/agent-limits.md). Nothing here runs for an agent without declared limits."""

from workflow_core.limits.circuit_rules import Circuit, CircuitEvent, CircuitState, next_circuit
from workflow_core.limits.circuits import (
    CircuitView,
    circuit_audit,
    circuit_states,
    operator_move,
    record_outcome,
)
from workflow_core.limits.gate import Admission, admit, free_expired_slots, release_slot
from workflow_core.limits.rows import Holder

__all__ = [
    "Admission",
    "Circuit",
    "CircuitEvent",
    "CircuitState",
    "CircuitView",
    "Holder",
    "admit",
    "circuit_audit",
    "circuit_states",
    "free_expired_slots",
    "next_circuit",
    "operator_move",
    "record_outcome",
    "release_slot",
]
