"""workflow_core.tracing (the W3C carrier every hop passes on) and workflow_core.ledger_gauges (the
cheap readings behind the in-flight and overdue gauges), with the real OpenTelemetry SDK."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from workflow_core import ledger_gauges, telemetry_instruments, tracing
from workflow_core.ledger import NewStep, StepStatus
from workflow_core.messages import work_message

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry_instruments.use_providers(None, provider)
    yield exporter
    telemetry_instruments.use_providers(None, None)
    provider.shutdown()


@pytest.mark.parametrize(
    "value",
    [
        None,
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # not a mapping
        {},
        {"traceparent": "garbage"},
        {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},  # all-zero trace id
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},  # all-zero span id
        {"traceparent": 42},
    ],
)
def test_malformed_context_is_dropped_not_raised(value):
    assert tracing.clean(value) == {}
    assert tracing.span_context(value) is None and tracing.links(value) == []


def test_a_valid_carrier_keeps_only_the_w3c_fields():
    carrier = tracing.clean({"traceparent": PARENT, "tracestate": "k=v", "other": "x"})
    assert carrier == {"traceparent": PARENT, "tracestate": "k=v"}
    assert tracing.clean({"traceparent": PARENT.encode(), "tracestate": "x" * 600}) == {"traceparent": PARENT}
    assert tracing.ledger_fields(carrier) == {"trace_parent": PARENT, "trace_state": "k=v"}
    assert tracing.ledger_fields({"traceparent": "bad"}) == {}


def test_a_span_is_a_child_of_a_valid_parent_and_a_root_otherwise(spans):
    with tracing.span("child", parent={"traceparent": PARENT}) as child:
        inner = tracing.current()
    with tracing.span("root", parent={"traceparent": "garbage"}):
        pass
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert finished["child"].context.trace_id == TRACE_ID
    assert finished["child"].parent.span_id == 0xB7AD6B7169203331
    assert finished["root"].parent is None and finished["root"].context.trace_id != TRACE_ID
    # the carrier handed on names the child span itself
    assert inner[tracing.TRACEPARENT].split("-")[2] == f"{child.get_span_context().span_id:016x}"
    assert tracing.current() == {}  # no span is current any more


def test_a_link_names_the_carriers_span(spans):
    with tracing.span("recover", link_to=tracing.links({"traceparent": PARENT})):
        pass
    (recover,) = spans.get_finished_spans()
    assert [(link.context.trace_id, link.context.span_id) for link in recover.links] == [
        (TRACE_ID, 0xB7AD6B7169203331)
    ]


def test_the_work_message_carries_the_context_the_row_recorded(ledger):
    (record,) = ledger.create_steps(
        "wf-trace-1", "provision-tenant", [NewStep(step_id="a", step_name="a", agent="x.y")], actor="t"
    )
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    dispatched = ledger.transition(
        record,
        StepStatus.DISPATCHED,
        actor="t",
        attempt=1,
        deadline=deadline,
        trace_parent=PARENT,
        attempt_token="0" * 32,  # as every dispatch writes one
    )
    assert ledger.get("wf-trace-1", "a").trace_parent == PARENT  # stored with the write, read back
    message = work_message(dispatched)
    assert message.application_properties["traceparent"] == PARENT
    assert "tracestate" not in message.application_properties
    untraced = work_message(dispatched.model_copy(update={"trace_parent": "not-a-traceparent"}))
    assert "traceparent" not in untraced.application_properties


def test_in_flight_counts_dispatched_and_running_steps_from_the_index_and_caches(ledger):
    steps = [NewStep(step_id=s, step_name=s, agent="x.y") for s in ("a", "b", "c")]
    records = {r.step_id: r for r in ledger.create_steps("wf-gauge-1", "provision-tenant", steps, actor="t")}
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    a = ledger.transition(records["a"], StepStatus.DISPATCHED, actor="t", attempt=1, deadline=deadline)
    ledger.transition(records["b"], StepStatus.DISPATCHED, actor="t", attempt=1, deadline=deadline)
    ledger.transition(a, StepStatus.RUNNING, actor="t")
    clock = [0.0]
    gauges = ledger_gauges.LedgerGauges(lambda: ledger, ttl_seconds=60, monotonic=lambda: clock[0])
    before = gauges.in_flight()
    assert before == 2  # a (Running) and b (Dispatched); c is Pending
    ledger.transition(
        ledger.get("wf-gauge-1", "c"), StepStatus.DISPATCHED, actor="t", attempt=1, deadline=deadline
    )
    assert gauges.in_flight() == before  # cached within the TTL
    clock[0] = 61.0
    assert gauges.in_flight() == before + 1


def test_overdue_instances_come_from_the_last_tick_and_go_stale():
    gauges = ledger_gauges.LedgerGauges(lambda: None, stale_after_seconds=600, monotonic=lambda: 1000.0)
    ledger_gauges.note_overdue_instances({"provision-tenant": 2}, at=900.0)
    assert gauges.overdue() == {"provision-tenant": 2}
    ledger_gauges.note_overdue_instances({}, at=900.0)
    assert gauges.overdue() == 0
    ledger_gauges.note_overdue_instances({"provision-tenant": 2}, at=100.0)
    assert gauges.overdue() == {}  # no tick here for 15 minutes: no reading rather than an old one
    assert gauges.in_flight() == {}  # no ledger to read yet: no reading, no error


def test_registered_gauges_export_the_readings():
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry_instruments.use_providers(meters, None)
    try:
        ledger_gauges.register(lambda: _FixedLedger(7))
        ledger_gauges.note_overdue_instances({"order-fulfilment": 1})
        data = reader.get_metrics_data()
        points = {
            metric.name: [(dict(p.attributes), p.value) for p in metric.data.data_points]
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }
        assert points[telemetry_instruments.WORK_IN_FLIGHT_GAUGE] == [({}, 7)]
        assert points[telemetry_instruments.INSTANCES_OVERDUE_GAUGE] == [
            ({"workflow": "order-fulfilment"}, 1)
        ]
    finally:
        telemetry_instruments.register_ledger_gauges(in_flight=None, overdue=None)
        telemetry_instruments.use_providers(None, None)
        meters.shutdown()


class _FixedLedger:
    def __init__(self, count: int) -> None:
        self.count = count

    def count_in_flight(self, cap: int) -> int:
        return min(self.count, cap)
