"""Recovery telemetry: what the supervisor (and anyone else who recovers a step) did, and how it went.

Three signals per recovery action, all carrying the same fields:

* the OpenTelemetry counter ``sas.recovery`` with the attributes ``action``, ``outcome`` and
  ``workflow`` (low cardinality, so it can be charted and alerted on: the infrastructure's alert
  rules query ``sas.recovery`` by ``action``, and ``sas.compensation_failed``);
* a span event ``sas.recovery`` on the current span (the watchdog tick's span), with every field;
* a log record on the logger ``sas.supervisor`` whose ``extra`` fields (instance, step, attempt,
  action, outcome, workflow and any further attributes) become ``customDimensions`` of the
  ``traces`` row in Application Insights.

When a compensation ends failed (``outcome="compensation_failed"``) the counter
``sas.compensation_failed`` is incremented as well: a step needs an operator.

Nothing is exported unless :func:`configure_telemetry` found ``APPLICATIONINSIGHTS_CONNECTION_STRING``:
without it the OpenTelemetry API's no-op providers swallow the signals (logs still go to the normal
Python logging handlers, which the Functions host forwards). Tests install real SDK providers with
:func:`use_providers`.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace

if TYPE_CHECKING:
    from workflow_core.settings import Settings

RECOVERY_COUNTER = "sas.recovery"
COMPENSATION_FAILED_COUNTER = "sas.compensation_failed"
RECOVERY_EVENT = "sas.recovery"
LOGGER_NAME = "sas.supervisor"
INSTRUMENTATION_NAME = "sas.supervisor"

# Outcome vocabulary. Actions are free-form names chosen by the recovering component (the watchdog's
# are listed in docs/supervisor.md); outcomes are one of these.
OUTCOME_OK = "ok"  # the action was carried out
OUTCOME_ERROR = "error"  # the action was attempted and failed (it will be retried)
OUTCOME_COMPENSATION_FAILED = "compensation_failed"  # a compensator gave up: needs an operator

log = logging.getLogger(LOGGER_NAME)

# Names a ``logging.LogRecord`` already uses: an ``extra`` key among them would raise KeyError.
_RESERVED_LOG_KEYS = frozenset(
    vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None)).keys() | {"message", "asctime"}
)


@dataclass
class _Instruments:
    recovery: metrics.Counter
    compensation_failed: metrics.Counter
    tracer: trace.Tracer


_lock = threading.Lock()
_instruments: _Instruments | None = None
_meter_provider: metrics.MeterProvider | None = None
_tracer_provider: trace.TracerProvider | None = None
_configured = False


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
    return _Instruments(
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
        tracer=tracer,
    )


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
    **attrs: Any,
) -> None:
    """Count one recovery action and describe it (span event + ``sas.supervisor`` log record).

    ``action``: what was done (``resend``, ``fail_step``, ``start_compensation``...). ``outcome``:
    ``ok``, ``error`` or ``compensation_failed`` (see the ``OUTCOME_*`` constants). ``workflow`` is the
    third counter dimension; every other keyword lands only in the event and the log record (keep
    high-cardinality values such as ids out of metric dimensions).
    """
    instruments = _get()
    dimensions = {"action": action, "outcome": outcome, "workflow": workflow or "unknown"}
    instruments.recovery.add(1, dimensions)
    if outcome == OUTCOME_COMPENSATION_FAILED:
        instruments.compensation_failed.add(1, {"workflow": workflow or "unknown"})

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


def record_compensation_failed(
    instance_id: str,
    step_id: str,
    attempt: int | None,
    *,
    workflow: str | None = None,
    error: str | None = None,
    **attrs: Any,
) -> None:
    """A compensator gave up (the step is now CompensationFailed): counts ``sas.compensation_failed``."""
    record_recovery(
        instance_id,
        step_id,
        attempt,
        "finish_compensation",
        OUTCOME_COMPENSATION_FAILED,
        workflow=workflow,
        error=error,
        **attrs,
    )
