"""Faults while undoing: a compensator that fails, then recovers; one that never does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from activities.worker.handlers import faults
from tests.helpers.fault_matrix import start_provisioning, verify
from workflow_core import telemetry_instruments


@pytest.fixture
def metrics():
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry_instruments.use_providers(provider, None)
    yield reader
    telemetry_instruments.use_providers(None, None)
    provider.shutdown()


def counter(reader: InMemoryMetricReader, name: str) -> int:
    data = reader.get_metrics_data()
    return sum(
        point.value
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    )


def compensation_attempts(h, iid, step_id):
    return [
        e.record.compensation_attempt
        for e in h.events_for(iid)
        if e.step_id == step_id
        and e.actor == "scheduler"
        and e.to_status == "Compensating"
        and e.action == "transition"
    ]


def test_compensator_failing_then_succeeding(harness):
    h = harness
    faults.inject("email.send_welcome", faults.Fail())  # the last step gives up: compensate the rest
    faults.inject("dns.unregister", faults.Fail(times=2))  # undoing DNS fails twice, then works
    iid = start_provisioning(h)
    status = h.run_until_complete(iid, timeout=timedelta(hours=2))
    verify(h, "compensator failing then succeeding", "dns.unregister fails twice", {iid: "compensated"})

    assert status.output["status"] == "compensated"
    assert compensation_attempts(h, iid, "register_dns") == [1, 2, 3]
    assert h.statuses(iid) == {
        "create_storage": "Compensated",
        "register_dns": "Compensated",
        "send_welcome": "Cancelled",
    }
    for step in ("create_storage", "register_dns"):
        assert [row["State"] for row in h.remote_effects(iid, step)] == ["undone"]
        assert h.effects(iid, step, kind="compensate") == 1


def test_compensator_failing_for_good_is_surfaced_to_operators(harness, metrics):
    h = harness
    faults.inject("email.send_welcome", faults.Fail())
    faults.inject("dns.unregister", faults.Fail())  # undoing DNS never works
    iid = start_provisioning(h)
    status = h.run_until_complete(iid, timeout=timedelta(hours=2))
    verify(
        h,
        "compensator failing for good",
        "dns.unregister always fails -> CompensationFailed",
        {iid: "compensation_failed"},
    )

    assert status.output["status"] == "compensation_failed"
    assert h.statuses(iid) == {
        "create_storage": "Compensated",  # the rest of the compensation still ran
        "register_dns": "CompensationFailed",
        "send_welcome": "Cancelled",
    }
    # The operators' inbox lists it, with the compensator's error...
    inbox = [(r.instance_id, r.step_id) for r in h.ledger.needing_attention()]
    assert (iid, "register_dns") in inbox
    assert "injected failure" in h.steps(iid)["register_dns"].last_error
    # ...telemetry counts it (the alert rule's signal)...
    assert counter(metrics, telemetry_instruments.COMPENSATION_FAILED_COUNTER) == 1
    # ...and the remote DNS record still exists: nothing pretends it was undone.
    assert [row["State"] for row in h.remote_effects(iid, "register_dns")] == ["applied"]
    assert compensation_attempts(h, iid, "register_dns") == [1, 2, 3]
    # No operator has acted yet: nothing names one as the owner of the step or the instance (the
    # status and the attention flag say that one is needed).
    assert not h.steps(iid)["register_dns"].owner.startswith("operator")
    assert not (h.ledger.get_instance(iid).owner or "").startswith("operator")
    assert h.ledger.get_instance(iid).needs_attention
