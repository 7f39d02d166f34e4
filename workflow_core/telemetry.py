"""Telemetry of the pattern: step metrics, recoveries, compensations, dead letters and custom events.

Instruments (OpenTelemetry names in the project's ``sas.`` namespace; failures carry ``error.type``, the
OpenTelemetry attribute for a low-cardinality error class, ``_OTHER`` when the caller has none). Per the
OpenTelemetry naming rules, counters of discrete things are plural (``sas.recoveries``, not the event's
name ``sas.recovery``), gauges and histograms are not:

==================================  =========  ==============  ========================================
name                                kind       unit            attributes
==================================  =========  ==============  ========================================
``sas.step.duration``               histogram  ``s``           workflow, step, outcome (+ error.type)
``sas.step.attempts``               histogram  ``{attempt}``   workflow, step, outcome (+ error.type)
``sas.step.queue_wait.duration``    histogram  ``s``           workflow, step
``sas.work.in_flight``              gauge      ``{item}``      (workflow), from a caller's callback (the
                                                               app's: workflow_core/ledger_gauges.py)
``sas.instance.overdue``            gauge      ``{instance}``  (workflow), from a caller's callback
``sas.recoveries``                  counter    ``{action}``    action, outcome, workflow (+ error.type)
``sas.compensation_failures``       counter    ``{step}``      workflow
``sas.compensations``               counter    ``{step}``      workflow, outcome (+ error.type)
``sas.dead_lettered_messages``      counter    ``{message}``   messaging.destination.name, workflow,
                                                               error.type (the dead-letter reason)
==================================  =========  ==============  ========================================

Custom events (:func:`emit_event`): a log record on the logger ``sas.events`` carrying the attribute
``microsoft.custom_event.name``, which the Azure Monitor exporter sends to ``customEvents`` (not
``traces``): ``sas.recovery`` (every recovery action), ``sas.instance_stalled`` (the watchdog found an
instance whose scheduler missed its deadline) and ``sas.message_dead_lettered``. The alerts and the
workbook in ``infra/`` query these events; docs/operations.md has the KQL.

Four signals per recovery action, all carrying the same fields:

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

Nothing is exported unless :func:`configure_telemetry` found ``APPLICATIONINSIGHTS_CONNECTION_STRING``:
without it the OpenTelemetry API's no-op providers swallow the signals (logs still go to the normal
Python logging handlers, which the Functions host forwards). Tests install real SDK providers with
:func:`use_providers`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace

if TYPE_CHECKING:
    from workflow_core.settings import Settings

RECOVERY_COUNTER = "sas.recoveries"
COMPENSATION_FAILED_COUNTER = "sas.compensation_failures"
COMPENSATIONS_COUNTER = "sas.compensations"
DEAD_LETTER_COUNTER = "sas.dead_lettered_messages"
STEP_DURATION_HISTOGRAM = "sas.step.duration"
STEP_ATTEMPTS_HISTOGRAM = "sas.step.attempts"
QUEUE_WAIT_HISTOGRAM = "sas.step.queue_wait.duration"
WORK_IN_FLIGHT_GAUGE = "sas.work.in_flight"
INSTANCES_OVERDUE_GAUGE = "sas.instance.overdue"
RECOVERY_EVENT = "sas.recovery"
INSTANCE_STALLED_EVENT = "sas.instance_stalled"
DEAD_LETTER_EVENT = "sas.message_dead_lettered"
LOGGER_NAME = "sas.supervisor"
EVENTS_LOGGER_NAME = "sas.events"
INSTRUMENTATION_NAME = "sas.supervisor"

# The log-record attribute the Azure Monitor exporter turns into a customEvents row (its
# _MICROSOFT_CUSTOM_EVENT_NAME in azure.monitor.opentelemetry.exporter._constants).
CUSTOM_EVENT_ATTRIBUTE = "microsoft.custom_event.name"
# OpenTelemetry attribute names used on the instruments.
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

# What an observable gauge's callback returns: one number, or numbers per workflow name.
GaugeReading = int | float | Mapping[str, int | float]

# Names a ``logging.LogRecord`` already uses: an ``extra`` key among them would raise KeyError.
_RESERVED_LOG_KEYS = frozenset(
    vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None)).keys() | {"message", "asctime"}
)


@dataclass
class _Instruments:
    recovery: metrics.Counter
    compensation_failed: metrics.Counter
    compensations: metrics.Counter
    dead_lettered: metrics.Counter
    step_duration: metrics.Histogram
    step_attempts: metrics.Histogram
    queue_wait: metrics.Histogram
    tracer: trace.Tracer


_lock = threading.Lock()
_instruments: _Instruments | None = None
_meter_provider: metrics.MeterProvider | None = None
_tracer_provider: trace.TracerProvider | None = None
_configured = False
# Callbacks of the observable gauges, set by register_ledger_gauges (None = nothing observed).
_gauge_sources: dict[str, Callable[[], GaugeReading] | None] = {
    WORK_IN_FLIGHT_GAUGE: None,
    INSTANCES_OVERDUE_GAUGE: None,
}


def _build(
    meter_provider: metrics.MeterProvider | None, tracer_provider: trace.TracerProvider | None
) -> _Instruments:
    meter = (
        meter_provider.get_meter(INSTRUMENTATION_NAME)
        if meter_provider is not None
        else metrics.get_meter(INSTRUMENTATION_NAME)
    )
    tracer = (
        tracer_provider.get_tracer(INSTRUMENTATION_NAME)
        if tracer_provider is not None
        else trace.get_tracer(INSTRUMENTATION_NAME)
    )
    instruments = _Instruments(
        recovery=meter.create_counter(
            RECOVERY_COUNTER,
            unit="{action}",
            description="Recovery actions taken on workflow steps (retry, re-send, compensation...)",
        ),
        compensation_failed=meter.create_counter(
            COMPENSATION_FAILED_COUNTER,
            unit="{step}",
            description="Compensations that ended failed: the step needs an operator",
        ),
        compensations=meter.create_counter(
            COMPENSATIONS_COUNTER,
            unit="{step}",
            description="Finished compensations of a step, by outcome (compensated, compensation_failed)",
        ),
        dead_lettered=meter.create_counter(
            DEAD_LETTER_COUNTER,
            unit="{message}",
            description="Messages that reached a dead-letter queue, by queue and dead-letter reason",
        ),
        step_duration=meter.create_histogram(
            STEP_DURATION_HISTOGRAM,
            unit="s",
            description="How long an agent worked on one attempt of a step, by outcome",
        ),
        step_attempts=meter.create_histogram(
            STEP_ATTEMPTS_HISTOGRAM,
            unit="{attempt}",
            description="Attempts a step took to reach its final outcome",
        ),
        queue_wait=meter.create_histogram(
            QUEUE_WAIT_HISTOGRAM,
            unit="s",
            description="Time from a step's dispatch (ledger) to its agent starting it: the queue wait",
        ),
        tracer=tracer,
    )
    meter.create_observable_gauge(
        WORK_IN_FLIGHT_GAUGE,
        callbacks=[_gauge_callback(WORK_IN_FLIGHT_GAUGE)],
        unit="{item}",
        description="Work the watchdog watches in flight: supervised workflow instances, and steps "
        "dispatched or running with a deadline-index row of their own",
    )
    meter.create_observable_gauge(
        INSTANCES_OVERDUE_GAUGE,
        callbacks=[_gauge_callback(INSTANCES_OVERDUE_GAUGE)],
        unit="{instance}",
        description="Workflow instances past their scheduler deadline, as the ledger counts them",
    )
    return instruments


def _gauge_callback(name: str) -> Callable[[metrics.CallbackOptions], Iterable[metrics.Observation]]:
    def observe(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        source = _gauge_sources.get(name)
        if source is None:
            return []
        try:
            reading = source()
        except Exception:  # a failing reading must not break the export of every other metric
            log.exception("gauge %s: the callback failed", name)
            return []
        if isinstance(reading, Mapping):
            return [metrics.Observation(value, {"workflow": workflow}) for workflow, value in reading.items()]
        return [metrics.Observation(reading)]

    return observe


def _get() -> _Instruments:
    global _instruments
    with _lock:
        if _instruments is None:
            # The API's global providers are proxies until an SDK provider is installed, so
            # instruments made here start exporting as soon as configure_telemetry() runs.
            _instruments = _build(_meter_provider, _tracer_provider)
        return _instruments


def use_providers(
    meter_provider: metrics.MeterProvider | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> None:
    """Send this module's signals to these providers instead of the global ones (``None``: global).

    For tests (the SDK's in-memory readers/exporters) and embedders that manage their own providers.
    """
    global _instruments, _meter_provider, _tracer_provider
    with _lock:
        _meter_provider = meter_provider
        _tracer_provider = tracer_provider
        _instruments = None


def tracer() -> trace.Tracer:
    """The tracer recovery spans (e.g. a watchdog tick) should be started with."""
    return _get().tracer


def configure_telemetry(
    settings: Settings | None = None, *, logger_name: str = "sas", **azure_monitor_options: Any
) -> bool:
    """Export to Application Insights if ``APPLICATIONINSIGHTS_CONNECTION_STRING`` is set; once per process.

    Returns True when Azure Monitor is (now or already) configured, False when nothing is exported.
    ``logger_name`` limits which loggers are exported as ``traces`` (default ``sas``: the recovery
    records of ``sas.supervisor`` and any other ``sas.*`` logger; the Functions host already forwards
    ordinary logs, so exporting the root logger as well would duplicate them). ``settings`` defaults
    to reading the environment variable directly, so it works before the other settings are valid.
    """
    global _configured
    connection_string = (
        settings.app_insights_connection_string
        if settings is not None
        else (os.environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING") or "").strip() or None
    )
    if not connection_string:
        return False
    with _lock:
        if _configured:
            return True
        from azure.monitor.opentelemetry import configure_azure_monitor

        credential = _entra_credential()
        if credential is not None and "credential" not in azure_monitor_options:
            # Application Insights in infra/ has local (key) auth disabled: ingestion needs Entra ID.
            azure_monitor_options["credential"] = credential
        configure_azure_monitor(
            connection_string=connection_string, logger_name=logger_name, **azure_monitor_options
        )
        _configured = True
    # Rebind the instruments to the (now real) global providers.
    use_providers(None, None)
    return True


def _entra_credential() -> Any:
    """The managed identity to authenticate telemetry with, when the app settings name one.

    ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING=Authorization=AAD;ClientId=<id>`` (what infra/ sets)
    or ``AZURE_CLIENT_ID``; None when neither is set (local runs with a key-based resource).
    """
    auth = os.environ.get("APPLICATIONINSIGHTS_AUTHENTICATION_STRING") or ""
    parts = dict(p.split("=", 1) for p in auth.split(";") if "=" in p)
    client_id = parts.get("ClientId") or os.environ.get("AZURE_CLIENT_ID")
    if parts.get("Authorization", "").upper() != "AAD" and not os.environ.get("AZURE_CLIENT_ID"):
        return None
    from azure.identity import ManagedIdentityCredential

    return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()


def configure_telemetry_from_env() -> bool:
    """:func:`configure_telemetry` from the environment alone (for ``function_app`` at import time,
    when the other settings may not be valid yet)."""
    return configure_telemetry(None)


def is_configured() -> bool:
    return _configured


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
    instruments = _get()
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


# ---- metrics of the pattern's normal path ------------------------------------------------------------


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
    instruments = _get()
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
    _get().queue_wait.record(wait, {"workflow": workflow or "unknown", "step": step})
    return wait


def record_compensation_finished(
    workflow: str, outcome: str = COMPENSATED, *, error_type: str | None = None
) -> None:
    """A step's compensation finished: counts ``sas.compensations`` by outcome. Use it for
    ``compensated``; a failed compensation is counted by :func:`record_compensation_failed`."""
    dimensions = {"workflow": workflow or "unknown", "outcome": outcome}
    if outcome != COMPENSATED:
        dimensions[ERROR_TYPE] = error_type or ERROR_TYPE_OTHER
    _get().compensations.add(1, dimensions)


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
    _get().dead_lettered.add(
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


def register_ledger_gauges(
    *,
    in_flight: Callable[[], GaugeReading] | None = None,
    overdue: Callable[[], GaugeReading] | None = None,
) -> None:
    """Feed the observable gauges ``sas.work.in_flight`` and ``sas.instance.overdue``.

    Each callback is called at every metric export (once a minute by default) on the exporter's
    thread: it must be cheap (a cached count, a count kept by the watchdog's last tick, never a table
    scan) and return a number, or ``{workflow: number}``. ``None`` stops observing. A callback that
    raises is logged and skipped. This module never reads the ledger itself.
    """
    with _lock:
        _gauge_sources[WORK_IN_FLIGHT_GAUGE] = in_flight
        _gauge_sources[INSTANCES_OVERDUE_GAUGE] = overdue
    _get()  # the gauges are created with the other instruments: make sure they exist


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
