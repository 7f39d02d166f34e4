"""The pattern's instruments, their names, and the providers they report to (the table of instruments is
in docs/operations.md). Nothing is exported unless :func:`configure_telemetry` found
``APPLICATIONINSIGHTS_CONNECTION_STRING``: without it the API's no-op providers swallow the signals.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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
CANARY_RUNS_COUNTER = "sas.canary.runs"
CANARY_RECOVERY_HISTOGRAM = "sas.canary.recovery_seconds"
CANARY_STALE_COUNTER = "sas.canary.stale_pools"
CIRCUIT_STATE_GAUGE = "sas.circuit.state"
LOGGER_NAME = "sas.supervisor"
INSTRUMENTATION_NAME = "sas.supervisor"

log = logging.getLogger(LOGGER_NAME)

# What an observable gauge's callback returns: one number, or numbers per workflow name.
GaugeReading = int | float | Mapping[str, int | float]


@dataclass
class Instruments:
    recovery: metrics.Counter
    compensation_failed: metrics.Counter
    compensations: metrics.Counter
    dead_lettered: metrics.Counter
    step_duration: metrics.Histogram
    step_attempts: metrics.Histogram
    queue_wait: metrics.Histogram
    canary_runs: metrics.Counter
    canary_recovery: metrics.Histogram
    canary_stale_pools: metrics.Counter
    circuit_state: metrics.Gauge
    tracer: trace.Tracer


_lock = threading.Lock()
_instruments: Instruments | None = None
# The providers use_providers set (None: the global ones).
_providers: tuple[metrics.MeterProvider | None, trace.TracerProvider | None] = (None, None)
_configured_by: str | None = None  # "worker" or "app" once the exporter is configured
# Callbacks of the observable gauges, set by register_ledger_gauges.
_gauge_sources: dict[str, Callable[[], GaugeReading] | None] = {}


def _build(
    meter_provider: metrics.MeterProvider | None, tracer_provider: trace.TracerProvider | None
) -> Instruments:
    meter = (meter_provider or metrics.get_meter_provider()).get_meter(INSTRUMENTATION_NAME)
    counter, histogram = meter.create_counter, meter.create_histogram
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
    return Instruments(
        recovery=counter(
            RECOVERY_COUNTER,
            "{action}",
            "Recovery actions taken on workflow steps (retry, re-send, compensation...)",
        ),
        compensation_failed=counter(
            COMPENSATION_FAILED_COUNTER,
            "{step}",
            "Compensations that ended failed: the step needs an operator",
        ),
        compensations=counter(
            COMPENSATIONS_COUNTER,
            "{step}",
            "Finished compensations of a step, by outcome (compensated, compensation_failed)",
        ),
        dead_lettered=counter(
            DEAD_LETTER_COUNTER,
            "{message}",
            "Messages that reached a dead-letter queue, by queue and dead-letter reason",
        ),
        step_duration=histogram(
            STEP_DURATION_HISTOGRAM, "s", "How long an agent worked on one attempt of a step, by outcome"
        ),
        step_attempts=histogram(
            STEP_ATTEMPTS_HISTOGRAM, "{attempt}", "Attempts a step took to reach its final outcome"
        ),
        queue_wait=histogram(
            QUEUE_WAIT_HISTOGRAM,
            "s",
            "Time from a step's dispatch (ledger) to its agent starting it: the queue wait",
        ),
        canary_runs=counter(CANARY_RUNS_COUNTER, "{run}", "Canary runs judged, by outcome"),
        canary_recovery=histogram(
            CANARY_RECOVERY_HISTOGRAM, "s", "Seconds a canary run took from start to recovered end"
        ),
        canary_stale_pools=counter(
            CANARY_STALE_COUNTER, "{pool}", "Canary pools with no pass within two periods, per tick"
        ),
        circuit_state=meter.create_gauge(
            CIRCUIT_STATE_GAUGE, description="Circuit state per agent: 0 closed, 1 half-open, 2 open"
        ),
        tracer=(tracer_provider or trace.get_tracer_provider()).get_tracer(INSTRUMENTATION_NAME),
    )


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


def current() -> Instruments:
    global _instruments
    with _lock:
        if _instruments is None:
            # The global providers are proxies: these instruments export once configure_telemetry runs.
            _instruments = _build(*_providers)
        return _instruments


def use_providers(
    meter_provider: metrics.MeterProvider | None = None, tracer_provider: trace.TracerProvider | None = None
) -> None:
    """Send the pattern's signals to these providers instead of the global ones (tests, embedders)."""
    global _instruments, _providers
    with _lock:
        _providers = (meter_provider, tracer_provider)
        _instruments = None


