"""A message-only ``conformance.echo`` on Storage Queues, written from docs/agents.md, with one fault
per flag (``--fault NAME``; ``none``: a correct agent), for ``test_broken_agents``: each fault must
fail the conformance kit with a line naming it.

    python -m tests.agent_runner.broken_agent --fault wrong-token
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from azure.storage.queue import QueueClient

from agent_runner.conformance_echo import apply_once

ENVELOPE = "workflow-message/1"
FAULTS = (
    "none",
    "wrong-token",
    "stale-token",
    "contradict",
    "no-reply",
    "endless-heartbeat",
    "crash",
    "no-idempotency",
    "no-effect",
    "ignore-expiry",
)


def encode(body: dict, message_id: str) -> str:
    doc = {
        "envelope": ENVELOPE,
        "message_id": message_id,
        "correlation_id": None,
        "subject": body.get("type") or f"{body['kind']}-result",
        "application_properties": {},
        "body": body,
    }
    return base64.b64encode(json.dumps(doc).encode()).decode()


def effect(key: str, once: bool) -> None:
    """The kit's stand-in remote service: once per key (its marker files), or, for the
    ``no-idempotency`` fault, every time."""
    if once:
        apply_once(key)
        return
    with Path(os.environ["CONFORMANCE_EFFECTS"]).open("a", encoding="utf-8") as log:
        log.write(key + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=FAULTS, default="none")
    fault = parser.parse_args().fault
    connection = os.environ["AzureWebJobsStorage"]  # noqa: SIM112 - the app's setting
    work = QueueClient.from_connection_string(connection, os.environ.get("WORK_QUEUE_NAME", "agent-work"))
    results = QueueClient.from_connection_string(
        connection, os.environ.get("RESULT_QUEUE_NAME", "agent-results")
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        for item in work.receive_messages(max_messages=1, visibility_timeout=30):
            w = None
            try:
                doc = json.loads(base64.b64decode(item.content))
                w = doc["body"] if doc.get("envelope") == ENVELOPE else doc
                assert isinstance(w.get("reply_token"), str) and isinstance(w.get("attempt"), int)
            except Exception:  # malformed: parked on the poison queue with the reason
                poison = QueueClient.from_connection_string(connection, f"{work.queue_name}-poison")
                with contextlib.suppress(Exception):  # it exists
                    poison.create_queue()
                parked = {
                    "envelope": ENVELOPE,
                    "message_id": item.id,
                    "body": w if isinstance(w, dict) else {"text": item.content},
                    "application_properties": {},
                    "dead_letter_reason": "MalformedMessage",
                    "dead_letter_description": "not a work message with a reply_token",
                }
                poison.send_message(base64.b64encode(json.dumps(parked).encode()).decode())
                work.delete_message(item)
                continue
            if fault != "ignore-expiry" and datetime.fromisoformat(w["expires_at"]) <= datetime.now(UTC):
                work.delete_message(item)
                continue
            if fault == "crash":
                os._exit(3)
            token = w["reply_token"]
            if fault == "wrong-token":
                token = secrets.token_hex(32)
            if fault == "stale-token":  # the first token seen for the step, kept across restarts
                kept = Path(os.environ["CONFORMANCE_EFFECTS"]).with_name(f"token-{w['instance_id']}")
                if not kept.exists():
                    kept.write_text(token)
                token = kept.read_text()
            ids = {k: w[k] for k in ("kind", "instance_id", "orchestration_id", "step_id", "attempt")}
            ids["reply_token"] = token

            def send(body: dict, what: str, w: dict = w) -> None:
                mid = f"{what}:{w['instance_id']}:{w['step_id']}:{w['attempt']}:{time.time_ns()}"
                results.send_message(encode(body, mid))

            send({"type": "heartbeat", **ids, "seconds": w["input"].get("heartbeat_seconds") or 60}, "hb")
            if fault == "no-reply":
                work.delete_message(item)
                continue
            if fault == "endless-heartbeat":
                while True:
                    time.sleep(2)
                    send({"type": "heartbeat", **ids, "seconds": 30}, "hb")
            time.sleep(float(w["input"].get("slow_seconds") or 0))
            if fault != "no-effect":
                effect(w["idempotency_key"], once=fault != "no-idempotency")
            crash_once = w["input"].get("crash_once")
            if crash_once and not Path(crash_once).exists():
                Path(crash_once).touch()
                os._exit(3)
            send({**ids, "outcome": "succeeded", "output": {"echo": w["input"].get("value")}}, "result")
            if fault == "contradict":
                send({**ids, "outcome": "failed", "error": "changed my mind"}, "result2")
            work.delete_message(item)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
