"""``sas-agent`` as a real subprocess next to the pattern harness (its scheduler, result and dead-letter
handlers and watchdog, on a real clock) on the session's Azurite: the harness's own worker pump is
taken off, so the runner is the only worker of the work queue. (The agents the runner serves are
registered in this process too: the app refuses to start with an agent no handler is registered for,
and which pools it hosts is not its to know yet.)"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from tests.agent_runner import blocking_agents  # noqa: F401 - the app checks every agent has a handler
from tests.helpers.runner import ROOT, SAS_AGENT, Runner

BLOCKING_WORKFLOW = {
    "name": "runner-block",
    "description": "One step whose agent blocks until the test releases it.",
    "input": {"properties": {"n": {"type": "integer"}}},
    "steps": [{"id": "wait", "agent": "runner.block", "input": {}, "deadline_seconds": 120}],
}


@pytest.fixture
def box(tmp_path) -> Path:
    """``$RUNNER_TEST_DIR`` of ``tests/agent_runner/blocking_agents.py``."""
    path = tmp_path / "box"
    path.mkdir()
    return path


@pytest.fixture
def harness_options():
    return {
        "clock": "real",
        "watchdog_every": timedelta(seconds=2),
        "extra_workflows": {"runner-block": BLOCKING_WORKFLOW},
        "serve_work": False,
    }


@pytest.fixture
def start_runner(harness, box, tmp_path) -> Callable[..., Runner]:
    """``start_runner(*options, cwd=ROOT, handlers=...)``: a runner of the default pool with the
    harness's settings (its environment)."""
    runners: list[Runner] = []

    def start(*options: str, cwd: Path = ROOT, argv: list[str] | None = None) -> Runner:
        argv = argv or [
            SAS_AGENT,
            "--pool",
            "default",
            "--handlers",
            "tests.agent_runner.blocking_agents",
            "--lock-seconds",
            "2",
            *options,
        ]
        env = {**os.environ, "RUNNER_TEST_DIR": str(box)}
        runner = Runner(argv, env, cwd, tmp_path / f"runner-{len(runners)}.log")
        runners.append(runner)
        return runner

    yield start
    for runner in runners:
        runner.close()
