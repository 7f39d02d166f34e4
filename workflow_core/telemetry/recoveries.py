"""Recovery telemetry: four signals per recovery action, all carrying the same fields.

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
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace

from workflow_core.telemetry.events import attribute_value, emit_event, log_key
from workflow_core.telemetry.instruments import (
    ERROR_TYPE,
    ERROR_TYPE_OTHER,
    LOGGER_NAME,
    OUTCOME_COMPENSATION_FAILED,
    OUTCOME_ERROR,
    OUTCOME_OK,
    RECOVERY_EVENT,
    current,
)

log = logging.getLogger(LOGGER_NAME)


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
    event_attributes = {f"sas.{k}": attribute_value(v) for k, v in fields.items() if v is not None}
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
        extra={log_key(k): v for k, v in fields.items()},
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
