"""Faults of the scheduler itself: its orchestration dies, or one of its activities meets a storage
error. The instance record's ``scheduler_deadline`` is how the watchdog finds such a workflow; the
workflow's ``on_scheduler_lost`` policy says whether it is resumed from the ledger or compensated."""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest
from azure.core.exceptions import ServiceResponseError

from devtools.harness import DEFAULT_WATCHDOG_PERIOD, PatternHarness
from tests.helpers.fault_matrix import PROVISION_INPUT, start_provisioning, storage_queue_only, verify
from workflow_core.ledger import decode_json
from workflow_core.workflows import version_of

STEPS = ("create_storage", "register_dns", "send_welcome")
SETTLED_INSTANCE = frozenset({"Succeeded", "Compensated", "CompensationFailed", "Failed", "Cancelled"})


def instance_status(h: PatternHarness, iid: str) -> str:
    return h.ledger.get_instance(iid).status.value


def instance_settled(h: PatternHarness, iid: str):
    return lambda: instance_status(h, iid) in SETTLED_INSTANCE


def instance_decisions(h: PatternHarness, iid: str) -> list[tuple[str, str, str, str]]:
    return [d for r in h.tick_reports for d in r.instance_decisions if d[0] == iid]


def completion_order(h: PatternHarness, iid: str, to_status: str) -> list[str]:
    return [e.step_id for e in h.events_for(iid) if e.action == "transition" and e.to_status == to_status]


@storage_queue_only
def test_terminated_mid_step_then_agent_answers_resume_finishes(harness):
    """The orchestration dies while register_dns is out; the agent answers afterwards (its result is
    recorded in the ledger, nobody waits for it). The default policy resumes from the ledger: no
    completed step runs again, the workflow finishes, nothing stays Pending."""
    h = harness
    held = h.hold("register_dns")
    iid = start_provisioning(h)
    assert h.ledger.get_instance(iid).on_scheduler_lost == "resume"  # the shipped default
    h.run_until(lambda: len(h.held(held)) == 1)
    h.host.terminate(iid, "killed mid-step")
    h.release(held)  # the agent answers after the scheduler died
    h.run_until(instance_settled(h, iid), timeout=timedelta(hours=2))

    assert [d[2] for d in instance_decisions(h, iid)] == ["resume_instance"]
    assert h.statuses(iid) == dict.fromkeys(STEPS, "Succeeded")
    assert instance_status(h, iid) == "Succeeded"
    for step in STEPS:
        assert h.handler_calls(iid, step) == 1, step
    verify(
        h,
        "scheduler terminated mid-step (resume)",
        "terminate while register_dns is out; agent answers late",
        {iid: "succeeded"},
    )


@storage_queue_only
def test_terminated_mid_step_then_agent_answers_compensate_undoes_in_reverse_order(harness):
    """Same death, policy ``compensate``: the late answer makes register_dns Succeeded, then every
    completed step is undone in reverse completion order and the step never started is Cancelled."""
    h = harness
    held = h.hold("register_dns")
    iid = start_provisioning(h)
    h.ledger.update_instance(h.ledger.get_instance(iid), actor="test", on_scheduler_lost="compensate")
    h.run_until(lambda: len(h.held(held)) == 1)
    h.host.terminate(iid, "killed mid-step")
    h.release(held)
    h.run_until(lambda: h.steps(iid)["register_dns"].status.value == "Succeeded")
    h.run_until(instance_settled(h, iid), timeout=timedelta(hours=2))

    assert [d[2] for d in instance_decisions(h, iid)] == ["compensate_instance"]
    completed = completion_order(h, iid, "Succeeded")
    assert completed == ["create_storage", "register_dns"]
    assert completion_order(h, iid, "Compensated") == completed[::-1]
    assert h.statuses(iid) == {
        "create_storage": "Compensated",
        "register_dns": "Compensated",
        "send_welcome": "Cancelled",
    }
    assert instance_status(h, iid) == "Compensated"
    assert h.handler_calls(iid, "send_welcome") == 0
    for step in ("create_storage", "register_dns"):
        assert h.effects(iid, step) == 1 and h.effects(iid, step, kind="compensate") == 1, step
        assert [row["State"] for row in h.remote_effects(iid, step)] == ["undone"], step
    verify(
        h,
        "scheduler terminated mid-step (compensate)",
        "terminate while register_dns is out; agent answers late",
        {iid: "terminated, then compensated"},
    )


