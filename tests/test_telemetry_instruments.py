"""The step metrics, gauges, compensation/dead-letter counters and custom events of
workflow_core/telemetry.py and telemetry_instruments.py, with the real OpenTelemetry SDK (in-memory
metric reader and log exporter) and the installed Azure Monitor exporter's own envelope conversion for
the custom events."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from azure.monitor.opentelemetry.exporter import _constants as exporter_constants
from azure.monitor.opentelemetry.exporter.export.logs._exporter import _convert_log_to_envelope
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.infra import bicep_checks as bc
from workflow_core import telemetry, telemetry_instruments

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.fixture
def reader():
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry_instruments.use_providers(meters, None)
    yield reader
    telemetry_instruments.register_ledger_gauges(in_flight=None, overdue=None)
    telemetry_instruments.use_providers(None, None)
    meters.shutdown()


@pytest.fixture
def events():
    """What the Azure Monitor distro installs: an OpenTelemetry LoggingHandler on the ``sas`` logger."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = LoggingHandler(logger_provider=provider)
    logger = logging.getLogger("sas")
    logger.addHandler(handler)
    yield exporter
    logger.removeHandler(handler)
    provider.shutdown()


def metric_points(reader: InMemoryMetricReader, name: str) -> list:
    data = reader.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += list(metric.data.data_points)
    return found


def by_attributes(points: list) -> dict[frozenset, object]:
    return {frozenset(p.attributes.items()): p for p in points}


def custom_events(exporter: InMemoryLogRecordExporter) -> list:
    return [
        r
        for r in exporter.get_finished_logs()
        if telemetry.CUSTOM_EVENT_ATTRIBUTE in (r.log_record.attributes or {})
    ]


# ---- metrics ---------------------------------------------------------------------------------------------


def test_step_duration_and_attempts_by_workflow_step_and_outcome(reader):
    telemetry.record_step_finished("provision", "create_db", telemetry.STEP_SUCCEEDED, duration_s=2.5)
    telemetry.record_step_finished(
        "provision", "create_db", telemetry.STEP_SUCCEEDED, duration_s=1.5, attempts=2
    )
    telemetry.record_step_finished(
        "provision", "create_db", telemetry.STEP_FAILED, duration_s=0.25, error_type="ConnectionError"
    )
    telemetry.record_step_finished("provision", "dns", telemetry.STEP_TIMED_OUT, attempts=5)

    durations = by_attributes(metric_points(reader, "sas.step.duration"))
    ok = durations[frozenset({"workflow": "provision", "step": "create_db", "outcome": "succeeded"}.items())]
    assert (ok.count, ok.sum) == (2, 4.0)
    failed = durations[
        frozenset(
            {
                "workflow": "provision",
                "step": "create_db",
                "outcome": "failed",
                "error.type": "ConnectionError",
            }.items()
        )
    ]
    assert (failed.count, failed.sum) == (1, 0.25)
    assert len(durations) == 2  # the timed-out call passed no duration

    attempts = by_attributes(metric_points(reader, "sas.step.attempts"))
    assert {k: (p.count, p.sum) for k, p in attempts.items()} == {
        frozenset({"workflow": "provision", "step": "create_db", "outcome": "succeeded"}.items()): (1, 2),
        frozenset(
            {"workflow": "provision", "step": "dns", "outcome": "timed_out", "error.type": "timeout"}.items()
        ): (1, 5),
    }


def test_failure_without_a_class_gets_the_conventional_other(reader):
    telemetry.record_step_finished("w", "s", telemetry.STEP_FAILED, duration_s=1)
    (point,) = metric_points(reader, "sas.step.duration")
    assert point.attributes["error.type"] == "_OTHER"


def test_dispatch_to_start_latency_is_the_queue_wait(reader):
    wait = telemetry.record_dispatch_started(
        "provision", "dns", dispatched_at=T0, started_at=T0 + timedelta(seconds=3)
    )
    skewed = telemetry.record_dispatch_started(
        "provision", "dns", dispatched_at=T0, started_at=T0 - timedelta(seconds=1)
    )
    assert (wait, skewed) == (3.0, 0.0)
    (point,) = metric_points(reader, "sas.step.queue_wait.duration")
    assert dict(point.attributes) == {"workflow": "provision", "step": "dns"}
    assert (point.count, point.sum, point.max) == (2, 3.0, 3.0)


