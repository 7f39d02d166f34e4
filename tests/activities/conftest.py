"""Fixtures for the Agent role: real Azurite, real ledger, real StorageQueueTransport, per-test names.

The only stand-in is :class:`RecordingClient`, at the durable client boundary (``raise_event``):
it records the events the result and dead-letter handlers raise and, for an instance configured as
gone, answers the way the Durable Functions host does (404/410) *through the SDK's own*
``DurableOrchestrationClient.raise_event``, so the exception is exactly the one production sees.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.common import step_input, step_output
from activities.scheduler import functions as scheduling
from activities.worker.agent_worker import process_work_message
from activities.worker.handlers import AGENT_HANDLERS, faults
from tests.helpers.durable import sdk_raise_event_answering
from workflow_core import clock
from workflow_core.ledger import encode_json
from workflow_core.ledger.known_rows import created_snapshot
from workflow_core.runtime import Services, reset_services, set_services
from workflow_core.transport import ReceivedMessage
from workflow_core.workflows import get_workflow
from workflow_core.workflows.model import new_steps
from workflow_core.workflows.store import version_of


@dataclass
class VirtualClock:
    now: datetime

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def vclock() -> Iterator[VirtualClock]:
    """``workflow_core.clock`` on a clock the test moves (starts at the wall clock, whole second)."""
    state = VirtualClock(datetime.now(UTC).replace(microsecond=0))
    with clock.use_clock(lambda: state.now):
        yield state


@pytest.fixture
def app_settings() -> dict[str, str]:
    return {"MAX_DELIVERY_COUNT": "3"}


@pytest.fixture
def services(services, app_env, monkeypatch) -> Iterator[Services]:
    """The root fixture's services, installed as the process's and with their settings in the
    environment, exactly as a function body gets them (``get_services()``); no fault injected and the
    agent handlers as they were, before and after."""
    for name, value in app_env.items():
        monkeypatch.setenv(name, value)
    reset_services()
    set_services(services)
    faults.clear()
    handlers_before = dict(AGENT_HANDLERS)
    try:
        yield services
    finally:
        faults.clear()
        AGENT_HANDLERS.clear()
        AGENT_HANDLERS.update(handlers_before)
        reset_services()


@dataclass
class Harness:
    """Small conveniences over the real services; every call goes to Azurite."""

    services: Services
    worker_id: str = "worker-a"

    @property
    def ledger(self):
        return self.services.ledger

    @property
    def transport(self):
        return self.services.transport

    def start(self, workflow: str = "provision-tenant") -> str:
        instance_id = f"inst-{uuid.uuid4().hex[:10]}"
        scheduling.create_workflow_steps({"instance_id": instance_id, "workflow": workflow}, self.services)
        return instance_id

    def dispatch_payload(
        self,
        instance_id: str,
        step_id: str,
        attempt: int = 1,
        *,
        deadline_in: float = 60,
        input: dict[str, Any] | None = None,
        kind: str = "work",
        workflow: str = "provision-tenant",
    ) -> dict[str, Any]:
        return {
            "instance_id": instance_id,
            "orchestration_id": instance_id,
            "workflow": workflow,
            "step_id": step_id,
            "attempt": attempt,
            "deadline": (clock.utcnow() + timedelta(seconds=deadline_in)).isoformat(),
            "input": input if input is not None else self._default_input(instance_id, step_id, kind),
            "kind": kind,
        }

    def start_as_the_starter(self, workflow: str = "provision-tenant") -> tuple[str, dict[str, Any]]:
        """An instance as the HTTP starter writes it (record + Pending steps in one transaction), and
        the versions it hands the orchestration (``orchestrators.state.StartedRows``)."""
        definition = get_workflow(workflow)
        instance_id = f"inst-{uuid.uuid4().hex[:10]}"
        record, step_etags = self.ledger.create_instance_with_steps(
            instance_id,
            workflow,
            actor="test",
            input_json=encode_json({"tenant_id": instance_id}),
            scheduler_deadline=clock.utcnow() + timedelta(minutes=2),
            steps_due_after_seconds=definition.shortest_deadline_seconds,
            steps=new_steps(definition),
            version=version_of(definition),  # pinned, as the starter pins every instance
        )
        return instance_id, {"instance": created_snapshot(record), "steps": step_etags}

    def _default_input(self, instance_id: str, step_id: str, kind: str) -> dict[str, Any]:
        """Work: a tenant's input. A compensation: the step's input and output as the ledger holds
        them, as ``plan_compensation`` hands them to the compensation orchestrator (the worker
        checks a message's input against the ledger's)."""
        if kind == "work":
            return {"tenant_id": instance_id, "region": "westeurope"}
        row = self.ledger.get(instance_id, step_id)
        return {"input": step_input(row), "output": step_output(row)}

    def dispatch(self, instance_id: str, step_id: str, attempt: int = 1, **kwargs: Any) -> dict[str, Any]:
        return scheduling.dispatch_step(
            self.dispatch_payload(instance_id, step_id, attempt, **kwargs), self.services
        )

    def drain(self, queue: str) -> list[ReceivedMessage]:
        """Every message now on ``queue``, received and completed."""
        found: list[ReceivedMessage] = []
        while batch := self.transport.receive(queue, max_messages=32, lock_seconds=30):
            for message in batch:
                self.transport.complete(message)
            found.extend(batch)
        return found

    def work(self) -> list[ReceivedMessage]:
        return self.drain(self.services.settings.work_queue)

    def results(self) -> list[ReceivedMessage]:
        return self.drain(self.services.settings.result_queue)

    def deliver(
        self, message: ReceivedMessage, *, worker_id: str | None = None, delivery_count: int | None = None
    ):
        process_work_message(
            message.body,
            delivery_count=delivery_count or message.delivery_count,
            services=self.services,
            worker_id=worker_id or self.worker_id,
        )

    def run_step(
        self, instance_id: str, step_id: str, attempt: int = 1, **kwargs: Any
    ) -> list[ReceivedMessage]:
        """Dispatch, deliver the work message once, return the replies on the result queue."""
        self.dispatch(instance_id, step_id, attempt, **kwargs)
        for message in self.work():
            self.deliver(message)
        return self.results()

    def audit(self, instance_id: str, step_id: str | None = None):
        return [a for a in self.ledger.audit_trail(instance_id) if step_id is None or a.step_id == step_id]


@pytest.fixture
def harness(services) -> Harness:
    return Harness(services)


# ---- the durable client boundary ------------------------------------------------------------------


@dataclass
class RecordingClient:
    """Records ``raise_event`` calls; instances in ``answers`` get that HTTP status from the SDK."""

    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None:
        self.calls.append((instance_id, event_name, json.loads(json.dumps(event_data))))
        await sdk_raise_event_answering(
            self.answers.get(instance_id, 202), instance_id, event_name, event_data
        )


@pytest.fixture
def durable_client() -> RecordingClient:
    return RecordingClient()