def test_one_storage_error_in_dispatch_step_is_retried_by_the_durable_retry_policy(harness):
    """``dispatch_step`` meets one transient storage error before it writes anything: the activity
    fails once, the orchestration's retry policy runs it again, and the workflow finishes."""
    h = harness
    real = h.ledger.transition
    raised: list[str] = []

    def transition(record, to, **kwargs):  # the Dispatched write (unread: no read to fail first)
        if record.step_id == "register_dns" and _in_dispatch() and not raised:
            raised.append(record.step_id)
            raise ServiceResponseError("Connection aborted: the storage account timed out")
        return real(record, to, **kwargs)

    h.ledger.transition = transition
    iid = start_provisioning(h)
    status = h.run_until_complete(iid)
    h.ledger.transition = real

    assert raised == ["register_dns"]  # the fault did fire inside dispatch_step
    assert status.runtime_status.value == "Completed"
    assert status.output["status"] == "succeeded"
    assert h.statuses(iid) == dict.fromkeys(STEPS, "Succeeded")
    assert instance_status(h, iid) == "Succeeded"
    assert not instance_decisions(h, iid)  # the scheduler healed itself: no watchdog needed
    for step in STEPS:
        assert h.handler_calls(iid, step) == 1, step
    verify(
        h,
        "storage error in a scheduler activity",
        "dispatch_step's ledger write raises ServiceResponseError once",
        {iid: "succeeded"},
    )


def _in_dispatch() -> bool:
    """Called from the scheduler's ``dispatch_step``/``dispatch_compensation`` activity body?"""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_dispatch" and frame.f_code.co_filename.endswith("dispatch.py"):
            return True
        frame = frame.f_back
    return False


def _shape(value):
    """A workflow output with each generated leaf (account names, record ids: fresh per remote call)
    replaced by its type: what two runs of the same input must share."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def test_scheduler_killed_between_two_steps_is_resumed_within_its_promise_and_one_tick(harness):
    """The orchestration dies with create_storage Succeeded and register_dns still Pending: no step is
    in flight, so no step deadline will ever pass. The instance's scheduler deadline does: the next
    watchdog tick after it resumes the instance; create_storage is not run again; the outputs are
    those of a clean run of the same input."""
    h = harness
    clean = h.start_workflow("provision-tenant", {"tenant_id": "clean", **PROVISION_INPUT})
    clean_status = h.run_until_complete(clean)
    assert clean_status.output["status"] == "succeeded"

    # The scheduler is stopped right at the gap: every ledger write of dispatch_step for register_dns
    # fails until it is killed, so the step is still Pending (nothing was written or sent for it).
    real = h.ledger.transition
    blocked: list[str] = []

    def transition(record, to, **kwargs):
        if record.instance_id == "killed-between" and record.step_id == "register_dns" and _in_dispatch():
            blocked.append(record.step_id)
            raise ServiceResponseError("the scheduler's process is dying")
        return real(record, to, **kwargs)

    h.ledger.transition = transition
    iid = h.start_workflow("provision-tenant", {"tenant_id": "clean", **PROVISION_INPUT}, "killed-between")
    h.run_until(lambda: bool(blocked))
    h.host.terminate(iid, "killed between two steps")
    h.ledger.transition = real
    assert h.statuses(iid) == {
        "create_storage": "Succeeded",
        "register_dns": "Pending",
        "send_welcome": "Pending",
    }
    before_kill = h.steps(iid)["create_storage"].result_ref
    promised = h.ledger.get_instance(iid).scheduler_deadline
    assert promised is not None
    killed_at = h.now()
    h.run_until(instance_settled(h, iid), timeout=timedelta(hours=2))

    resumes = [
        (r.now, d)
        for r in h.tick_reports
        for d in r.instance_decisions
        if d[0] == iid and d[2] == "resume_instance"
    ]
    assert len(resumes) == 1
    resumed_at = resumes[0][0]
    assert killed_at < resumed_at <= promised + DEFAULT_WATCHDOG_PERIOD, (resumed_at, promised)
    assert h.ledger.get_instance(iid).resume_count == 1
    for step in STEPS:
        assert h.handler_calls(iid, step) == 1, step
    status = h.host.get_status(iid)
    assert status.output["status"] == "succeeded"
    outputs = status.output["outputs"]
    assert {k: v for k, v in status.output.items() if k != "outputs"} == {
        k: v for k, v in clean_status.output.items() if k != "outputs"
    }
    assert _shape(outputs) == _shape(clean_status.output["outputs"])
    # every output is the one its step recorded; create_storage's is the one from before the kill
    assert outputs == {s: decode_json(r.result_ref) for s, r in h.steps(iid).items()}
    assert h.steps(iid)["create_storage"].result_ref == before_kill
    assert outputs["send_welcome"]["to"] == clean_status.output["outputs"]["send_welcome"]["to"]
    verify(
        h,
        "scheduler killed between two steps",
        "terminate with create_storage done, register_dns Pending",
        {iid: "succeeded", clean: "succeeded"},
    )


@storage_queue_only
def test_max_resumes_exhausted_compensates_and_flags_the_instance(harness):
    """``max_resumes: 1``: the first death is resumed, the second is compensated and the instance is
    flagged for an operator's attention."""
    h = harness
    held = h.hold("register_dns", times=None)  # the DNS agent never answers
    iid = start_provisioning(h)
    h.ledger.update_instance(h.ledger.get_instance(iid), actor="test", max_resumes=1)
    h.run_until(lambda: len(h.held(held)) == 1)
    h.host.terminate(iid, "first death")
    h.run_until(lambda: h.ledger.get_instance(iid).resume_count == 1, timeout=timedelta(hours=1))
    h.run_until(lambda: h.host.get_status(iid).runtime_status.value == "Running")
    h.host.terminate(iid, "second death")
    h.run_until(instance_settled(h, iid), timeout=timedelta(hours=2))

    starts = [d[2] for d in instance_decisions(h, iid) if d[2] in ("resume_instance", "compensate_instance")]
    assert starts == ["resume_instance", "compensate_instance"]
    assert "1 resume(s) used of 1" in next(d[3] for d in instance_decisions(h, iid) if d[2] == starts[1])
    record = h.ledger.get_instance(iid)
    assert record.status.value == "Compensated"
    assert record.resume_count == 1
    assert record.needs_attention is True
    assert record.attention_reason and "resume" in record.attention_reason
    assert iid in [r.instance_id for r in h.ledger.list_instances(needs_attention=True)[0]]
    assert h.statuses(iid)["create_storage"] == "Compensated"
    assert h.statuses(iid)["send_welcome"] == "Cancelled"
    assert h.handler_calls(iid, "create_storage") == 1
    h.release(held)
    h.host.run_until_idle()
    verify(
        h,
        "max_resumes exhausted",
        "max_resumes 1; scheduler terminated twice",
        {iid: "terminated, then compensated"},
    )