def test_ledger_gauges_read_the_callers_callbacks(reader):
    calls = []

    def in_flight():
        calls.append("in_flight")
        return {"provision": 3, "fulfil": 1}

    telemetry_instruments.register_ledger_gauges(in_flight=in_flight, overdue=lambda: 2)
    assert calls == []  # called at collection time, not at registration
    in_flight_points = by_attributes(metric_points(reader, "sas.work.in_flight"))
    assert {k: p.value for k, p in in_flight_points.items()} == {
        frozenset({"workflow": "provision"}.items()): 3,
        frozenset({"workflow": "fulfil"}.items()): 1,
    }
    (overdue,) = metric_points(reader, "sas.instance.overdue")
    assert (dict(overdue.attributes), overdue.value) == ({}, 2)
    assert calls == ["in_flight", "in_flight"]  # once per collection: metric_points collected twice


def test_a_failing_gauge_callback_does_not_stop_the_other_metrics(reader, caplog):
    def broken():
        raise RuntimeError("ledger unreachable")

    telemetry_instruments.register_ledger_gauges(in_flight=broken, overdue=lambda: 4)
    telemetry.record_step_finished("w", "s", telemetry.STEP_SUCCEEDED, duration_s=1)
    with caplog.at_level(logging.ERROR, logger="sas.supervisor"):
        assert metric_points(reader, "sas.work.in_flight") == []
        assert [p.value for p in metric_points(reader, "sas.instance.overdue")] == [4]
        assert len(metric_points(reader, "sas.step.duration")) == 1
    assert any("sas.work.in_flight" in r.getMessage() for r in caplog.records)


def test_gauges_observe_nothing_until_registered_and_after_clearing(reader):
    assert metric_points(reader, "sas.work.in_flight") == []
    telemetry_instruments.register_ledger_gauges(in_flight=lambda: 1)
    assert [p.value for p in metric_points(reader, "sas.work.in_flight")] == [1]
    telemetry_instruments.register_ledger_gauges(in_flight=None)
    reader.get_metrics_data()  # the next collection after clearing observes nothing new
    assert metric_points(reader, "sas.work.in_flight") == []


def test_compensations_by_outcome(reader, caplog):
    telemetry.record_compensation_finished("fulfil")
    telemetry.record_compensation_finished("fulfil")
    with caplog.at_level(logging.WARNING, logger="sas.supervisor"):
        telemetry.record_compensation_failed(
            "wf-1", "charge", 1, workflow="fulfil", error="refund down", error_type="RefundError"
        )
    points = by_attributes(metric_points(reader, "sas.compensations"))
    assert {k: p.value for k, p in points.items()} == {
        frozenset({"workflow": "fulfil", "outcome": "compensated"}.items()): 2,
        frozenset(
            {"workflow": "fulfil", "outcome": "compensation_failed", "error.type": "RefundError"}.items()
        ): 1,
    }
    (failed,) = metric_points(reader, "sas.compensation_failures")  # the alert's counter, as before
    assert failed.value == 1


def test_recovery_error_outcome_carries_error_type(reader):
    telemetry.record_recovery(
        "wf", "s", 1, "resend", telemetry.OUTCOME_ERROR, workflow="w", error_type="Timeout"
    )
    telemetry.record_recovery(
        "wf", "s", 1, "resend", telemetry.OUTCOME_OK, workflow="w", error_type="ignored"
    )
    points = by_attributes(metric_points(reader, "sas.recoveries"))
    assert set(points) == {
        frozenset({"action": "resend", "outcome": "error", "workflow": "w", "error.type": "Timeout"}.items()),
        frozenset({"action": "resend", "outcome": "ok", "workflow": "w"}.items()),
    }


def test_dead_lettered_messages_by_queue_and_reason(reader, events):
    telemetry.record_dead_letter(
        "agent-work",
        reason="MaxDeliveryCountExceeded",
        workflow="provision",
        instance_id="wf-7",
        step_id="dns",
    )
    telemetry.record_dead_letter("agent-results")
    points = by_attributes(metric_points(reader, "sas.dead_lettered_messages"))
    assert {k: p.value for k, p in points.items()} == {
        frozenset(
            {
                "messaging.destination.name": "agent-work",
                "workflow": "provision",
                "error.type": "MaxDeliveryCountExceeded",
            }.items()
        ): 1,
        frozenset(
            {
                "messaging.destination.name": "agent-results",
                "workflow": "unknown",
                "error.type": "_OTHER",
            }.items()
        ): 1,
    }
    first = custom_events(events)[0].log_record.attributes
    assert first[telemetry.CUSTOM_EVENT_ATTRIBUTE] == "sas.message_dead_lettered"
    assert (first["queue"], first["instance_id"], first["step_id"]) == ("agent-work", "wf-7", "dns")


# ---- custom events ---------------------------------------------------------------------------------------


def test_the_event_attribute_is_the_one_the_installed_exporter_reads():
    assert telemetry.CUSTOM_EVENT_ATTRIBUTE == exporter_constants._MICROSOFT_CUSTOM_EVENT_NAME


