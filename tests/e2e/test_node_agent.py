"""The Node.js example agent (``examples/node-agent``, a real ``node`` process) serves the welcome
e-mail step of ``provision-tenant`` with messages only, next to the app's own workers on Azurite:
each delivery first asks whether its attempt is current (a heartbeat naming the agent's own answer
queue, answered by the app), the heartbeat claims the step and extends the deadline, a duplicate
delivery sends one e-mail and is recorded once, and every message it sends, and every answer the app
sends it, validates against the published schemas."""

from __future__ import annotations

from datetime import timedelta

from azure.storage.queue import QueueServiceClient

from devtools.harness import PatternHarness
from tests.e2e.node_agent import node_agent, node_env, record_answers
from tests.e2e.test_agent_reports import MAIL_POOL
from tests.helpers.fault_matrix import storage_queue_only
from tests.transport.test_message_schemas import validator

AGENT = "email.send_welcome"


@storage_queue_only
def test_the_node_agent_runs_the_welcome_step_once_under_a_duplicate_delivery(azurite, tmp_path):
    pools = {"extra_workflows": {"pools": MAIL_POOL}, "hosted_pools": ["default"]}
    with PatternHarness(azurite, clock="real", **pools) as h:  # no in-process worker reads pool mail
        queue = f"{h.settings.work_queue}-mail"
        h.duplicate_send("send_welcome", queue=queue)  # at-least-once delivery: two copies
        reports: list[dict] = []
        handle = h._result_handler

        def recording(message):
            if message.body.get("step_id") == "send_welcome":
                reports.append(message.body)
            return handle(message)

        h._result_handler = recording
        answers = record_answers(h)  # what the app sends to the agent's answer queue
        env = node_env(
            azurite.connection_string,
            h.settings,
            "mail",
            MAIL_OUTBOX=str(tmp_path / "outbox"),
            HEARTBEAT_SECONDS="600",
            WORK_MILLISECONDS="1000",
        )
        with node_agent(env, tmp_path / "agent.log"):
            tenant = {"tenant_id": "nodeco", "admin_email": "a@nodeco.example"}
            iid = h.start_workflow("provision-tenant", tenant)
            status = h.run_until_complete(iid, timeout=timedelta(minutes=2))
            # the copy's question answered too, and its reply (if its answer said current) handled
            h.run_until(
                lambda: len(answers) >= 2 and _replies(reports) == _current(answers),
                timeout=timedelta(seconds=30),
            )
        prefix = f"{h.settings.result_queue}-answers-"
        queues = QueueServiceClient.from_connection_string(azurite.connection_string)
        left = [q.name for q in queues.list_queues(name_starts_with=prefix)]
        assert left == [], left  # the agent deleted its answer queue when it stopped
        assert status.runtime_status.value == "Completed" and status.output["status"] == "succeeded"
        assert f"from {queue}" in (tmp_path / "agent.log").read_text()

        assert len(list((tmp_path / "outbox").iterdir())) == 1  # one e-mail for two deliveries
        row = h.ledger.get(iid, "send_welcome")
        assert (row.status.value, row.owner) == ("Succeeded", AGENT)
        events = [e for e in h.events_for(iid) if e.step_id == "send_welcome"]
        assert [e.actor for e in events if e.to_status == "Succeeded" and e.action == "transition"] == [AGENT]
        dispatched = next(e for e in events if e.to_status == "Dispatched")
        beats = [e for e in events if e.action == "heartbeat" and e.actor == AGENT]
        assert beats and beats[0].record.deadline >= dispatched.record.deadline + timedelta(seconds=500)

        # Each delivery asked first (a heartbeat naming its answer queue) and was answered. The first is
        # current; the copy, asked after the success was recorded, is not: no effect, no reply (asked
        # before that, it is current and replies a duplicate the ledger records once).
        beats = [b for b in reports if b.get("type") == "heartbeat"]
        assert len(beats) == 2 and all(b["answer_queue"].startswith(prefix) for b in beats), beats
        assert {b["correlation_id"] for b in beats} == {a["correlation_id"] for _, a in answers}
        assert answers[0][1]["current"] is True and answers[0][1]["status"] == "Running"
        assert _replies(reports) == _current(answers) >= 1, (reports, answers)
        assert [a["status"] for _, a in answers if not a["current"]] in ([], ["Succeeded"])
        for body in reports:
            schema = "heartbeat-message" if body.get("type") == "heartbeat" else "result-message"
            assert list(validator(schema).iter_errors(body)) == [], body
        for queue, body in answers:
            assert queue == beats[0]["answer_queue"]
            assert list(validator("attempt-status").iter_errors(body)) == [], body


def _replies(reports: list[dict]) -> int:
    return sum(1 for body in reports if body.get("outcome") == "succeeded")


def _current(answers: list[tuple[str, dict]]) -> int:
    return sum(1 for _, body in answers if body["current"])
