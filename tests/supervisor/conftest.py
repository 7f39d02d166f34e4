"""Fixtures for the supervisor tests: real Azurite tables and queues, real ledger and transport.

The only stand-in is :class:`RecordingClient`, at the Durable client boundary (``get_status``,
``raise_event``, ``start_new``) for decision-level tests; end-to-end tests use the durable test host.
"""

from __future__ import annotations

import io
import secrets
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from devtools.azurite import env_for
from operator_cli.cli import main
from workflow_core import clock
from workflow_core.ledger import (
    InstanceRecord,
    InstanceStatus,
    NewStep,
    StepLedger,
    StepRecord,
    StepStatus,
    encode_json,
)
from workflow_core.runtime import Services
from workflow_core.settings import load_settings
from workflow_core.workflows import get_workflow, version_of

S = StepStatus
IS = InstanceStatus
NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
WORKFLOW = "provision-tenant"  # a real definition: create_storage (300 s, heartbeat 60 s), register_dns...


def settings_env(azurite, unique_name, **overrides: str) -> dict[str, str]:
    env = {
        **env_for(azurite),
        "LEDGER_TABLE_NAME": unique_name("steps"),
        "DEADLINE_INDEX_TABLE_NAME": unique_name("idx"),
        "WORK_QUEUE_NAME": unique_name("work"),
        "RESULT_QUEUE_NAME": unique_name("results"),
        "DEAD_LETTER_QUEUE_NAME": unique_name("poison"),
        "WATCHDOG_GRACE_SECONDS": "30",
        "WATCHDOG_BATCH_SIZE": "100",
    }
    env.update(overrides)
    return env


@pytest.fixture
def env(azurite, unique_name) -> dict[str, str]:
    return settings_env(azurite, unique_name)


@pytest.fixture
def services(env) -> Services:
    """Services on fresh tables and queues of the session's Azurite (storage-queue transport)."""
    svc = Services(load_settings(env))
    svc.ledger  # noqa: B018 - creates the tables
    svc.transport  # noqa: B018 - creates the queues
    yield svc
    svc.close()


@pytest.fixture
def cli(env, monkeypatch, request):
    """Run the CLI with the app's settings in the environment (as an operator's shell would have), as
    OS user ``alice``, on the clock at the test module's ``LATER`` (default: a minute after ``NOW``).
    ``run(*argv, answer=...)``: ``(exit code, stdout, stderr)``; ``answer`` is what the operator types
    at a confirmation prompt (none expected when unset)."""
    for name in ("AzureWebJobsStorage", "LEDGER_TABLE_NAME", "DEADLINE_INDEX_TABLE_NAME"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv("AGENT_TRANSPORT", raising=False)  # the CLI must not need transport settings
    for commands in ("action_commands", "operations_commands", "circuit_commands"):  # the OS account
        monkeypatch.setattr(f"operator_cli.{commands}.operator_user", lambda: "alice")
    later = getattr(request.module, "LATER", NOW + timedelta(minutes=1))

    def run(*argv: str, answer: str | None = None) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()

        def read(prompt: str) -> str:
            out.write(prompt)
            if answer is None:
                raise AssertionError("the CLI asked for confirmation unexpectedly")
            return answer

        with clock.use_clock(lambda: later):
            code = main(list(argv), stdout=out, stderr=err, read=read)
        return code, out.getvalue(), err.getvalue()

    return run


@pytest.fixture
def ledger(services) -> StepLedger:
    return services.ledger


class RecordingClient:
    """The Durable client's calls the watchdog makes, recorded; thread-safe.

    ``statuses`` maps an orchestration id to its runtime status ("Running", "Failed"...); an id not
    in it answers like the real client for an unknown instance (no runtime status).
    """

    def __init__(self, statuses: dict[str, str] | None = None) -> None:
        self.statuses: dict[str, str] = dict(statuses or {})
        self.events: list[tuple[str, str, Any]] = []
        self.starts: list[tuple[str, str, Any]] = []
        self.terminations: list[tuple[str, str]] = []
        self.status_calls: list[str] = []
        self.fail_status_for: set[str] = set()
        self._lock = threading.Lock()

    async def get_status(self, instance_id: str, *args: Any, **kwargs: Any) -> DurableOrchestrationStatus:
        with self._lock:
            self.status_calls.append(instance_id)
            if instance_id in self.fail_status_for:
                raise RuntimeError(f"status endpoint failed for {instance_id}")
            status = self.statuses.get(instance_id)
        if status is None:  # what the SDK builds from a 404 body
            return DurableOrchestrationStatus.from_json(f"instance {instance_id} not found")
        return DurableOrchestrationStatus(
            instanceId=instance_id, runtimeStatus=status, createdTime="2030-06-01T11:00:00Z"
        )

    async def raise_event(
        self, instance_id: str, event_name: str, event_data: Any = None, **kwargs: Any
    ) -> None:
        with self._lock:
            self.events.append((instance_id, event_name, event_data))

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any = None
    ) -> str:
        with self._lock:
            self.starts.append((orchestration_function_name, instance_id, client_input))
            self.statuses[instance_id] = "Pending"
        return instance_id

    async def terminate(self, instance_id: str, reason: str) -> None:
        with self._lock:
            self.terminations.append((instance_id, reason))
            self.statuses[instance_id] = "Terminated"


