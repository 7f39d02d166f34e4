"""The step ledger: what every step is, who owns it, its status and its deadline, guarded by ETags."""

from workflow_core.ledger.entities import decode_json, encode_json
from workflow_core.ledger.errors import (
    ConcurrencyConflict,
    IllegalInstanceTransition,
    IllegalTransition,
    InstanceAlreadyExists,
    InstanceConflict,
    InstanceNotFound,
    InvalidLedgerInput,
    LedgerError,
    StepNotFound,
    StepsAlreadyExist,
)
from workflow_core.ledger.instance import (
    SUPERVISED_INSTANCE_STATUSES,
    InstanceRecord,
    InstanceStatus,
)
from workflow_core.ledger.instance_store import MAX_STEPS_WITH_INSTANCE, InstanceHandle, outcome_json
from workflow_core.ledger.model import (
    ALLOWED_TRANSITIONS,
    ATTENTION_STATUSES,
    DEADLINE_STATUSES,
    AuditEntry,
    NewStep,
    StepRecord,
    StepStatus,
)
from workflow_core.ledger.store import StepLedger
