"""A dispatching process of its own (``python -m tests.limits.dispatcher``) for the slot races of
``test_slot_races.py``: the real ``dispatch_step`` against the app settings in the environment.

    race DIR ID...        dispatch every Pending step of the instances (attempt = ledger + 1), act
                          as the agent (Running, Succeeded, then the slot's release) until all
                          succeeded; a pause between admission and the Dispatched write widens the race
    stop POINT DIR ID     dispatch attempt 1 of ID, print ``at POINT`` when there and wait for a line
                          on stdin (the test kills it, or lets it go on); print the outcome as JSON

POINT: ``admit`` (before the gate is asked), ``admitted`` (a slot taken, nothing written to the step),
``dispatched`` (the Dispatched write made, nothing sent), ``sent`` (the work message sent).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

from activities.scheduler.dispatch import dispatch_step
from tests.limits.support import AGENT, STEP
from workflow_core import clock
from workflow_core.ledger import StepStatus
from workflow_core.limits import Holder
from workflow_core.runtime import Services
from workflow_core.settings import load_settings
from workflow_core.workflows import loader

S = StepStatus


def payload(instance_id: str, attempt: int, deadline_seconds: float = 60) -> dict:
    deadline = clock.utcnow() + timedelta(seconds=deadline_seconds)
    return {
        "instance_id": instance_id,
        "orchestration_id": instance_id,
        "workflow": "provision-tenant",
        "step_id": STEP,
        "attempt": attempt,
        "deadline": deadline.isoformat(),
        "input": {"tenant_id": instance_id},
    }


def pause_at(point: str) -> None:
    print(f"at {point}", flush=True)
    sys.stdin.readline()


def stop(point: str, instance_id: str, services: Services) -> None:
    ledger, limits, transport = services.ledger, services.limits, services.transport
    admit, transition, send = limits.admit, ledger.transition, transport.send

    def admit_then_pause(*args, **kwargs):
        if point == "admit":
            pause_at(point)
        answer = admit(*args, **kwargs)
        if point == "admitted" and answer.admitted:
            pause_at(point)
        return answer

    def transition_then_pause(record, to, **kwargs):
        written = transition(record, to, **kwargs)
        if point == "dispatched" and written.status is S.DISPATCHED:
            pause_at(point)
        return written

    def send_then_pause(*args, **kwargs):
        sent = send(*args, **kwargs)
        if point == "sent":
            pause_at(point)
        return sent

    limits.admit, ledger.transition, transport.send = admit_then_pause, transition_then_pause, send_then_pause
    print(json.dumps(dispatch_step(payload(instance_id, 1, 30), services)), flush=True)


def race(instance_ids: list[str], services: Services) -> None:
    ledger, limits = services.ledger, services.limits
    admit = limits.admit

    def admit_slowly(*args, **kwargs):  # widens the window between admission and the Dispatched write
        answer = admit(*args, **kwargs)
        if answer.admitted:
            time.sleep(0.05)
        return answer

    limits.admit = admit_slowly
    left = list(instance_ids)
    while left:
        random.shuffle(left)
        for instance_id in list(left):
            r = ledger.get(instance_id, STEP)
            if r.status is S.SUCCEEDED:
                left.remove(instance_id)
                continue
            answer = dispatch_step(payload(instance_id, r.attempt + 1), services)
            if answer["outcome"] != "dispatched":
                time.sleep(0.01)
                continue
            r = ledger.transition(ledger.get(instance_id, STEP), S.RUNNING, actor="agent", owner="agent")
            time.sleep(random.uniform(0.02, 0.08))
            ledger.transition(r, S.SUCCEEDED, actor="agent", result_ref="{}")
            limits.release(AGENT, Holder(instance_id, STEP, r.attempt))


def main(argv: list[str]) -> None:
    mode, rest = argv[0], argv[1:]
    point = rest.pop(0) if mode == "stop" else None
    loader.DEFAULT_DIRECTORY = Path(rest[0])
    services = Services(load_settings(dict(os.environ)))
    if mode == "race":
        race(rest[1:], services)
    else:
        stop(point, rest[1], services)
    services.close()


if __name__ == "__main__":
    main(sys.argv[1:])