@pytest.fixture
def client() -> RecordingClient:
    return RecordingClient()


# An instance's promise in these tests: far enough ahead that no tick finds the instance itself overdue
# unless a decision moved it (a claim: a lease ahead).
PROMISE = NOW + timedelta(days=30)
INPUT = {"tenant_id": "t1", "region": "westeurope", "sku": "Standard_LRS"}


def make_instance(
    ledger: StepLedger,
    instance_id: str,
    status: InstanceStatus = IS.RUNNING,
    *,
    workflow: str = WORKFLOW,
    on_scheduler_lost: Literal["resume", "compensate"] = "compensate",
    scheduler_deadline: datetime = PROMISE,
) -> InstanceRecord:
    """Write the record of an instance, as the HTTP starter does before anything else of it exists,
    and walk it, legally, to ``status`` (Running, Compensating, CompensationFailed, Succeeded...).

    ``on_scheduler_lost`` is ``compensate`` by default: a step whose orchestration is gone then has
    its instance compensated (``compensate_instance``) rather than resumed."""
    record = ledger.create_instance(
        instance_id,
        workflow,
        actor="api:start",
        input_json=encode_json(INPUT),
        scheduler_deadline=scheduler_deadline,
        on_scheduler_lost=on_scheduler_lost,
        version=version_of(get_workflow(workflow)),
    )
    path = {
        IS.RUNNING: [],
        IS.COMPENSATING: [IS.COMPENSATING],
        IS.COMPENSATION_FAILED: [IS.COMPENSATING, IS.COMPENSATION_FAILED],
        IS.COMPENSATED: [IS.COMPENSATING, IS.COMPENSATED],
        IS.SUCCEEDED: [IS.SUCCEEDED],
        IS.FAILED: [IS.FAILED],
    }[status]
    for to in path:
        supervised = to in (IS.RUNNING, IS.COMPENSATING)
        record = ledger.transition_instance(
            record,
            to,
            actor="scheduler",
            scheduler_deadline=scheduler_deadline if supervised else None,
        )
    return record


