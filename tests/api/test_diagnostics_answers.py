"""Doctor's round trip on each answer queue (api/diagnostics_queues.answer_round_trip): a probe answer
sent as the app sends its answers and read back by its message id, on Storage Queues (Azurite) and on
Service Bus (the AMQP test double). A queue that is missing, or that the app may send to but not
receive from, is a failed row naming the queue and the role; a probe the pool's agent took first is a
reachable queue, not a failure; an agent's answer doctor meets is left in place."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from azure.storage.queue import AccountSasPermissions, QueueServiceClient, ResourceTypes, generate_account_sas

from api import diagnostics, diagnostics_queues
from tests.api.test_diagnostics import _clean_env, _failed, _rows  # noqa: F401 - the autouse fixture
from tests.servicebus_double.double import AmqpTestDouble
from workflow_core.transport.base import OutgoingMessage
from workflow_core.transport.envelope import is_doctor_probe
from workflow_core.transport.storage_queue import StorageQueueTransport

AGENT_ANSWER = OutgoingMessage({"type": "attempt-status", "correlation_id": "c-1"}, "answer-1")


@pytest.fixture
def answer_queue(services, monkeypatch):
    """An answer queue infra created, named in ANSWER_QUEUES."""
    name = f"{services.settings.result_queue}-answers-doctor1"
    transport = services.transport  # a test may put another in its place
    transport._client(name).create_queue()
    monkeypatch.setenv("ANSWER_QUEUES", name)
    monkeypatch.setattr(diagnostics_queues, "ANSWER_WAIT_SECONDS", 3.0)
    services.liveness.record_tick()
    yield name
    transport._client(name).delete_queue()


def test_the_probe_answer_is_read_back_and_an_agents_answer_left_in_place(services, answer_queue):
    services.transport.send(answer_queue, AGENT_ANSWER)
    body = diagnostics.collect(services)
    row = _rows(body)[f"answer queue {answer_queue}"]
    assert _failed(body) == {} and row["ok"] is True, row
    assert row["detail"] == "probe answer sent and read back; 1 agent answer(s) met and left in place"
    left = services.transport.receive(answer_queue, max_messages=32, wait_seconds=1)
    assert [m.message_id for m in left] == ["answer-1"]  # the probe is gone, the answer is not


def test_a_missing_answer_queue_or_receive_right_fails_naming_the_queue_and_role(
    services, answer_queue, azurite, monkeypatch
):
    """Azurite has no RBAC: an account SAS allowing only "add" is an identity that may send there but
    not receive (Storage Queue Data Contributor missing its read/process part)."""
    gone = f"{services.settings.result_queue}-answers-gone"
    monkeypatch.setenv("ANSWER_QUEUES", f"{answer_queue},{gone}")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {f"answer queue {gone}"}
    assert failed[f"answer queue {gone}"]["detail"].startswith("cannot send a probe answer to it")
    assert gone in failed[f"answer queue {gone}"]["fix"]

    account = QueueServiceClient.from_connection_string(azurite.connection_string)
    sas = generate_account_sas(
        account.account_name,
        account.credential.account_key,
        ResourceTypes(object=True),
        AccountSasPermissions(add=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    send_only = StorageQueueTransport(QueueServiceClient(account.url, credential=sas))
    try:
        (row, _) = diagnostics_queues.answer_queues(SimpleNamespace(transport=send_only))
    finally:
        send_only.close()
    assert row["check"] == f"answer queue {answer_queue}" and row["ok"] is False
    assert row["detail"].startswith("cannot receive from it: ")
    assert "Storage Queue Data Contributor" in row["fix"]


class _AgentFirst(StorageQueueTransport):
    """The pool's agent reading its answer queue the moment doctor's probe lands there."""

    def send(self, queue: str, message: OutgoingMessage) -> None:
        super().send(queue, message)
        for received in self.receive(queue, max_messages=32):
            if is_doctor_probe(received.body):  # not an answer anyone waits for: dropped
                self.complete(received)


def test_a_probe_the_agent_took_first_is_a_reachable_queue_not_a_failure(
    services, answer_queue, azurite, monkeypatch
):
    agent_first = _AgentFirst.from_connection_string(azurite.connection_string)
    monkeypatch.setitem(services.__dict__, "transport", agent_first)
    try:
        body = diagnostics.collect(services)
    finally:
        agent_first.close()
    row = _rows(body)[f"answer queue {answer_queue}"]
    assert _failed(body) == {} and row["ok"] is True
    assert row["detail"].startswith("reachable, probe consumed by the pool's agent")


@pytest.fixture(scope="module")
def double():
    with AmqpTestDouble() as running:
        yield running


def test_on_service_bus_a_missing_listen_or_queue_fails_naming_it(double, monkeypatch):
    from azure.servicebus import ServiceBusClient

    from workflow_core.transport.servicebus import ServiceBusTransport

    monkeypatch.setattr(diagnostics_queues, "ANSWER_WAIT_SECONDS", 3.0)
    ok, no_listen, missing = (f"agent-results-answers-{s}" for s in ("sb1", "sb2", "sb3"))
    double.refuse("refuse-receive", no_listen)
    double.refuse("missing", missing)
    monkeypatch.setenv("ANSWER_QUEUES", ",".join((ok, no_listen, missing)))
    transport = ServiceBusTransport(
        ServiceBusClient.from_connection_string(double.connection_string, retry_total=0)
    )
    try:
        transport.send(ok, AGENT_ANSWER)
        rows = {r["check"]: r for r in diagnostics_queues.answer_queues(SimpleNamespace(transport=transport))}
    finally:
        transport.close()
    assert rows[f"answer queue {ok}"]["ok"] is True
    assert rows[f"answer queue {ok}"]["detail"].startswith("probe answer sent and read back; 1 agent answer")
    assert double.queue_state(ok) == (1, 0)  # the agent's answer, abandoned back; the probe completed
    refused = rows[f"answer queue {no_listen}"]
    assert refused["ok"] is False and refused["detail"].startswith("cannot receive from it: ")
    assert "Azure Service Bus Data Receiver" in refused["fix"]
    absent = rows[f"answer queue {missing}"]
    assert absent["ok"] is False and absent["detail"].startswith("cannot send a probe answer to it")
    assert "Azure Service Bus Data Sender" in absent["fix"]
