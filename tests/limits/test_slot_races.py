"""Slots hold under races: two dispatching OS processes (``tests/limits/dispatcher.py``, the real
``dispatch_step``) against one ``max_in_flight: 1`` agent on Azurite never have two attempts in
flight; a dispatcher killed (SIGKILL) at any point of admission or dispatch leaks no slot (the
watchdog's sweep frees it once the attempt's deadline passed, not before); and an admission the
sweep released cannot dispatch late."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from activities.scheduler.dispatch import dispatch_step
from devtools.azurite import private_env
from tests.activities.test_pool_routing import declare_pools
from tests.limits.dispatcher import payload
from tests.limits.support import AGENT, STEP, pending
from workflow_core.ledger import StepStatus
from workflow_core.limits.rows import read_rows
from workflow_core.runtime import Services
from workflow_core.settings import load_settings
from workflow_core.workflows.pools import clear_pools_cache

ROOT = Path(__file__).resolve().parents[2]
POOLS = f"agents:\n  {AGENT}:\n    max_in_flight: 1\n    wait_poll_seconds: 1\n"
SECOND = timedelta(seconds=1)


@pytest.fixture
def app(azurite, tmp_path, monkeypatch):
    env = private_env(azurite, "race")
    directory = declare_pools(monkeypatch, tmp_path / "workflows", POOLS)
    clear_pools_cache()
    services = Services(load_settings(env))
    yield env, directory, services
    services.close()
    clear_pools_cache()


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.limits.dispatcher", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def held(services: Services) -> list:
    return [s for s in read_rows(services.limits.table, AGENT).slots.values() if s.holder is not None]


def test_two_dispatching_processes_never_have_two_attempts_in_flight(app):
    env, directory, services = app
    ids = [f"race-{n}" for n in range(8)]
    pending(services, *ids)
    processes = [spawn(env, "race", str(directory), *ids) for _ in range(2)]
    assert [p.wait(timeout=600) for p in processes] == [0, 0]
    spans, waits = [], 0
    for instance_id in ids:
        trail = services.ledger.audit_trail(instance_id)
        (began,) = [a.at for a in trail if a.to_status == "Dispatched" and a.action == "transition"]
        (ended,) = [a.at for a in trail if a.to_status == "Succeeded"]
        spans.append((began, ended))
        waits += sum(1 for a in trail if a.action == "waiting")
    spans.sort()
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert overlaps == []  # one attempt in flight at a time, all eight ran once
    assert waits > 0  # and the two processes did contend for the one slot
    assert held(services) == []


@pytest.mark.parametrize("point", ["admit", "admitted", "dispatched", "sent"])
def test_a_dispatcher_killed_anywhere_leaks_no_slot(app, point):
    env, directory, services = app
    pending(services, "killed", "next")
    process = spawn(env, "stop", point, str(directory), "killed")
    assert process.stdout.readline().strip() == f"at {point}"
    process.kill()
    process.wait(timeout=30)
    if point == "admit":  # nothing taken yet
        assert held(services) == []
        assert dispatch_step(payload("next", 1), services)["outcome"] == "dispatched"
        return
    (slot,) = held(services)
    assert slot.holder.instance_id == "killed"
    assert dispatch_step(payload("next", 1), services)["outcome"] == "waiting"  # held, whatever the status
    assert services.limits.tend([AGENT], slot.deadline - SECOND)[0] == 0
    assert services.limits.tend([AGENT], slot.deadline + SECOND)[0] == 1
    assert held(services) == []
    assert dispatch_step(payload("next", 1), services)["outcome"] == "dispatched"
    killed = services.ledger.get("killed", STEP)
    if point == "admitted":  # never dispatched: the step is as it was, fenced by the sweep's write
        assert (killed.status, killed.attempt) == (StepStatus.PENDING, 0)
        (fence,) = [a for a in services.ledger.audit_trail("killed") if a.actor == "watchdog"]
        assert "was never dispatched by its deadline: its slot is released" in fence.reason
    else:
        assert (killed.status, killed.attempt) == (StepStatus.DISPATCHED, 1)


def test_an_admission_the_sweep_released_cannot_dispatch_late(app):
    env, directory, services = app
    pending(services, "late", "next")
    process = spawn(env, "stop", "admitted", str(directory), "late")
    assert process.stdout.readline().strip() == "at admitted"  # a slot taken, the step unwritten
    (slot,) = held(services)
    assert services.limits.tend([AGENT], slot.deadline + SECOND)[0] == 1  # fenced, then freed
    assert dispatch_step(payload("next", 1), services)["outcome"] == "dispatched"
    process.stdin.write("go\n")
    process.stdin.flush()
    answer = json.loads(process.stdout.readline())
    assert process.wait(timeout=30) == 0
    # its Dispatched write failed its ETag; asked again, the gate found the slot taken
    assert answer["outcome"] == "waiting" and "1 of 1 slots" in answer["error"]
    assert services.ledger.get("late", STEP).status is StepStatus.PENDING
    assert [s.holder.instance_id for s in held(services)] == ["next"]