def make_step(
    ledger: StepLedger,
    instance_id: str,
    status: StepStatus,
    *,
    instance: InstanceStatus | Literal["auto"] | None = "auto",
    deadline: datetime | None = None,
    step_id: str = "create_storage",
    attempt: int = 1,
    resent: bool = False,
    owner: str = "agent:storage.create",
    heartbeat_timeout: float | None = None,
    compensation_status: str | None = None,
    compensation_attempt: int = 0,
    last_error: str | None = None,
    workflow: str = WORKFLOW,
) -> StepRecord:
    """Write one step of an instance and walk it, legally, to ``status``.

    The instance gets its record first (:func:`make_instance`), as in production, unless it has one:
    ``instance`` is its status, by default ("auto") Compensating for a Compensating step,
    CompensationFailed for a CompensationFailed one, else Running. ``None`` writes no record: an
    invariant violation the watchdog must notice and leave alone.

    ``resent``: the watchdog already re-sent the attempt's message (``resent_at`` 5 min before the
    deadline); without it the row is as a dispatch leaves it (its own send is not recorded)."""
    deadline = deadline or NOW - timedelta(minutes=5)
    if instance == "auto":
        instance = {S.COMPENSATING: IS.COMPENSATING, S.COMPENSATION_FAILED: IS.COMPENSATION_FAILED}.get(
            status, IS.RUNNING
        )
    if instance is not None and ledger.find_instance(instance_id) is None:
        make_instance(ledger, instance_id, instance, workflow=workflow)
    (record,) = ledger.create_steps(
        instance_id,
        workflow,
        [
            NewStep(
                step_id=step_id,
                step_name=step_id,
                agent="storage.create",
                compensator="storage.delete",
                max_attempts=3,
                heartbeat_timeout_seconds=heartbeat_timeout,
            )
        ],
        actor="test",
    )
    if status is S.PENDING:
        return record
    record = ledger.transition(
        record,
        S.DISPATCHED,
        actor="scheduler",
        deadline=deadline,
        attempt=attempt,
        owner=owner,
        orchestration_id=instance_id,
        input_ref=encode_json(INPUT),
        attempt_token=secrets.token_hex(16),  # as every dispatch writes it (activities.scheduler.dispatch)
    )
    if resent:
        record = ledger.update(record, actor="supervisor:t0", resent_at=deadline - timedelta(minutes=5))
    if status is S.DISPATCHED:
        return record
    record = ledger.transition(record, S.RUNNING, actor="worker", owner="worker-1")
    if status is S.RUNNING:
        return record
    if status is S.SUCCEEDED:
        return ledger.transition(
            record, S.SUCCEEDED, actor="worker", result_ref=encode_json({"account": "a"})
        )
    if status in (S.FAILED, S.TIMED_OUT, S.RETRYING):
        record = ledger.transition(
            record,
            S.FAILED if status is S.FAILED else S.TIMED_OUT,
            actor="worker",
            deadline=deadline,
            last_error=last_error or "boom",
            compensation_status=compensation_status,
        )
        if status is S.RETRYING:
            record = ledger.transition(
                record, S.RETRYING, actor="scheduler", deadline=deadline, owner="scheduler"
            )
        return record
    if status in (S.COMPENSATING, S.COMPENSATION_FAILED):
        record = ledger.transition(
            record, S.SUCCEEDED, actor="worker", result_ref=encode_json({"account": "a"})
        )
        record = ledger.transition(
            record,
            S.COMPENSATING,
            actor="scheduler",
            deadline=deadline,
            owner="agent:storage.delete",
            orchestration_id=f"{instance_id}:compensation",
            compensation_attempt=compensation_attempt or 1,
            compensation_status=compensation_status or "Dispatched",
        )
        if status is S.COMPENSATION_FAILED:
            record = ledger.transition(
                record, S.COMPENSATION_FAILED, actor="scheduler", last_error=last_error or "undo failed"
            )
        return record
    raise AssertionError(f"make_step does not build {status}")


def drain(transport, queue: str) -> list[Any]:
    """Every message now in ``queue`` (received and completed)."""
    messages = []
    while True:
        batch = transport.receive(queue, max_messages=32, lock_seconds=30)
        if not batch:
            return messages
        for m in batch:
            transport.complete(m)
        messages.extend(batch)


def connection_args(env: dict[str, str], ledger_table: str | None = None, index_table: str | None = None):
    """``sas``'s global options pointing at ``env``'s storage and tables (or the ones named)."""
    return [
        "--connection-string",
        env["AzureWebJobsStorage"],
        "--ledger-table",
        ledger_table or env["LEDGER_TABLE_NAME"],
        "--index-table",
        index_table or env["DEADLINE_INDEX_TABLE_NAME"],
    ]