@storage_queue_only
@pytest.mark.parametrize("starter_creates_steps", [True, False], ids=["steps-by-starter", "too-long-for-it"])
def test_scheduler_that_never_starts_is_resumed_from_step_0(harness, monkeypatch, starter_creates_steps):
    """The starter's process dies between writing the instance record and starting the orchestration:
    no orchestration exists, ever. The record makes the watchdog find the instance at its scheduler
    deadline; it resumes it from step 0, onto the Pending steps the starter wrote with the record, or
    (a workflow too long for that transaction) with no state, so the resumed scheduler creates them.
    Each step runs once."""
    import asyncio

    import workflow_core.starter
    from workflow_core.ledger import encode_json
    from workflow_core.starter import record_instance
    from workflow_core.workflows.store import definition_for

    h = harness
    if not starter_creates_steps:
        monkeypatch.setattr(workflow_core.starter, "MAX_STEPS_WITH_INSTANCE", 0)
    definition = definition_for("provision-tenant", None, None)
    workflow_input = definition.validate_input({"tenant_id": "never-started", **PROVISION_INPUT})
    iid = "never-started"
    created = asyncio.run(
        record_instance(
            h.services, definition, iid, workflow_input, encode_json(workflow_input), version_of(definition)
        )
    )
    assert (created is not None) is starter_creates_steps  # the rows' versions when it wrote the steps
    assert h.statuses(iid) == (dict.fromkeys(STEPS, "Pending") if starter_creates_steps else {})
    promised = h.ledger.get_instance(iid).scheduler_deadline
    h.run_until(instance_settled(h, iid), timeout=timedelta(hours=2))

    resumes = [(r.now, d) for r in h.tick_reports for d in r.instance_decisions if d[0] == iid]
    assert [d[2] for _, d in resumes] == ["resume_instance"]
    assert resumes[0][0] <= promised + DEFAULT_WATCHDOG_PERIOD
    assert instance_status(h, iid) == "Succeeded"
    assert h.host.get_status(iid).output["status"] == "succeeded"
    for step in STEPS:
        assert h.handler_calls(iid, step) == 1, step
    verify(
        h,
        "scheduler never started",
        "the starter dies after the record, before the start",
        {iid: "succeeded"},
    )
