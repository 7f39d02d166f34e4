"""Heartbeats against a wrong worker clock: real Azurite, the worker in a separate OS process whose
clock is two minutes off (``WORKFLOW_CLOCK_OFFSET_SECONDS``). The deadline comes from the storage
service's clock, so the skew changes nothing the watchdog sees (``ledger.overdue`` is its worklist)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from activities.scheduler import functions as scheduling
from tests.activities.skewed_worker import AGENT, DIED
from workflow_core import clock
from workflow_core.ledger import NewStep, StepStatus
from workflow_core.settings import DOCUMENTED_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT_TIMEOUT = 5.0  # five beats' worth: a loaded machine may hold a beat back a few seconds
TICK = 0.5  # the watchdog period of this test


def _start(harness, name: str):
    instance = f"inst-skew-{name}"
    harness.ledger.create_steps(
        instance,
        "custom",
        [NewStep(step_id="work", step_name="work", agent=AGENT, heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT)],
        actor="test",
    )
    scheduling.dispatch_step(
        # the worker process is polling already: the first deadline is its time to take the message
        harness.dispatch_payload(instance, "work", deadline_in=6, workflow="custom"),
        harness.services,
    )
    return instance


def _worker(offset_seconds: float, mode: str, beats: int, interval: float) -> subprocess.Popen:
    """The skewed worker process, returned once it has imported everything and polls the queue (its
    start-up takes seconds on a loaded machine, which must not count against the step's deadline)."""
    env = {**os.environ, clock.OFFSET_ENV: str(offset_seconds), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.activities.skewed_worker", mode, str(beats), str(interval)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def _overdue(harness, instance: str) -> bool:
    now = datetime.now(UTC)  # the watchdog's (correct) clock
    return instance in [r.instance_id for r in harness.ledger.overdue(now)]


def test_a_worker_two_minutes_behind_keeps_its_step_alive_by_heartbeating(harness):
    worker = _worker(-120, "finish", beats=10, interval=1.0)  # runs ~10 s, past its first deadline
    instance = _start(harness, "behind")
    overdue_seen = []
    while worker.poll() is None:
        if _overdue(harness, instance):
            overdue_seen.append(harness.ledger.get(instance, "work"))
        time.sleep(TICK / 2)
    assert worker.returncode == 0
    assert overdue_seen == [], "the watchdog would have timed out a live, heartbeating worker"
    row = harness.ledger.get(instance, "work")
    assert row.status is StepStatus.SUCCEEDED
    beats = [a for a in harness.audit(instance, "work") if a.action == "heartbeat"]
    assert len(beats) >= 6  # every beat moved the deadline (a slow clock would have kept it in the past)


def test_a_dead_worker_two_minutes_ahead_is_found_within_timeout_plus_tick_plus_skew_bound(harness):
    worker = _worker(+120, "die", beats=10, interval=0.8)  # beats past the first deadline, then dies
    instance = _start(harness, "ahead")
    assert worker.wait(timeout=60) == DIED
    row = harness.ledger.get(instance, "work")
    assert row.status is StepStatus.RUNNING and row.last_heartbeat is not None
    # the deadline was computed from the storage service's clock, not the worker's (2 minutes fast)
    assert row.deadline - row.last_heartbeat == timedelta(seconds=HEARTBEAT_TIMEOUT)
    assert abs((row.last_heartbeat - datetime.now(UTC)).total_seconds()) < 10

    bound = HEARTBEAT_TIMEOUT + TICK + clock.SKEW_BOUND_SECONDS
    limit = time.monotonic() + bound + 5
    while not _overdue(harness, instance) and time.monotonic() < limit:
        time.sleep(TICK)
    found_at = datetime.now(UTC)
    assert _overdue(harness, instance), "the dead worker's step never became overdue"
    assert (found_at - row.last_heartbeat).total_seconds() <= bound


def test_the_default_grace_covers_the_skew_bound():
    default_grace = float(DOCUMENTED_SETTINGS["WATCHDOG_GRACE_SECONDS"])
    assert default_grace >= clock.SKEW_BOUND_SECONDS
