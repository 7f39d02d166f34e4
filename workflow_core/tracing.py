"""W3C trace context carried as data across the pattern's hops, so one workflow instance is one trace
(docs/architecture.md, "One trace per workflow instance": the orchestrator may read nothing ambient).
Observability only: nothing decides on it; anything read back is validated and dropped when
malformed; no function here raises.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from workflow_core import telemetry_instruments

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACE_FIELD = "trace"  # the key of the carrier in orchestration and activity inputs

# version-traceid-parentid-flags; an all-zero trace or span id is invalid (W3C Trace Context).
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
_MAX_TRACESTATE = 512  # the W3C limit
_PROPAGATOR = TraceContextTextMapPropagator()

# Span names (messaging spans follow the OpenTelemetry messaging conventions: "<operation> <queue>").
START_SPAN = "sas.workflow.start"
RECOVERY_SPAN = "sas.watchdog.recover"


def clean(value: Any) -> dict[str, str]:
    """The valid W3C fields of ``value``, or {}."""
    if not isinstance(value, Mapping):
        return {}
    parent, state = (_text(value.get(key)) for key in (TRACEPARENT, TRACESTATE))
    if not isinstance(parent, str) or not _TRACEPARENT.match(parent.strip()):
        return {}
    carrier = {TRACEPARENT: parent.strip()}
    if isinstance(state, str) and state.strip() and len(state) <= _MAX_TRACESTATE:
        carrier[TRACESTATE] = state.strip()
    return carrier


def _text(value: Any) -> Any:
    return value.decode("ascii", errors="replace") if isinstance(value, bytes) else value


def current() -> dict[str, str]:
    """The carrier of the current span (``{}`` when no span is recording a valid context)."""
    carrier: dict[str, str] = {}
    try:
        _PROPAGATOR.inject(carrier)
    except Exception:  # tracing must never fail the work it describes
        log.debug("could not inject the trace context", exc_info=True)
        return {}
    return clean(carrier)


def from_fields(trace_parent: str | None, trace_state: str | None = None) -> dict[str, str]:
    return clean({TRACEPARENT: trace_parent, TRACESTATE: trace_state})


def ledger_fields(carrier: Any) -> dict[str, str | None]:
    """``trace_parent``/``trace_state`` keyword arguments for a ledger write."""
    valid = clean(carrier)
    return {"trace_parent": valid[TRACEPARENT], "trace_state": valid.get(TRACESTATE)} if valid else {}


def span_context(carrier: Any) -> trace.SpanContext | None:
    valid = clean(carrier)
    if not valid:
        return None
    try:
        ctx = trace.get_current_span(_PROPAGATOR.extract(valid)).get_span_context()
    except Exception:
        return None
    return ctx if ctx.is_valid else None


def links(*carriers: Any) -> list[Link]:
    return [Link(ctx) for ctx in map(span_context, carriers) if ctx is not None]


@contextmanager
def span(
    name: str,
    *,
    parent: Any = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    link_to: list[Link] | None = None,
) -> Iterator[trace.Span]:
    """Start ``name`` as the current span, a child of ``parent`` (a carrier) when it is valid."""
    remote = span_context(parent)
    ctx = trace.set_span_in_context(trace.NonRecordingSpan(remote)) if remote is not None else None
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    with telemetry_instruments.current().tracer.start_as_current_span(
        name, context=ctx, kind=kind, attributes=attrs, links=link_to or None
    ) as started:
        yield started


def has_current_span() -> bool:
    """Is a valid span current (e.g. the Functions host's, with the worker's OpenTelemetry on)?"""
    return trace.get_current_span(otel_context.get_current()).get_span_context().is_valid


def messaging_attributes(
    transport: Any, queue: str, operation: str, message_id: str | None
) -> dict[str, Any]:
    """Messaging attributes of a send/process span (Storage Queues have no registered system value)."""
    servicebus = str(getattr(transport, "value", transport)) == "servicebus"
    return {
        "messaging.system": "servicebus" if servicebus else "azure.storage.queue",
        "messaging.destination.name": queue,
        "messaging.operation.type": operation,
        "messaging.message.id": message_id,
    }


def consumer_span(
    name: str, *, transport: Any, queue: str, message_id: str | None, body: Any, parent: Any, **extra: Any
) -> Any:
    """The CONSUMER span of a message handler, a child of the message's trace context."""
    fields = body if isinstance(body, dict) else {}
    return span(
        name,
        parent=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            **messaging_attributes(transport, queue, "process", message_id),
            "sas.instance_id": fields.get("instance_id"),
            "sas.step_id": fields.get("step_id"),
            "sas.attempt": fields.get("attempt"),
            **{f"sas.{key}": value for key, value in extra.items()},
        },
    )
