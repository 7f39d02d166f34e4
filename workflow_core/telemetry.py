"""Telemetry of the pattern: step metrics, recoveries, compensations, dead letters and custom events.

What the roles record; the instruments and their export are in ``workflow_core/telemetry_instruments.py``.

Four signals per recovery action (:func:`record_recovery`), all carrying the same fields:

* the OpenTelemetry counter ``sas.recoveries`` with the attributes ``action``, ``outcome`` and
  ``workflow`` (low cardinality, so it can be charted and alerted on: the infrastructure's alert
  rules query ``sas.recoveries`` by ``action``, and ``sas.compensation_failures``);
* a span event ``sas.recovery`` on the current span (the watchdog's recovery span of that step), with
  every field;
* a log record on the logger ``sas.supervisor`` whose ``extra`` fields (instance, step, attempt,
  action, outcome, workflow and any further attributes) become ``customDimensions`` of the
  ``traces`` row in Application Insights;
* the custom event ``sas.recovery`` with the same fields (``customEvents`` in Application Insights).

When a compensation ends failed (``outcome="compensation_failed"``) the counter
``sas.compensation_failures`` is incremented as well: a step needs an operator.

Custom events (:func:`emit_event`) are log records on the logger ``sas.events`` carrying the attribute
``microsoft.custom_event.name``, which the Azure Monitor exporter sends to ``customEvents`` (not
``traces``): ``sas.recovery`` (every recovery action), ``sas.instance_stalled`` (the watchdog found an
instance whose scheduler missed its deadline) and ``sas.message_dead_lettered``. The alerts and the
workbook in ``infra/`` query these events; docs/operations.md has the KQL.
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

# The log-record attribute the Azure Monitor exporter turns into a customEvents row (its
# _MICROSOFT_CUSTOM_EVENT_NAME in azure.monitor.opentelemetry.exporter._constants).
CUSTOM_EVENT_ATTRIBUTE = "microsoft.custom_event.name"
# OpenTelemetry attribute names used on the instruments and events.
ERROR_TYPE = "error.type"
ERROR_TYPE_OTHER = "_OTHER"  # the semantic conventions' fallback when the error class is unknown
DESTINATION = "messaging.destination.name"

# Outcome vocabulary. Actions are free-form names chosen by the recovering component (the watchdog's
# are listed in docs/supervisor.md); outcomes are one of these.
OUTCOME_OK = "ok"  # the action was carried out
OUTCOME_ERROR = "error"  # the action was attempted and failed (it will be retried)
OUTCOME_COMPENSATION_FAILED = "compensation_failed"  # a compensator gave up: needs an operator

# Outcomes of a step attempt (sas.step.duration / sas.step.attempts) and of a compensation.
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
    if isinstance(value, str | bool | int | float):
        return value
    return str(value)


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
    """Count one recovery action and describe it (span event, ``sas.supervisor`` log record and the
    custom event ``sas.recovery``).

    ``action``: what was done (``resend``, ``fail_step``, ``start_compensation``...). ``outcome``:
    ``ok``, ``error`` or ``compensation_failed`` (see the ``OUTCOME_*`` constants). ``workflow`` is the
    third counter dimension, and a failed outcome adds ``error.type`` (``error_type``, e.g. an
    exception class name; ``_OTHER`` when not given); every other keyword lands only in the span
    event, the log record and the custom event (keep high-cardinality values such as ids out of
    metric dimensions).
    """
    instruments = current()
    dimensions = {"action": action, "outcome": outcome, "workflow": workflow or "unknown"}
    if outcome != OUTCOME_OK:
        dimensions[ERROR_TYPE] = error_type or ERROR_TYPE_OTHER
    instruments.recovery.add(1, dimensions)
    if outcome == OUTCOME_COMPENSATION_FAILED:
        instruments.compensation_failed.add(1, {"workflow": workflow or "unknown"})
        instruments.compensations.add(
            1,
            {
                "workflow": workflow or "unknown",
                "outcome": OUTCOME_COMPENSATION_FAILED,
                ERROR_TYPE: error_type or ERROR_TYPE_OTHER,
            },
        )

    fields: dict[str, Any] = {
        "instance_id": instance_id,
        "step_id": step_id,
        "attempt": attempt,
        "action": action,
        "outcome": outcome,
        "workflow": workflow or "unknown",
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
    if error_type is not None:
        fields["error_type"] = error_type
    emit_event(RECOVERY_EVENT, **fields)


def record_compensation_failed(
    instance_id: str,
    step_id: str,
    attempt: int | None,
    *,
    workflow: str | None = None,
    error: str | None = None,
    error_type: str | None = None,
    **attrs: Any,
) -> None:
    """A compensator gave up (the step is now CompensationFailed): counts ``sas.compensation_failures``
    and ``sas.compensations`` with outcome ``compensation_failed`` (do not also call
    :func:`record_compensation_finished` for it)."""
    record_recovery(
        instance_id,
        step_id,
        attempt,
        "finish_compensation",
        OUTCOME_COMPENSATION_FAILED,
        workflow=workflow,
        error=error,
        error_type=error_type,
        **attrs,
    )


# ---- metrics of the pattern's normal path ----------------------------------------------------


def _outcome_dimensions(workflow: str, step: str, outcome: str, error_type: str | None) -> dict[str, str]:
    dimensions = {"workflow": workflow or "unknown", "step": step, "outcome": outcome}
    if outcome != STEP_SUCCEEDED:
        default = "timeout" if outcome == STEP_TIMED_OUT else ERROR_TYPE_OTHER
        dimensions[ERROR_TYPE] = error_type or default
    return dimensions


def record_step_finished(
    workflow: str,
    step: str,
    outcome: str,
    *,
    duration_s: float | None = None,
    attempts: int | None = None,
    error_type: str | None = None,
) -> None:
    """An attempt of a step ended: ``outcome`` is ``succeeded``, ``failed`` or ``timed_out``
    (``STEP_*``); ``error_type`` names the failure's class (an exception class name, a dead-letter
    reason; ``timeout`` is the default for ``timed_out``, ``_OTHER`` otherwise).

    ``duration_s``: how long the agent worked on this attempt -> ``sas.step.duration``.
    ``attempts``: pass it only when this outcome is final for the step (it succeeded, or failed with
    no retry left) -> ``sas.step.attempts``. ``step`` is the step's name in the workflow definition
    (low cardinality), never an instance id.
    """
    instruments = current()
    dimensions = _outcome_dimensions(workflow, step, outcome, error_type)
    if duration_s is not None:
        instruments.step_duration.record(max(0.0, float(duration_s)), dimensions)
    if attempts is not None:
        instruments.step_attempts.record(int(attempts), dimensions)


def record_dispatch_started(
    workflow: str, step: str, *, dispatched_at: datetime, started_at: datetime
) -> float:
    """An agent started a step that was dispatched at ``dispatched_at`` (read it from the ledger, not
    from the message): records the queue wait in ``sas.step.queue_wait.duration`` and returns it in
    seconds (negative clock skew counts as 0)."""
    wait = max(0.0, (started_at - dispatched_at).total_seconds())
    current().queue_wait.record(wait, {"workflow": workflow or "unknown", "step": step})
    return wait


def record_compensation_finished(workflow: str) -> None:
    """A step's compensation succeeded: counts ``sas.compensations`` with outcome ``compensated`` (a
    failed compensation is counted by :func:`record_compensation_failed`)."""
    current().compensations.add(1, {"workflow": workflow or "unknown", "outcome": COMPENSATED})


def record_dead_letter(
    queue: str,
    *,
    reason: str | None = None,
    workflow: str | None = None,
    instance_id: str | None = None,
    step_id: str | None = None,
    **attrs: Any,
) -> None:
    """A message reached the dead-letter queue of ``queue`` (the live queue's name): counts
    ``sas.dead_lettered_messages`` (``error.type`` = the dead-letter reason) and emits the custom
    event ``sas.message_dead_lettered`` with the ids."""
    current().dead_lettered.add(
        1,
        {DESTINATION: queue, "workflow": workflow or "unknown", ERROR_TYPE: reason or ERROR_TYPE_OTHER},
    )
    emit_event(
        DEAD_LETTER_EVENT,
        queue=queue,
        reason=reason,
        workflow=workflow or "unknown",
        instance_id=instance_id,
        step_id=step_id,
        **attrs,
    )


# ---- custom events ------------------------------------------------------------------------------------


def emit_event(event_name: str, /, **attributes: Any) -> None:
    """Emit the custom event ``event_name`` (``customEvents`` in Application Insights).

    A log record on the logger ``sas.events`` carrying ``microsoft.custom_event.name``: the Azure Monitor
    exporter sends such a record as an event named after that attribute, with the other attributes as
    ``customDimensions``. ``None`` values are dropped; non-primitive values are sent as text. Keep the
    attributes small: ids, names, outcomes.
    """
    extra: dict[str, Any] = {_log_key(k): _attribute_value(v) for k, v in attributes.items() if v is not None}
    extra[CUSTOM_EVENT_ATTRIBUTE] = event_name
    events_log.info(event_name, extra=extra)


def record_instance_stalled(instance_id: str, *, workflow: str | None, action: str, **attrs: Any) -> None:
    """The watchdog found an instance whose scheduler missed its deadline and did ``action`` about it
    (resume, compensate, ...): the custom event ``sas.instance_stalled`` the stalled-instances alert
    counts."""
    emit_event(
        INSTANCE_STALLED_EVENT,
        workflow=workflow or "unknown",
        instance_id=instance_id,
        action=action,
        **attrs,
    )
