"""Hostile queue bodies (JSON bombs, huge numbers, invalid UTF-8, lone surrogates, duplicate keys)
reach every queue reader (worker, result handler, heartbeats, dead-letter handler, sas-agent) and
are parked with their reason, never raised on, and change nothing on the step they name.

Real Azurite, real queues: each body is sent as raw text on a real Storage queue and read back the
way each reader gets it (the Functions host's decoded text, or the transport's receive for sas-agent).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from azure.functions.queue import QueueMessage as HostQueueMessage
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from activities.replies.dead_letters import handle_dead_letter
from activities.replies.results import handle_result
from activities.worker.agent_worker import process_work_message, run_queue_message
from activities.worker.messages import from_queue_message
from workflow_core.ledger.parking import parked_messages


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


READERS = ["worker", "result", "heartbeat", "dead-letter", "sas-agent"]


def _hostile(valid: dict) -> st.SearchStrategy[bytes]:
    """Bodies that each break one rule of :mod:`workflow_core.transport.bounded_json`, built around a
    valid message of the reader (so a lenient parser would act on it)."""
    text = json.dumps(valid)
    deep = st.sampled_from([65, 999, 1500, 4000, 6000]).map(lambda n: ('{"a":' * n + "1" + "}" * n).encode())
    deep_list = st.sampled_from([65, 999, 1500, 4000, 6000]).map(lambda n: ("[" * n + "]" * n).encode())
    deep_inside = st.sampled_from([65, 1500, 3000]).map(
        lambda n: text.replace('"attempt": 1', '"attempt": 1, "x": ' + "[" * n + "]" * n).encode()
    )
    huge = st.integers(65, 5000).map(
        lambda n: text.replace('"attempt": 1', '"attempt": 1' + "0" * n).encode()
    )
    surrogate = st.sampled_from(["\\ud800", "\\udfff", "a\\udc00b"]).map(
        lambda s: text.replace(f'"{valid["step_id"]}"', f'"{s}"', 1).encode()
    )
    duplicate = st.sampled_from(sorted(valid)).map(
        lambda k: (text[:-1] + f", {json.dumps(k)}: {json.dumps(valid[k])}" + "}").encode()
    )
    not_utf8 = st.binary(min_size=1, max_size=40).map(lambda b: b"\xff\xfe" + b + text.encode())
    nan = st.sampled_from([b"NaN", b"Infinity", b"-Infinity"]).map(
        lambda c: text.replace('"attempt": 1', '"attempt": 1, "n": ' + c.decode()).encode()
    )
    return st.one_of(deep, deep_list, deep_inside, huge, surrogate, duplicate, not_utf8, nan)


def _valid(harness, reader: str) -> dict:
    instance = harness.start()
    harness.dispatch(instance, "create_storage")
    [work] = harness.work()
    body = dict(work.body)
    if reader in ("result", "heartbeat"):
        body = {
            "type": "heartbeat" if reader == "heartbeat" else "result",
            "kind": "work",
            "instance_id": body["instance_id"],
            "orchestration_id": body.get("orchestration_id", body["instance_id"]),
            "step_id": body["step_id"],
            "attempt": 1,
            "outcome": "succeeded",
            "output": {},
        }
    return body


def _read(harness, durable_client, reader: str, raw: bytes) -> object:
    """Send ``raw`` on a real queue and run ``reader`` on it as its host would."""
    queue = harness.services.settings.work_queue
    # the client base64-encodes the text; bytes that are not UTF-8 go as the host would decode them
    harness.transport._client(queue).send_message(raw.decode("utf-8", errors="replace"))
    [received] = harness.transport.receive(queue, lock_seconds=30)
    harness.transport.complete(received)
    if reader == "sas-agent":  # the transport's own reading (storage_queue._to_received)
        return process_work_message(
            received.body, delivery_count=1, services=harness.services, worker_id="agent-1", message_id="m"
        )
    msg = HostQueueMessage(id=str(received.raw.id), body=raw, dequeue_count=1)  # the host's bytes
    if reader == "worker":
        return run_queue_message(msg, services=harness.services, worker_id="w1")
    incoming = from_queue_message(msg, dead_letter=reader == "dead-letter")
    if reader == "dead-letter":
        return asyncio.run(
            handle_dead_letter(
                incoming.body,
                reason="MaxDeliveryCountExceeded",
                client=durable_client,
                services=harness.services,
            )
        )
    return asyncio.run(handle_result(incoming.body, durable_client, harness.services, message_id="r"))


@pytest.mark.parametrize("reader", READERS)
def test_hostile_bodies_are_parked_never_raised_and_change_nothing(harness, durable_client, reader):
    valid = _valid(harness, reader)
    instance, step = valid["instance_id"], valid["step_id"]
    before = harness.ledger.get(instance, step)
    text = json.dumps(valid)
    bomb = "[" * 15_000 + "]" * 15_000  # deeper than any recursion limit (Hypothesis raises it)
    duplicate = text[:-1] + f', "step_id": {json.dumps(step)}' + "}"  # a lenient parser acts on it

    @settings(
        max_examples=8,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @example(raw=bomb.encode())
    @example(raw=duplicate.encode())
    @example(raw=text.replace('"attempt": 1', '"attempt": 1, "x": ' + "[" * 3000 + "]" * 3000).encode())
    @given(raw=_hostile(valid))
    def check(raw: bytes) -> None:
        parked_before = {row.key for row in parked_messages(harness.ledger)}
        _read(harness, durable_client, reader, raw)  # must not raise
        [new] = [row for row in parked_messages(harness.ledger) if row.key not in parked_before]
        assert new.reason.startswith("not a valid "), new.reason
        if _utf8(raw):  # the parse failure itself is the reason given
            assert "malformed JSON: " in new.reason, new.reason
        after = harness.ledger.get(instance, step)
        assert (after.status, after.etag) == (before.status, before.etag)
        assert durable_client.calls == []

    check()
