"""Queue probes of ``GET /api/diagnostics``: each queue's send right proven by a probe no consumer
sees, with its depth and oldest message where the identity's rights allow (``Transport.probe``; how
each transport does it is in its own ``probe``).

An answer queue gets a round trip instead (:func:`answer_round_trip`): a probe answer sent as the app
sends its answers, received back by its message id and completed: the only proof that an answer lands
where the pool's agent reads. The probe expires after a minute and an agent drops it (no
``attempt-status``), so a queue whose agent took it first is reported reachable. An agent's answer met
on the way stays locked until doctor is done and is then abandoned once, never dead-lettered.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from datetime import timedelta
from typing import Any

from api.diagnostics_sections import Row, failure, row
from workflow_core import clock
from workflow_core.transport.envelope import DOCTOR_PROBE as PROBE_BODY

ANSWER_QUEUES_SETTING = "ANSWER_QUEUES"
ANSWER_WAIT_SECONDS = 10.0
ANSWER_PROBE_TTL = timedelta(minutes=1)


def queues(services: Any) -> list[Row]:
    """Every pool queue and the result queue: a probe, depth and oldest message age where measurable."""
    from workflow_core.workflows.loader import agent_pools
    from workflow_core.workflows.pools import pool_queue

    s = services.settings
    names = [pool_queue(s.work_queue, pool) for pool in agent_pools().names] + [s.result_queue]
    try:
        transport = services.transport
    except Exception as exc:
        fix = "grant the app's identity send and receive rights on its queues (role-assignments.bicep)"
        return [row(f"queue {name}", False, failure(exc), fix) for name in names]
    return [diagnose(transport, name) for name in names]


def diagnose(transport: Any, queue: str) -> Row:
    check = f"queue {queue}"
    try:
        return row(check, True, transport.probe(queue))
    except NotImplementedError as exc:
        return row(check, None, f"{exc} (depth not measurable here)")
    except Exception as exc:
        fix = f"grant the app's identity the send right on {queue} (infra/modules/role-assignments.bicep)"
        return row(check, False, failure(exc), fix)


def answer_round_trip(transport: Any, queue: str) -> Row:
    """Send a probe answer to ``queue`` and read it back (the module's docstring says how)."""
    from workflow_core.transport.base import OutgoingMessage
    from workflow_core.transport.servicebus import ServiceBusTransport

    bus = isinstance(transport, ServiceBusTransport)
    role = "Azure Service Bus Data Sender" if bus else "Storage Queue Data Contributor"
    check, probe, step = f"answer queue {queue}", f"{PROBE_BODY}:{uuid.uuid4().hex}", "send a probe answer to"
    expires = clock.utcnow() + ANSWER_PROBE_TTL
    try:
        transport.send(
            queue, OutgoingMessage({"text": PROBE_BODY}, probe, subject=PROBE_BODY, expires_at=expires)
        )
        step, role = "receive from", role.replace("Sender", "Receiver")
        with transport.receiver_apart(queue) as receiver:
            found, others = _read_back(receiver, queue, probe)
    except Exception as exc:
        fix = f"infra creates {queue} (the pool's answerQueues) and grants the app's identity {role} on it"
        detail = f"cannot {step} it: {failure(exc)}"
        return row(check, False, detail, f"{fix} (infra/modules/role-assignments.bicep): deploy")
    met = f"; {others} agent answer(s) met and left in place" if others else ""
    if found:
        return row(check, True, f"probe answer sent and read back{met}")
    detail = (
        f"reachable, probe consumed by the pool's agent: the app sent its probe answer and may receive "
        f"there, but the probe was gone within {ANSWER_WAIT_SECONDS:.0f} s (an agent read it first and "
        f"dropped it, as agents drop doctor probes){met}"
    )
    return row(check, True, detail)


def answer_queues(services: Any) -> list[Row]:
    """Each answer queue of ``ANSWER_QUEUES`` (infra names them): a probe answer sent and read back."""
    names = [q.strip() for q in (os.environ.get(ANSWER_QUEUES_SETTING) or "").split(",") if q.strip()]
    if not names:
        return [
            row("answer queues", None, f"{ANSWER_QUEUES_SETTING} names none (no pool asks on Service Bus)")
        ]
    return [answer_round_trip(services.transport, name) for name in names]


def _read_back(receiver: Any, queue: str, probe: str) -> tuple[bool, int]:
    """Receive until the probe (by message id) or the wait ends; complete the probe only. Every other
    message stays locked until then (so none is received twice) and is abandoned once at the end."""
    held: list[Any] = []
    deadline = time.monotonic() + ANSWER_WAIT_SECONDS
    found = False
    try:
        while not found and (left := deadline - time.monotonic()) > 0:
            for message in receiver.receive(queue, max_messages=32, lock_seconds=60, wait_seconds=left):
                if message.message_id == probe:
                    receiver.complete(message)
                    found = True
                else:
                    held.append(message)
    finally:
        for message in held:
            with contextlib.suppress(Exception):  # its lock lapses anyway
                receiver.abandon(message)
    return found, len(held)
