"""The Node.js example agent (``examples/node-agent``) as a real ``node`` process next to a pattern
harness on Azurite: started with the app's settings for one pool, stopped with SIGTERM (as its
deployment would), and the app's answers to its questions recorded (``attempt-status`` messages)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-agent"


def require_node_modules() -> None:
    if not (EXAMPLE / "node_modules" / "@azure" / "storage-queue").is_dir():
        pytest.fail("examples/node-agent has no node_modules: run `npm ci` there (./scripts/bootstrap does)")


def node_env(connection_string: str, settings: Any, pool: str, **extra: str) -> dict[str, str]:
    """The app's settings for an agent of ``pool`` on Storage Queues, plus ``extra``."""
    env = {
        **os.environ,
        "AGENT_TRANSPORT": "storage-queue",
        "AzureWebJobsStorage": connection_string,
        "WORK_QUEUE_NAME": settings.work_queue,
        "RESULT_QUEUE_NAME": settings.result_queue,
        "AGENT_POOL": pool,
        **extra,
    }
    env.pop("CONFORMANCE_EFFECTS", None)  # the kit's effects file: only the kit sets it
    return env


@contextlib.contextmanager
def node_agent(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """``node agent.js`` with ``env``, its output in ``log``; SIGTERM and wait on the way out."""
    require_node_modules()
    with log.open("w") as out:
        agent = subprocess.Popen(["node", "agent.js"], cwd=EXAMPLE, env=env, stdout=out, stderr=out)
        try:
            yield agent
        finally:
            agent.terminate()
            agent.wait(timeout=10)


def record_answers(harness: Any) -> list[tuple[str, dict]]:
    """Every ``(queue, body)`` the app sends to an answer queue from now on (its transport's sends)."""
    answers: list[tuple[str, dict]] = []
    send = harness.transport.send

    def answering(queue: str, message: Any) -> Any:
        if "-answers-" in queue:
            answers.append((queue, message.body))
        return send(queue, message)

    harness.transport.send = answering
    return answers