def configure_telemetry(settings: Settings | None = None) -> bool:
    """Export the ``sas`` loggers (the host forwards the others), spans and metrics to Application Insights
    if ``APPLICATIONINSIGHTS_CONNECTION_STRING`` is set; once per process. Without ``settings`` it reads
    the environment, so it works before the other settings are valid."""
    global _configured_by
    if settings is not None:
        connection_string = settings.app_insights_connection_string
    else:
        connection_string = (os.environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING") or "").strip()
    if not connection_string:
        return False
    with _lock:
        if _configured_by:
            return True
        if worker_owns_telemetry():
            # The Python worker already called configure_azure_monitor() at worker init (its
            # dispatcher.py, initialize_azure_monitor): a second call would install a second set of
            # providers and export every span and record twice. Use the worker's global providers.
            _configured_by = "worker"
        else:
            from azure.monitor.opentelemetry import configure_azure_monitor

            credential = _entra_credential()
            # Application Insights in infra/ has local (key) auth disabled: ingestion needs Entra ID.
            options = {} if credential is None else {"credential": credential}
            configure_azure_monitor(connection_string=connection_string, logger_name="sas", **options)
            _configured_by = "app"
    use_providers(None, None)  # rebind the instruments to the (now real) global providers
    return True


def _entra_credential() -> Any:
    """The managed identity ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING`` or ``AZURE_CLIENT_ID`` names."""
    auth = os.environ.get("APPLICATIONINSIGHTS_AUTHENTICATION_STRING") or ""
    parts = dict(p.split("=", 1) for p in auth.split(";") if "=" in p)
    client_id = parts.get("ClientId") or os.environ.get("AZURE_CLIENT_ID")
    if parts.get("Authorization", "").upper() != "AAD" and not os.environ.get("AZURE_CLIENT_ID"):
        return None
    from azure.identity import ManagedIdentityCredential

    return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()


WORKER_TELEMETRY_SETTING = "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"
NULL_PROPAGATOR_SETTING = "PYTHON_ENABLE_OPENTELEMETRY"


def worker_owns_telemetry() -> bool:
    """True when the Functions Python worker configures azure-monitor itself (and so the app must not)."""
    return (os.environ.get(WORKER_TELEMETRY_SETTING) or "").strip().lower() == "true"


def configured_by() -> str | None:
    """Who configured the exporter in this process: ``"worker"``, ``"app"`` or None (not configured)."""
    return _configured_by


def register_ledger_gauges(
    *, in_flight: Callable[[], GaugeReading] | None = None, overdue: Callable[[], GaugeReading] | None = None
) -> None:
    """Feed the observable gauges ``sas.work.in_flight`` and ``sas.instance.overdue``: each callback runs at
    every export on the exporter's thread, so it must be cheap (never a table scan) and return a number or
    ``{workflow: number}``; ``None`` stops observing."""
    with _lock:
        _gauge_sources[WORK_IN_FLIGHT_GAUGE] = in_flight
        _gauge_sources[INSTANCES_OVERDUE_GAUGE] = overdue
    current()  # the gauges are created with the other instruments: make sure they exist
