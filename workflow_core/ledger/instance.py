"""What a workflow instance is in the ledger: its status machine and its record.

The instance record says what the *scheduler* promised: its ``scheduler_deadline`` is when it will
have moved the workflow on, so the watchdog finds a dead scheduler (between steps, before it ever
started) when it passes. It lives next to its steps (RowKey :data:`INSTANCE_ROW`), so it changes in
the same entity-group transaction as the step that moves the workflow.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from workflow_core.ledger.model import AwareDatetime, InstanceId, LedgerText, entity_properties

SchedulerLostPolicy = Literal["resume", "compensate"]


class InstanceStatus(StrEnum):
    RUNNING = "Running"  # a scheduler owns it (or is about to: written before the orchestration starts)
    SUCCEEDED = "Succeeded"
    COMPENSATING = "Compensating"  # its completed steps are being undone
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"  # a compensator gave up: needs an operator
    FAILED = "Failed"  # could neither finish, resume nor compensate on its own: needs an operator
    CANCELLED = "Cancelled"  # its orchestration could not be started: nothing of it ran
    # An operator stopped it: its done steps stay done, no later step runs, nothing automatic resumes or
    # compensates it; in the inbox until an operator cancels it (Stopped -> Compensating).
    STOPPED = "Stopped"
    # Retention is deleting it (workflow_core/retention.py): never live again; its rows may be half gone.
    PURGING = "Purging"


IS = InstanceStatus

# The instance state machine. Running -> Running is a resume (a new scheduler for the same instance);
# Compensating -> Compensating a restarted compensation; CompensationFailed -> Compensating an operator's
# retry; Failed -> Running an operator's resume; Running/Failed -> Stopped an operator's stop, and
# Stopped -> Compensating the cancel that undoes what it left done.
INSTANCE_TRANSITIONS: dict[InstanceStatus, frozenset[InstanceStatus]] = {
    IS.RUNNING: frozenset({IS.RUNNING, IS.SUCCEEDED, IS.COMPENSATING, IS.FAILED, IS.CANCELLED, IS.STOPPED}),
    IS.COMPENSATING: frozenset({IS.COMPENSATING, IS.COMPENSATED, IS.COMPENSATION_FAILED}),
    IS.COMPENSATION_FAILED: frozenset({IS.COMPENSATING}),
    IS.FAILED: frozenset({IS.RUNNING, IS.COMPENSATING, IS.CANCELLED, IS.STOPPED}),
    IS.STOPPED: frozenset({IS.COMPENSATING}),
    IS.SUCCEEDED: frozenset({IS.PURGING}),
    IS.COMPENSATED: frozenset({IS.PURGING}),
    IS.CANCELLED: frozenset({IS.PURGING}),
    IS.PURGING: frozenset(),
}
# Statuses in which a scheduler (workflow or compensation orchestration) must keep the promise of
# its ``scheduler_deadline``: each has a deadline-index row.
SUPERVISED_INSTANCE_STATUSES = frozenset({IS.RUNNING, IS.COMPENSATING})
# Finished: no automation or operator moves it on (only retention, to Purging and then deletion).
TERMINAL_INSTANCE_STATUSES = frozenset({IS.SUCCEEDED, IS.COMPENSATED, IS.CANCELLED, IS.PURGING})
# What retention may purge (when not flagged for an operator): finished, and not already being purged.
PURGEABLE_INSTANCE_STATUSES = TERMINAL_INSTANCE_STATUSES - {IS.PURGING}


class InstanceRecord(BaseModel):
    """One workflow instance, as persisted (PartitionKey = instance id, RowKey = ``~instance``)."""

    model_config = ConfigDict(frozen=True, validate_assignment=True)

    instance_id: InstanceId
    workflow: str
    version: str  # the pinned definition version: every instance starts pinned
    status: InstanceStatus = InstanceStatus.RUNNING
    orchestration_id: str | None = None  # the workflow orchestration that owns it (its instance id)
    generation: int = Field(default=0, ge=0)  # continue_as_new generation of that orchestration
    owner: str | None = None  # "scheduler", or "supervisor:<tick>" / "operator:<user>" while claimed
    started_at: AwareDatetime = None
    updated_at: AwareDatetime = None
    completed_at: AwareDatetime = None
    business_key: str | None = None
    outcome: LedgerText = None  # JSON: {"status", "failed_step", "error"} once settled
    resume_count: int = Field(default=0, ge=0)
    # restarts of its compensation by the watchdog since an operator last acted (MAX_COMPENSATION_RESTARTS)
    compensation_restarts: int = Field(default=0, ge=0)
    max_resumes: int = Field(default=3, ge=0)
    on_scheduler_lost: SchedulerLostPolicy = "resume"
    scheduler_deadline: AwareDatetime = None
    stalls: int = Field(default=0, ge=0)  # watchdog looks that found a live scheduler not moving
    completions: int = Field(default=0, ge=0)  # completed steps so far: the completion sequence
    needs_attention: bool = False
    attention_reason: LedgerText = None
    last_error: LedgerText = None
    input_ref: LedgerText = None  # JSON of the workflow input (validated at the door)
    index_key: str | None = None  # "<partition>|<row>" of its deadline-index row
    # W3C trace context of the HTTP start (workflow_core.tracing): observability only.
    trace_parent: str | None = None
    trace_state: str | None = None
    etag: str | None = None

    @property
    def supervised(self) -> bool:
        return self.status in SUPERVISED_INSTANCE_STATUSES

    def is_overdue(self, now) -> bool:
        return self.supervised and self.scheduler_deadline is not None and self.scheduler_deadline <= now


# InstanceRecord field -> entity property (the field's name in CamelCase)
INSTANCE_FIELDS = {**entity_properties(InstanceRecord, keys={"instance_id"}), "status": "InstanceStatus"}
INSTANCE_MUTABLE = set(INSTANCE_FIELDS) - {"workflow", "started_at", "status", "input_ref"}
