"""Acceptance: one trace per workflow instance across every hop, and the pattern's metrics and events.

The whole pattern runs on the durable test host and a real Azurite (``devtools.harness``) with the
OpenTelemetry SDK's in-memory exporters bound to ``workflow_core.telemetry``: the HTTP starter's
span, each dispatch (PRODUCER), each agent's delivery and each result handler's delivery (CONSUMER),
and the orchestration's next dispatch must share one trace id, on Storage Queues and on Service Bus
(the real azure-servicebus SDK against the AMQP test double, so ``traceparent`` crosses a real AMQP
hop as an application property). The watchdog's recovery span lives in its tick's trace and links to
the step's. Metrics and custom events are asserted by name and attributes.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from azure.monitor.opentelemetry.exporter.export.trace._exporter import _convert_span_to_envelope
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from activities.worker.handlers import faults
from devtools.harness import PatternHarness
from tests.servicebus_double.double import AmqpTestDouble
from workflow_core import ledger_gauges, telemetry, telemetry_instruments, tracing

WORKFLOW = "provision-tenant"
STEPS = ("create_storage", "register_dns", "send_welcome")
INPUT = {"tenant_id": "contoso", "admin_email": "ops@contoso.example"}


@dataclass
class Otel:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    logs: InMemoryLogRecordExporter

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        return [
            point
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [
            dict(r.log_record.attributes or {})
            for r in self.logs.get_finished_logs()
            if (r.log_record.attributes or {}).get(telemetry.CUSTOM_EVENT_ATTRIBUTE) == name
        ]


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    handler = LoggingHandler(logger_provider=logger_provider)
    logging.getLogger("sas").addHandler(handler)
    telemetry_instruments.use_providers(meter_provider, tracer_provider)
    yield Otel(spans, reader, logs)
    logging.getLogger("sas").removeHandler(handler)
    telemetry_instruments.register_ledger_gauges(in_flight=None, overdue=None)
    telemetry_instruments.use_providers(None, None)
    for provider in (meter_provider, tracer_provider, logger_provider):
        provider.shutdown()


@pytest.fixture(scope="module")
def amqp_double() -> Iterator[AmqpTestDouble]:
    with AmqpTestDouble(lock_duration_seconds=30) as double:
        yield double


@contextmanager
def _recording_harness(
    azurite, monkeypatch, double: AmqpTestDouble | None, tag: str
) -> Iterator[PatternHarness]:
    """The harness on Storage Queues (Azurite), or on Service Bus (``double``), recording the
    application properties of every message its agent pumps receive (``h.received``)."""
    if double is not None:
        monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", double.connection_string)
        monkeypatch.setenv("SERVICEBUS_WORK_QUEUE", f"work-{tag}")
        monkeypatch.setenv("SERVICEBUS_RESULT_QUEUE", f"results-{tag}")
    else:
        monkeypatch.delenv("SERVICEBUS_CONNECTION_STRING", raising=False)
    faults.clear()
    with PatternHarness(azurite) as h:
        h.received = {"work": [], "results": []}
        for kind, name in (("work", "_work_handler"), ("results", "_result_handler")):
            original = getattr(h, name)

            def recording(message, original=original, kind=kind):
                h.received[kind].append(message)
                return original(message)

            setattr(h, name, recording)
        yield h
    faults.clear()


@pytest.fixture(params=["storage-queue", "servicebus"])
def traced_harness(request, azurite, otel, monkeypatch) -> Iterator[PatternHarness]:
    """Each transport in turn."""
    double = request.getfixturevalue("amqp_double") if request.param == "servicebus" else None
    with _recording_harness(azurite, monkeypatch, double, uuid.uuid4().hex[:8]) as h:
        yield h


@pytest.fixture
def queue_harness(azurite, otel, monkeypatch) -> Iterator[PatternHarness]:
    """Storage Queues only: the watchdog and the counters do not depend on the transport."""
    with _recording_harness(azurite, monkeypatch, None, "") as h:
        yield h


def _trace_id(carrier_value: str | None) -> int | None:
    ctx = tracing.span_context({tracing.TRACEPARENT: carrier_value})
    return None if ctx is None else ctx.trace_id


def _of(spans: list[ReadableSpan], name: str, instance_id: str) -> dict[str, ReadableSpan]:
    """The spans called ``name`` for ``instance_id``, by step id (each step once on the happy path)."""
    found = [s for s in spans if s.name == name and s.attributes.get("sas.instance_id") == instance_id]
    by_step = {s.attributes["sas.step_id"]: s for s in found}
    assert len(by_step) == len(found), f"{name}: more than one span for a step: {found}"
    return by_step


def test_one_trace_from_the_http_start_through_every_hop(traced_harness: PatternHarness, otel: Otel):
    h = traced_harness
    work_queue, result_queue = h.settings.work_queue, h.settings.result_queue
    iid = h.start_workflow(WORKFLOW, INPUT)
    status = h.run_until_complete(iid)
    assert status.output["status"] == "succeeded"

    spans = otel.finished()
    (start,) = [s for s in spans if s.name == tracing.START_SPAN]
    trace_id = start.context.trace_id
    assert start.attributes["sas.instance_id"] == iid and start.kind is SpanKind.SERVER
    # what docs/operations.md's KQL looks for: a `requests` row named sas.workflow.start with the id
    envelope = _convert_span_to_envelope(start)
    assert (envelope.data.base_type, envelope.data.base_data.name) == ("RequestData", tracing.START_SPAN)
    assert envelope.data.base_data.properties["sas.instance_id"] == iid
    assert envelope.tags["ai.operation.id"] == f"{trace_id:032x}"

    sends = _of(spans, f"send {work_queue}", iid)
    works = _of(spans, f"process {work_queue}", iid)
    results = _of(spans, f"process {result_queue}", iid)
    assert set(sends) == set(works) == set(results) == set(STEPS)
    for step in STEPS:
        send, work, result = sends[step], works[step], results[step]
        assert {send.context.trace_id, work.context.trace_id, result.context.trace_id} == {trace_id}, step
        # the hops are parent and child, through the orchestration input and the messages
        assert send.parent.span_id == start.context.span_id and send.kind is SpanKind.PRODUCER
        assert work.parent.span_id == send.context.span_id and work.kind is SpanKind.CONSUMER
        assert result.parent.span_id == work.context.span_id and result.kind is SpanKind.CONSUMER
        assert send.attributes["messaging.destination.name"] == work_queue
        assert work.attributes["messaging.message.id"] == f"work:{iid}:{step}:1"
    # the orchestration's next dispatch, after the previous step's result event, is in the same trace
    for before, after in itertools.pairwise(STEPS):
        assert sends[after].start_time > results[before].start_time
    expected_system = "servicebus" if "Service Bus" in h.transport_label else "azure.storage.queue"
    assert {s.attributes["messaging.system"] for s in (*sends.values(), *works.values())} == {expected_system}

    # what crossed the queues: the traceparent application property (Service Bus: over AMQP through the
    # test double; Storage Queues: inside the envelope), naming this trace, on every work and result message
    received = [m for kind in ("work", "results") for m in h.received[kind]]
    assert len(h.received["work"]) == len(h.received["results"]) == len(STEPS)
    assert {_trace_id(m.application_properties.get("traceparent")) for m in received} == {trace_id}
    # ... recorded in the ledger with the writes it makes anyway (no extra request)
    assert {_trace_id(r.trace_parent) for r in h.steps(iid).values()} == {trace_id}
    assert _trace_id(h.ledger.find_instance(iid).trace_parent) == trace_id

    # the step metrics, by name and attributes
    waits = {p.attributes["step"]: p for p in otel.points(telemetry_instruments.QUEUE_WAIT_HISTOGRAM)}
    assert set(waits) == set(STEPS)
    assert all(p.attributes["workflow"] == WORKFLOW and p.count == 1 for p in waits.values())
    durations = otel.points(telemetry_instruments.STEP_DURATION_HISTOGRAM)
    assert {(p.attributes["step"], p.attributes["outcome"]) for p in durations} == {
        (step, "succeeded") for step in STEPS
    }
    assert all("error.type" not in p.attributes for p in durations)
    attempts = otel.points(telemetry_instruments.STEP_ATTEMPTS_HISTOGRAM)
    assert {(p.attributes["step"], p.sum, p.count) for p in attempts} == {(step, 1, 1) for step in STEPS}

    # the gauges, as start-up registers them: nothing in flight once the workflow finished
    ledger_gauges.register(lambda: h.ledger)
    ledger_gauges.note_overdue_instances({})
    (in_flight,) = otel.points(telemetry_instruments.WORK_IN_FLIGHT_GAUGE)
    (overdue,) = otel.points(telemetry_instruments.INSTANCES_OVERDUE_GAUGE)
    assert (in_flight.value, overdue.value) == (0, 0)


def test_watchdog_recovery_span_links_to_the_steps_trace_and_its_resend_stays_in_it(
    queue_harness: PatternHarness, otel: Otel
):
    """The dispatch dies between its ledger write and its send: past the grace the watchdog re-sends.
    Its recovery span is in the tick's trace with a *link* to the step's; the re-sent message carries
    the context the ledger row recorded, so the agent's work is still in the workflow's trace."""
    h = queue_harness
    h.crash_dispatch_before_send("register_dns", redeliver_after=timedelta(minutes=5))
    iid = h.start_workflow(WORKFLOW, INPUT)
    assert h.run_until_complete(iid).output["status"] == "succeeded"

    spans = otel.finished()
    (start,) = [s for s in spans if s.name == tracing.START_SPAN]
    trace_id = start.context.trace_id
    recovering = {
        s: tuple(e.attributes["sas.action"] for e in s.events if e.name == telemetry.RECOVERY_EVENT)
        for s in spans
        if s.name == tracing.RECOVERY_SPAN and s.attributes.get("sas.step_id") == "register_dns"
    }
    # within the grace the watchdog only notes the overdue step; past it, it re-sends, once
    (recover,) = [s for s, actions in recovering.items() if actions == ("resend",)]
    assert {actions for s, actions in recovering.items() if s is not recover} <= {("note_overrun",)}
    assert recover.context.trace_id != trace_id  # the tick's own trace, not a child of the workflow
    assert [link.context.trace_id for link in recover.links] == [trace_id]
    # ... which Application Insights keeps in customDimensions["_MS.links"] (docs/operations.md)
    envelope = _convert_span_to_envelope(recover)
    assert envelope.data.base_type == "RemoteDependencyData"
    assert f"{trace_id:032x}" in envelope.data.base_data.properties["_MS.links"]
    (tick,) = [s for s in spans if s.context.span_id == recover.parent.span_id]
    assert tick.name == "sas.watchdog.tick"

    dns_sends = [
        s
        for s in spans
        if s.name == f"send {h.settings.work_queue}" and s.attributes.get("sas.step_id") == "register_dns"
    ]
    (work,) = [
        s
        for s in spans
        if s.name == f"process {h.settings.work_queue}" and s.attributes.get("sas.step_id") == "register_dns"
    ]
    assert work.context.trace_id == trace_id
    assert work.parent.span_id in {s.context.span_id for s in dns_sends}  # the dispatch the ledger recorded

    (event,) = [e for e in otel.events(telemetry.RECOVERY_EVENT) if e.get("action") == "resend"]
    assert (event["instance_id"], event["step_id"], event["outcome"], event["workflow"]) == (
        iid,
        "register_dns",
        "ok",
        WORKFLOW,
    )
    counted = {
        (p.attributes["action"], p.attributes["outcome"], p.attributes["workflow"]): p.value
        for p in otel.points(telemetry_instruments.RECOVERY_COUNTER)
    }
    assert counted[("resend", "ok", WORKFLOW)] == 1


def test_failures_compensations_and_dead_letters_are_counted_by_name_and_attributes(
    queue_harness: PatternHarness, otel: Otel
):
    """A poison message is dead-lettered, the last step fails every attempt, the instance is
    compensated: each shows up as the metric and custom event an operator's query names, and the
    compensation's dispatches stay in the workflow's trace."""
    h = queue_harness
    limit = h.settings.max_delivery_count
    faults.inject("dns.register", faults.CrashAfterEffect(times=limit))  # attempt 1 is dead-lettered
    faults.inject("email.send_welcome", faults.Fail())  # every attempt fails: give up, compensate
    iid = h.start_workflow(WORKFLOW, INPUT)
    assert h.run_until_complete(iid).output["status"] == "compensated"

    (dead,) = otel.points(telemetry_instruments.DEAD_LETTER_COUNTER)
    assert dict(dead.attributes) == {
        "messaging.destination.name": h.settings.work_queue,
        "workflow": WORKFLOW,
        "error.type": "MaxDeliveryCountExceeded",
    }
    assert dead.value == 1
    (event,) = otel.events(telemetry.DEAD_LETTER_EVENT)
    assert (event["instance_id"], event["step_id"], event["reason"]) == (
        iid,
        "register_dns",
        "MaxDeliveryCountExceeded",
    )

    failed = {
        (p.attributes["step"], p.attributes["error.type"]): p
        for p in otel.points(telemetry_instruments.STEP_DURATION_HISTOGRAM)
        if p.attributes["outcome"] == "failed"
    }
    assert failed[("send_welcome", "InjectedFailure")].count == 3  # max_attempts of the step
    (final,) = [
        p
        for p in otel.points(telemetry_instruments.STEP_ATTEMPTS_HISTOGRAM)
        if p.attributes["step"] == "send_welcome" and p.attributes["outcome"] == "failed"
    ]
    assert (final.sum, final.count) == (3, 1)

    (compensated,) = [
        p
        for p in otel.points(telemetry_instruments.COMPENSATIONS_COUNTER)
        if p.attributes["outcome"] == "compensated"
    ]
    assert (dict(compensated.attributes), compensated.value) == (
        {"workflow": WORKFLOW, "outcome": "compensated"},
        2,  # storage and DNS undone
    )
    compensate_events = [e for e in otel.events(telemetry.RECOVERY_EVENT) if e.get("action") == "compensate"]
    assert {e["step_id"] for e in compensate_events} == {"create_storage", "register_dns"}

    spans = otel.finished()
    (start,) = [s for s in spans if s.name == tracing.START_SPAN]
    compensation_sends = [
        s
        for s in spans
        if s.name == f"send {h.settings.work_queue}" and s.attributes.get("sas.kind") == "compensate"
    ]
    assert len(compensation_sends) == 2
    assert {s.context.trace_id for s in compensation_sends} == {start.context.trace_id}
