"""``sas-agent`` processes serving the work queue of a running pattern: killed, stopped, concurrent."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import azure.durable_functions as df

from tests.helpers.runner import ROOT, SAS_AGENT


def files(box: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in box.glob(f"{prefix}-*"))


def wait_for(harness, predicate: Callable[[], bool], seconds: float = 60) -> None:
    """Run the harness (its result pump, its watchdog) until ``predicate`` holds."""
    harness.run_until(predicate, timeout=timedelta(seconds=seconds))


def finish(harness, instance_id: str) -> None:
    status = harness.run_until_complete(instance_id, timeout=timedelta(seconds=60))
    assert status.runtime_status == df.OrchestrationRuntimeStatus.Completed, status.output


def test_a_lock_is_renewed_and_after_sigkill_a_restart_finishes_the_step_with_the_effect_once(
    harness, start_runner, box
):
    first = start_runner()
    iid = harness.start_workflow("runner-block", {"n": 1})
    wait_for(harness, lambda: len(files(box, "started")) == 1)
    renewed = time.monotonic() + 3  # past the 2 s lock: it is renewed, so nobody receives it again
    wait_for(harness, lambda: time.monotonic() > renewed)
    assert len(files(box, "started")) == 1
    first.signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL

    start_runner()
    (box / "release").touch()
    finish(harness, iid)
    assert len(files(box, "started")) == 2  # the restarted runner took the step over
    assert len(files(box, "effect")) == 1  # ...and its effect happened once
    assert harness.steps(iid)["wait"].attempt == 1  # redelivered, not retried by the scheduler


def test_sigterm_lets_the_step_in_flight_finish_and_exits_0(harness, start_runner, box):
    runner = start_runner("--shutdown-grace", "30", "--concurrency", "1")  # its one slot is taken
    iid = harness.start_workflow("runner-block", {"n": 1})
    wait_for(harness, lambda: len(files(box, "started")) == 1)
    runner.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert runner.process.poll() is None  # still finishing its step
    (box / "release").touch()
    assert runner.wait(30) == 0
    assert "0 released unfinished" in runner.output(), runner.output()
    finish(harness, iid)  # the reply it sent before exiting finishes the workflow: no runner left
    assert len(files(box, "started")) == 1 and len(files(box, "effect")) == 1


def test_sigterm_past_the_grace_releases_the_step_for_the_next_runner_and_exits_0(harness, start_runner, box):
    runner = start_runner("--shutdown-grace", "1", "--lock-seconds", "60")
    iid = harness.start_workflow("runner-block", {"n": 1})
    wait_for(harness, lambda: len(files(box, "started")) == 1)
    began = time.monotonic()
    runner.signal(signal.SIGTERM)
    assert runner.wait(30) == 0
    assert time.monotonic() - began < 10
    assert "1 released unfinished" in runner.output(), runner.output()

    start_runner()  # released (visible again at once), not waiting for a lock to run out
    wait_for(harness, lambda: len(files(box, "started")) == 2, seconds=10)
    (box / "release").touch()
    finish(harness, iid)
    assert len(files(box, "effect")) == 1


def test_concurrency_n_runs_n_handlers_at_once_and_takes_no_more(harness, start_runner, box):
    start_runner("--concurrency", "2")
    ids = [harness.start_workflow("runner-block", {"n": n}) for n in range(3)]
    wait_for(harness, lambda: len(files(box, "started")) == 2)
    deadline = time.monotonic() + 2
    wait_for(harness, lambda: time.monotonic() > deadline)
    assert len(files(box, "started")) == 2  # the third message stays in the queue meanwhile
    (box / "release").touch()
    for iid in ids:
        finish(harness, iid)
    assert len(files(box, "started")) == 3 and len(files(box, "effect")) == 3


def run_refused(env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    argv = [SAS_AGENT, "--pool", "default", *options]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def one_error_line(stderr: str) -> bool:
    lines = stderr.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith("sas-agent: error: ")


def test_a_missing_setting_or_a_bad_handlers_module_is_one_line_and_exit_2():
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AzureWebJobsStorage", "AGENT_"))}
    missing = run_refused(base, "--handlers", "tests.agent_runner.blocking_agents")
    assert missing.returncode == 2 and one_error_line(missing.stderr)
    assert "AzureWebJobsStorage" in missing.stderr

    env = {**base, "AzureWebJobsStorage": "UseDevelopmentStorage=true", "AGENT_TRANSPORT": "storage-queue"}
    for module, says in (("no_such_agents", "No module named"), ("json", "registered no agent")):
        bad = run_refused(env, "--handlers", module)
        assert bad.returncode == 2 and one_error_line(bad.stderr), bad.stderr
        assert says in bad.stderr
