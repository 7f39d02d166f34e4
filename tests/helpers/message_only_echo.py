"""A message-only ``conformance.echo`` agent for a harness pool, written from docs/agents.md ("Check an
agent with the conformance kit", the canary faults included): it holds no ledger rights, reads its pool's
work queue and sends real heartbeat and result messages on the result queue, each with the work
message's ``reply_token``; the app's result handler records them. It runs as a pump of the harness's
host loop, so the harness's virtual clock carries the run. It stands in for an agent in another
language serving a message-only pool's recovery canary (``sas-canary-echo``): tests/canary and
bench/canary_requests.py use it. It makes no effect (the canary's runs need none).
"""

from __future__ import annotations

import itertools
from typing import Any

from devtools.harness import PatternHarness
from workflow_core import clock
from workflow_core.contracts import WorkMessage
from workflow_core.messages import is_expired
from workflow_core.transport import OutgoingMessage
from workflow_core.workflows.pools import pool_queue

IDS = ("kind", "instance_id", "orchestration_id", "step_id", "attempt", "reply_token")
FAULTS = ("silent", "fail", "fail-permanently", "heartbeat-then-silent")


class MessageOnlyEcho:
    """Serves ``pool`` in ``h`` while attached; ``seen`` keeps (step, kind, attempt, what it did)."""

    def __init__(self, h: PatternHarness, pool: str) -> None:
        self.h = h
        self.queue = pool_queue(h.settings.work_queue, pool)
        self.seen: list[tuple[str, str, int, str]] = []
        self._ids = itertools.count(1)
        h.host.add_pump(self.pump, f"echo-agent-{pool}")

    def _send(self, body: dict[str, Any]) -> None:
        message_id = f"echo-{body['instance_id']}-{body['step_id']}-{next(self._ids)}"
        self.h.transport.send(self.h.settings.result_queue, OutgoingMessage(body=body, message_id=message_id))

    def pump(self) -> int:
        received = self.h.transport.receive(self.queue, max_messages=8, lock_seconds=30)
        for message in received:
            self.seen.append(self.handle(message.body))
            self.h.transport.complete(message)
        return len(received)

    def handle(self, work: dict[str, Any]) -> tuple[str, str, int, str]:
        what = (work["step_id"], work["kind"], work["attempt"])
        if is_expired(WorkMessage.model_validate(work), clock.utcnow()):
            return (*what, "expired")  # no heartbeat, no effect, no reply
        ids = {k: work[k] for k in IDS}
        if work["kind"] == "compensate":
            self._send({**ids, "outcome": "succeeded", "output": {"undone": True}})
            return (*what, "undone")
        given = work.get("input") or {}
        fault = given.get("fault") or "none"
        if fault != "none" and work["attempt"] <= given.get("fault_attempts", 1):
            if fault == "fail":
                self._send({**ids, "outcome": "failed", "error": "echo fault fail"})
            elif fault == "fail-permanently":
                self._send({**ids, "outcome": "failed", "error": "echo fault", "permanent": True})
            elif fault == "heartbeat-then-silent":
                self._send({"type": "heartbeat", **ids})
            elif fault != "silent":
                self._send({**ids, "outcome": "failed", "error": f"unknown fault {fault}", "permanent": True})
            return (*what, fault)
        self._send({"type": "heartbeat", **ids})
        self._send({**ids, "outcome": "succeeded", "output": {"echo": given.get("value")}})
        return (*what, "echo")
