"""The step ledger: what every step is, who owns it, its status and its deadline, guarded by ETags."""

from workflow_core.ledger.errors import (
    ConcurrencyConflict,
    IllegalTransition,
    InvalidLedgerInput,
    LedgerError,
    StepNotFound,
    StepsAlreadyExist,
)
from workflow_core.ledger.model import (
    ALLOWED_TRANSITIONS,
    ATTENTION_STATUSES,
    DEADLINE_STATUSES,
    TERMINAL_STATUSES,
    AuditEntry,
    NewStep,
    StepRecord,
    StepStatus,
)
from workflow_core.ledger.store import LedgerStats, StepLedger, decode_json, encode_json

__all__ = [
    "ALLOWED_TRANSITIONS",
    "ATTENTION_STATUSES",
    "DEADLINE_STATUSES",
    "TERMINAL_STATUSES",
    "AuditEntry",
    "ConcurrencyConflict",
    "IllegalTransition",
    "InvalidLedgerInput",
    "LedgerError",
    "LedgerStats",
    "NewStep",
    "StepLedger",
    "StepNotFound",
    "StepRecord",
    "StepStatus",
    "StepsAlreadyExist",
    "decode_json",
    "encode_json",
]
