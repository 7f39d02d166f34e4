"""What the roles record: step metrics, recoveries, compensations, dead letters and custom events.

A recovery action gives four signals with the same fields: the counter ``sas.recoveries`` (low
cardinality), a span event, a ``sas.supervisor`` log record and the custom event ``sas.recovery`` (a log
record the exporter sends to ``customEvents``, which the alerts in ``infra/`` query: docs/operations.md).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from opentelemetry import trace

from workflow_core.telemetry_instruments import LOGGER_NAME, current

RECOVERY_EVENT = "sas.recovery"
INSTANCE_STALLED_EVENT = "sas.instance_stalled"
DEAD_LETTER_EVENT = "sas.message_dead_lettered"
EVENTS_LOGGER_NAME = "sas.events"

# The attribute the Azure Monitor exporter turns into a customEvents row.
CUSTOM_EVENT_ATTRIBUTE = "microsoft.custom_event.name"
ERROR_TYPE = "error.type"
ERROR_TYPE_OTHER = "_OTHER"  # the semantic conventions' fallback when the error class is unknown
DESTINATION = "messaging.destination.name"

OUTCOME_OK = "ok"
OUTCOME_ERROR = "error"  # the action failed (it will be retried)
OUTCOME_COMPENSATION_FAILED = "compensation_failed"  # a compensator gave up: needs an operator

STEP_SUCCEEDED = "succeeded"
STEP_FAILED = "failed"
STEP_TIMED_OUT = "timed_out"
COMPENSATED = "compensated"

log = logging.getLogger(LOGGER_NAME)
events_log = logging.getLogger(EVENTS_LOGGER_NAME)
# Events are information, not warnings: make sure they are created whatever the root logger's level.
events_log.setLevel(logging.INFO)

# Names a ``logging.LogRecord`` already uses: an ``extra`` key among them would raise KeyError.
_RESERVED_LOG_KEYS = frozenset(
    vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None)).keys() | {"message", "asctime"}
)


def _log_key(key: str) -> str:
    return f"sas_{key}" if key in _RESERVED_LOG_KEYS else key


def _attribute_value(value: Any) -> str | bool | int | float:
    return value if isinstance(value, str | bool | int | float) else str(value)


def record_recovery(
    instance_id: str,
    step_id: str,
    attempt: int | None,
    action: str,
    outcome: str,
    *,
    workflow: str | None = None,
    error_type: str | None = None,
    **attrs: Any,
) -> None:
    """Count one recovery action (``sas.recoveries``) and describe it (span event, log record, custom
    event); keywords beyond the counter's dimensions stay out of metrics (high cardinality)."""
    instruments = current()
    workflow = workflow or "unknown"
    failure = {ERROR_TYPE: error_type or ERROR_TYPE_OTHER} if outcome != OUTCOME_OK else {}
    instruments.recovery.add(1, {"action": action, "outcome": outcome, "workflow": workflow, **failure})
    if outcome == OUTCOME_COMPENSATION_FAILED:
        instruments.compensation_failed.add(1, {"workflow": workflow})
        instruments.compensations.add(1, {"workflow": workflow, "outcome": outcome, **failure})

    fields: dict[str, Any] = {
        "instance_id": instance_id,
        "step_id": step_id,
        "attempt": attempt,
        "action": action,
        "outcome": outcome,
        "workflow": workflow,
        **attrs,
    }
    event_attributes = {f"sas.{k}": _attribute_value(v) for k, v in fields.items() if v is not None}
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(RECOVERY_EVENT, attributes=event_attributes)

    level = logging.WARNING if outcome in (OUTCOME_ERROR, OUTCOME_COMPENSATION_FAILED) else logging.INFO
    log.log(
        level,
        "recovery %s on %s/%s attempt %s: %s%s",
        action,
        instance_id,
        step_id,
        attempt,
        outcome,
        f" ({attrs['reason']})" if attrs.get("reason") else "",
        extra={_log_key(k): v for k, v in fields.items()},
    )
    emit_event(RECOVERY_EVENT, **fields, error_type=error_type)


def record_compensation_failed(instance_id: str, step_id: str, attempt: int | None, **attrs: Any) -> None:
    """:func:`record_recovery` of a compensator giving up (keywords: ``workflow``, ``error``,
    ``error_type``...); it counts ``sas.compensation_failures`` and ``sas.compensations``: do not also
    call :func:`record_compensation_finished`."""
    record_recovery(
        instance_id, step_id, attempt, "finish_compensation", OUTCOME_COMPENSATION_FAILED, **attrs
    )


def record_step_finished(
    workflow: str,
    step: str,
    outcome: str,
    *,
    duration_s: float | None = None,
    attempts: int | None = None,
    error_type: str | None = None,
) -> None:
    """``attempts``: only when the outcome is final for the step; ``step`` is the definition's step
    name (low cardinality), never an id."""
    instruments = current()
    dimensions = {"workflow": workflow or "unknown", "step": step, "outcome": outcome}
    if outcome != STEP_SUCCEEDED:
        dimensions[ERROR_TYPE] = error_type or ("timeout" if outcome == STEP_TIMED_OUT else ERROR_TYPE_OTHER)
    if duration_s is not None:
        instruments.step_duration.record(max(0.0, float(duration_s)), dimensions)
    if attempts is not None:
        instruments.step_attempts.record(int(attempts), dimensions)


def record_dispatch_started(
    workflow: str, step: str, *, dispatched_at: datetime, started_at: datetime
) -> float:
    """Record the queue wait (``dispatched_at`` from the ledger, not the message); skew counts as 0."""
    wait = max(0.0, (started_at - dispatched_at).total_seconds())
    current().queue_wait.record(wait, {"workflow": workflow or "unknown", "step": step})
    return wait


def record_compensation_finished(workflow: str) -> None:
    """A failed compensation is counted by :func:`record_compensation_failed` instead."""
    current().compensations.add(1, {"workflow": workflow or "unknown", "outcome": COMPENSATED})


def record_dead_letter(
    queue: str, *, reason: str | None = None, workflow: str | None = None, **attrs: Any
) -> None:
    """``queue``: the live queue's name; ``error.type`` is the dead-letter reason; ``attrs`` (such as
    ``instance_id``, ``step_id``) go to the event only."""
    workflow = workflow or "unknown"
    current().dead_lettered.add(
        1, {DESTINATION: queue, "workflow": workflow, ERROR_TYPE: reason or ERROR_TYPE_OTHER}
    )
    emit_event(DEAD_LETTER_EVENT, queue=queue, reason=reason, workflow=workflow, **attrs)


def emit_event(event_name: str, /, **attributes: Any) -> None:
    """A log record on ``sas.events`` carrying ``microsoft.custom_event.name``, which the Azure Monitor
    exporter sends to ``customEvents``. ``None`` values are dropped; keep the attributes small."""
    extra: dict[str, Any] = {_log_key(k): _attribute_value(v) for k, v in attributes.items() if v is not None}
    extra[CUSTOM_EVENT_ATTRIBUTE] = event_name
    events_log.info(event_name, extra=extra)


def record_instance_stalled(instance_id: str, *, workflow: str | None, action: str, **attrs: Any) -> None:
    """Counted by the stalled-instances alert."""
    emit_event(
        INSTANCE_STALLED_EVENT,
        workflow=workflow or "unknown",
        instance_id=instance_id,
        action=action,
        **attrs,
    )
