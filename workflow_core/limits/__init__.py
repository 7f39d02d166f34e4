"""Per-agent concurrency slots and circuit breakers, as ledger rows behind the dispatch
(docs/agent-limits.md). Nothing here runs for an agent without declared limits."""

from workflow_core.limits.circuit_rules import Circuit, CircuitEvent, CircuitState, next_circuit
from workflow_core.limits.circuits import CircuitStore, CircuitView
from workflow_core.limits.gate import Admission, LimitsStore
from workflow_core.limits.rows import Holder
