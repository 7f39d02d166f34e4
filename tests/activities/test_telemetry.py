"""The Agent role reports its recovery actions as ``sas.recoveries`` (real OpenTelemetry SDK, in memory)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from activities.replies.results import handle_result
from activities.scheduler import functions as scheduling
from activities.worker.handlers import faults
from workflow_core import telemetry_instruments


@pytest.fixture
def reader():
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry_instruments.use_providers(meters, None)
    yield reader
    telemetry_instruments.use_providers(None, None)
    meters.shutdown()


def _counts(reader, name):
    data = reader.get_metrics_data()
    found = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found[point.attributes.get("action", "")] = point.value
    return found


def test_retry_timeout_give_up_and_failed_compensation_are_counted(harness, vclock, reader, durable_client):
    instance = harness.start()
    faults.inject("storage.create", faults.Fail(times=1))
    harness.run_step(instance, "create_storage")
    retry = {
        "instance_id": instance,
        "step_id": "create_storage",
        "attempt": 1,
        "retry_at": (vclock.now + timedelta(seconds=5)).isoformat(),
    }
    scheduling.schedule_retry(retry, harness.services)
    scheduling.schedule_retry(retry, harness.services)  # a re-run is not counted twice
    harness.dispatch(instance, "create_storage", 2, deadline_in=10)
    vclock.advance(11)
    scheduling.check_step(
        {"instance_id": instance, "step_id": "create_storage", "attempt": 2}, harness.services
    )
    scheduling.give_up_step(
        {"instance_id": instance, "step_id": "create_storage", "reason": "x"}, harness.services
    )
    scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "create_storage", 1, kind="compensate"), harness.services
    )
    scheduling.finish_compensation(
        {"instance_id": instance, "step_id": "create_storage", "error": "no luck"}, harness.services
    )

    counts = _counts(reader, "sas.recoveries")
    assert counts == {
        "retry_scheduled": 1,
        "timed_out": 1,
        "give_up": 1,
        "compensate": 1,
        "finish_compensation": 1,
    }
    assert sum(_counts(reader, "sas.compensation_failures").values()) == 1


def test_takeover_resend_and_late_results_are_counted(harness, reader, durable_client):
    instance = harness.start()
    harness.dispatch(instance, "register_dns")
    [work] = harness.work()
    faults.inject("dns.register", faults.CrashAfterEffect())
    with pytest.raises(faults.InjectedCrash):
        harness.deliver(work)
    harness.deliver(work, delivery_count=2)  # takes over
    harness.deliver(work, delivery_count=3)  # re-sends the recorded result
    [reply, _] = harness.results()
    durable_client.answers[instance] = 410
    asyncio.run(handle_result(reply.body, durable_client, harness.services))

    assert _counts(reader, "sas.recoveries") == {
        "agent_takeover": 1,
        "result_resent": 1,
        "late_result_ignored": 1,
    }