def test_record_recovery_emits_the_custom_event_that_becomes_a_customevents_row(reader, events, caplog):
    with caplog.at_level(logging.INFO, logger="sas.supervisor"):
        telemetry.record_recovery("wf-1", "dns", 2, "resend", "ok", workflow="provision", reason="lost")

    (record,) = custom_events(events)
    attributes = record.log_record.attributes
    assert attributes[telemetry.CUSTOM_EVENT_ATTRIBUTE] == "sas.recovery"
    assert {
        k: attributes[k] for k in ("instance_id", "step_id", "attempt", "action", "outcome", "workflow")
    } == {
        "instance_id": "wf-1",
        "step_id": "dns",
        "attempt": 2,
        "action": "resend",
        "outcome": "ok",
        "workflow": "provision",
    }
    # The exporter's own conversion: an EventData envelope named sas.recovery (customEvents), with the
    # fields as customDimensions.
    envelope = _convert_log_to_envelope(record)
    assert envelope.data.base_type == "EventData"
    assert envelope.data.base_data.name == "sas.recovery"
    assert envelope.data.base_data.properties["instance_id"] == "wf-1"
    assert envelope.data.base_data.properties["reason"] == "lost"
    # The recovery's log record (traces) is still there, besides the event.
    assert any(
        r.log_record.body.startswith("recovery resend on wf-1/dns") for r in events.get_finished_logs()
    )


def test_instance_stalled_event_for_the_stalled_instances_alert(events):
    telemetry.record_instance_stalled("wf-9", workflow="provision", action="resume", deadline="2026-01-05")
    (record,) = custom_events(events)
    envelope = _convert_log_to_envelope(record)
    assert envelope.data.base_type == "EventData"
    assert envelope.data.base_data.name == "sas.instance_stalled"
    properties = envelope.data.base_data.properties
    assert (properties["workflow"], properties["instance_id"], properties["action"]) == (
        "provision",
        "wf-9",
        "resume",
    )


def test_events_survive_reserved_names_and_drop_none(events):
    telemetry.emit_event("sas.custom", name="n", message="m", missing=None, payload={"a": 1})
    (record,) = custom_events(events)
    attributes = record.log_record.attributes
    assert (attributes["sas_name"], attributes["sas_message"], attributes["payload"]) == (
        "n",
        "m",
        "{'a': 1}",
    )
    assert "missing" not in attributes


def test_events_are_emitted_whatever_the_root_logger_level(events):
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.ERROR)
    try:
        telemetry.emit_event("sas.custom")
    finally:
        root.setLevel(before)
    assert len(custom_events(events)) == 1


def test_the_alert_queries_read_the_names_the_code_emits():
    """The KQL in infra/modules/monitoring.bicep and the event names/attributes here must agree."""
    files, problems = bc.load()
    assert problems == []
    variables = files["modules/monitoring.bicep"].section("variables")
    stalled = variables["stalledInstancesQuery"]["value"]
    assert f'name == "{telemetry.INSTANCE_STALLED_EVENT}"' in stalled
    for attribute in ("workflow", "instance_id", "action"):
        assert f'customDimensions["{attribute}"]' in stalled
    steps = variables["stalledStepsQuery"]["value"]
    assert f'name == "{telemetry.RECOVERY_EVENT}"' in steps
    compensation = variables["compensationFailuresQuery"]["value"]
    assert telemetry_instruments.COMPENSATION_FAILED_COUNTER in compensation
    assert f'"{telemetry.OUTCOME_COMPENSATION_FAILED}"' in compensation


def test_every_instrument_is_made_in_the_one_module():
    """Metric names and instruments live in workflow_core/telemetry_instruments.py: no other module makes
    one or reaches for its providers (a second place drifts from docs/operations.md's table)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    made = re.compile(
        r"\b(create_(counter|histogram|gauge|observable_gauge|up_down_counter)|get_meter)\(|_meter_provider"
    )
    found = [
        f"{path.relative_to(root)}:{n}"
        for package in ("workflow_core", "activities", "orchestrators", "supervisor", "api", "devtools")
        for path in sorted((root / package).rglob("*.py"))
        if path.name != "telemetry_instruments.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if made.search(line)
    ]
    assert found == []
    names = {
        value
        for name, value in vars(telemetry_instruments).items()
        if name.endswith(("_COUNTER", "_GAUGE", "_HISTOGRAM"))
    }
    assert {
        "sas.canary.runs",
        "sas.canary.recovery_seconds",
        "sas.canary.stale_pools",
        "sas.circuit.state",
    } <= names
