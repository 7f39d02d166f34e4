"""Work expires with its attempt: every work message carries ``expires_at`` (deadline plus grace), is
sent with a matching time-to-live, and the worker (so ``sas-agent`` too) refuses one that arrives
expired, with no effect."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from activities.worker.agent_worker import FAST_CLOCK_ALLOWANCE_SECONDS, process_work_message
from activities.worker.handlers import RemoteEffects
from workflow_core import clock
from workflow_core.ledger import StepStatus
from workflow_core.messages import EXPIRY_GRACE_SECONDS
from workflow_core.transport import OutgoingMessage


def test_every_work_message_carries_its_attempts_expiry(harness):
    instance = harness.start()
    harness.dispatch(instance, "register_dns", deadline_in=20)
    [work] = harness.work()
    row = harness.ledger.get(instance, "register_dns")
    expires = datetime.fromisoformat(work.body["expires_at"])
    assert expires == row.deadline + timedelta(seconds=EXPIRY_GRACE_SECONDS)
    assert work.body["reply_token"] and work.body["idempotency_key"] == f"{instance}:register_dns"


def test_an_expired_work_message_is_refused_without_effect(harness, vclock):
    instance = harness.start()
    harness.dispatch(instance, "register_dns", deadline_in=5)
    [work] = harness.work()
    vclock.advance(5 + EXPIRY_GRACE_SECONDS + FAST_CLOCK_ALLOWANCE_SECONDS + 1)

    reason = process_work_message(work.body, delivery_count=1, services=harness.services, worker_id="late")

    assert reason is not None and "expired" in reason
    assert harness.ledger.get(instance, "register_dns").status is StepStatus.DISPATCHED  # nobody claimed
    assert RemoteEffects.for_services(harness.services).get("dns", f"{instance}:register_dns") is None
    assert harness.results() == []


def test_an_expired_message_is_never_delivered(harness):
    """The transport's time-to-live: the queue drops the message itself (Azurite honours it)."""
    queue = harness.services.settings.work_queue
    harness.services.transport.send(
        queue,
        OutgoingMessage(body={"x": 1}, message_id="m-ttl", expires_at=clock.utcnow() + timedelta(seconds=1)),
    )
    time.sleep(2.5)
    assert harness.work() == []


def test_time_to_live_matches_the_expiry():
    now = datetime.fromisoformat("2030-01-01T00:00:00+00:00")
    message = OutgoingMessage(body={}, message_id="m", expires_at=now + timedelta(seconds=90))
    assert message.time_to_live(now) == timedelta(seconds=90)
    assert message.time_to_live(now + timedelta(hours=1)) == timedelta(seconds=1)  # never zero or less
    assert OutgoingMessage(body={}, message_id="m").time_to_live(now) is None
