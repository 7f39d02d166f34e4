"""Recovery telemetry with the real OpenTelemetry SDK (in-memory metric reader and span exporter)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from supervisor.watchdog import run_tick
from tests.helpers.durable import RecordingClient
from tests.helpers.rows import NOW, WORKFLOW, make_step
from workflow_core import telemetry, telemetry_instruments
from workflow_core.ledger import StepStatus

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def otel():
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    spans = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    telemetry_instruments.use_providers(meters, tracers)
    yield reader, spans, tracers
    telemetry_instruments.use_providers(None, None)
    meters.shutdown()
    tracers.shutdown()


def points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict, int]]:
    data = reader.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += [(dict(p.attributes), p.value) for p in metric.data.data_points]
    return found


def test_record_recovery_counts_with_action_outcome_and_workflow(otel, caplog):
    reader, spans, tracers = otel
    with (
        caplog.at_level(logging.INFO, logger="sas.supervisor"),
        tracers.get_tracer("t").start_as_current_span("tick"),
    ):
        telemetry.record_recovery("wf-1", "a", 2, "resend", "ok", workflow="provision-tenant", reason="lost")
        telemetry.record_recovery("wf-2", "a", 1, "resend", "ok", workflow="provision-tenant")
        telemetry.record_recovery("wf-3", "b", 1, "fail_step", "ok", workflow="order-fulfilment")

    assert sorted(points(reader, "sas.recoveries"), key=lambda p: p[0]["action"]) == [
        ({"action": "fail_step", "outcome": "ok", "workflow": "order-fulfilment"}, 1),
        ({"action": "resend", "outcome": "ok", "workflow": "provision-tenant"}, 2),
    ]
    assert points(reader, "sas.compensation_failures") == []

    (span,) = spans.get_finished_spans()
    first = span.events[0]
    assert first.name == "sas.recovery"
    assert first.attributes["sas.instance_id"] == "wf-1" and first.attributes["sas.attempt"] == 2
    assert first.attributes["sas.action"] == "resend" and first.attributes["sas.reason"] == "lost"

    record = caplog.records[0]
    assert record.name == "sas.supervisor"
    # The fields App Insights turns into customDimensions of the trace.
    assert (record.instance_id, record.step_id, record.attempt) == ("wf-1", "a", 2)
    assert (record.action, record.outcome, record.workflow, record.reason) == (
        "resend",
        "ok",
        "provision-tenant",
        "lost",
    )


def test_compensation_failure_counts_separately(otel, caplog):
    reader, _, _ = otel
    with caplog.at_level(logging.WARNING, logger="sas.supervisor"):
        telemetry.record_compensation_failed(
            "wf-9", "charge", 3, workflow="order-fulfilment", error="refund down"
        )
    assert points(reader, "sas.compensation_failures") == [({"workflow": "order-fulfilment"}, 1)]
    assert points(reader, "sas.recoveries") == [
        (
            {
                "action": "finish_compensation",
                "outcome": "compensation_failed",
                "workflow": "order-fulfilment",
                "error.type": "_OTHER",  # failures carry error.type; the caller gave no class
            },
            1,
        )
    ]
    assert caplog.records[0].levelno == logging.WARNING and caplog.records[0].error == "refund down"


def test_reserved_log_record_names_do_not_break_logging(otel, caplog):
    with caplog.at_level(logging.INFO, logger="sas.supervisor"):
        telemetry.record_recovery("wf", "s", None, "x", "ok", message="m", name="n")
    assert caplog.records[0].sas_message == "m" and caplog.records[0].sas_name == "n"


def test_a_watchdog_tick_emits_recovery_telemetry(otel, services, ledger):
    reader, spans, _ = otel
    make_step(ledger, "wf-tel-1", StepStatus.RUNNING)
    make_step(ledger, "wf-tel-2", StepStatus.RUNNING)
    client = RecordingClient({"wf-tel-1": "Running", "wf-tel-2": "Failed"})
    asyncio.run(run_tick(client, services, now=NOW, tick_id="tel"))

    assert sorted(points(reader, "sas.recoveries"), key=lambda p: p[0]["action"]) == [
        # wf-tel-2's scheduler is gone: its instance record decides (its policy: compensate)
        ({"action": "compensate_instance", "outcome": "ok", "workflow": WORKFLOW}, 1),
        ({"action": "fail_step", "outcome": "ok", "workflow": WORKFLOW}, 1),
    ]
    (tick_span,) = [s for s in spans.get_finished_spans() if s.name == "sas.watchdog.tick"]
    assert tick_span.attributes["sas.tick_id"] == "tel" and tick_span.attributes["sas.claimed"] == 2
    # each step's recovery has its own span under the tick's, and the recovery event is on it
    recoveries = [s for s in spans.get_finished_spans() if s.name == "sas.watchdog.recover"]
    assert {s.parent.span_id for s in recoveries} == {tick_span.context.span_id}
    assert sorted(e.attributes["sas.instance_id"] for s in recoveries for e in s.events) == [
        "wf-tel-1",
        "wf-tel-2",
    ]


def test_nothing_is_exported_without_a_connection_string(monkeypatch):
    monkeypatch.delenv("APPLICATIONINSIGHTS_CONNECTION_STRING", raising=False)
    assert telemetry_instruments.configure_telemetry() is False
    assert telemetry_instruments.configure_telemetry() is False
    assert telemetry_instruments.configured_by() is None


def test_azure_monitor_is_configured_once_with_a_connection_string():
    # A separate interpreter: configure_azure_monitor installs process-wide providers.
    script = textwrap.dedent(
        """
        import json
        from unittest import mock
        from opentelemetry import metrics, trace
        import azure.monitor.opentelemetry as am
        from workflow_core import telemetry, telemetry_instruments

        real = am.configure_azure_monitor
        with mock.patch.object(am, "configure_azure_monitor", wraps=real) as spy:
            first = telemetry_instruments.configure_telemetry()
            second = telemetry_instruments.configure_telemetry()
        telemetry.record_recovery("wf", "s", 1, "resend", "ok", workflow="w")
        print(json.dumps({
            "first": first, "second": second, "calls": spy.call_count,
            "kwargs": sorted(spy.call_args.kwargs),
            "logger_name": spy.call_args.kwargs["logger_name"],
            "meter_provider": type(metrics.get_meter_provider()).__module__,
            "tracer_provider": type(trace.get_tracer_provider()).__module__,
        }))
        import os
        os._exit(0)  # do not wait for the exporters' final flush to an address nobody listens on
        """
    )
    env = {
        **os.environ,
        "APPLICATIONINSIGHTS_CONNECTION_STRING": "InstrumentationKey=00000000-0000-0000-0000-000000000000;"
        "IngestionEndpoint=http://127.0.0.1:9/",
        "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["first"] is True and result["second"] is True and result["calls"] == 1
    assert "connection_string" in result["kwargs"] and result["logger_name"] == "sas"
    assert result["meter_provider"].startswith("opentelemetry.sdk")
    assert result["tracer_provider"].startswith("opentelemetry.sdk")


def test_managed_identity_is_used_for_ingestion_when_the_app_settings_name_one(monkeypatch):
    from azure.identity import ManagedIdentityCredential

    from workflow_core.telemetry_instruments import _entra_credential

    monkeypatch.delenv("AZURE_CLIENT_ID", raising=False)
    monkeypatch.delenv("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", raising=False)
    assert _entra_credential() is None
    monkeypatch.setenv("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", "Authorization=AAD;ClientId=1234")
    credential = _entra_credential()
    assert isinstance(credential, ManagedIdentityCredential)
