"""The agent the runner's process tests serve: it shows it started, blocks until told, applies once.

``runner.block`` leaves ``started-<instance>-<step>-<run>`` in ``$RUNNER_TEST_DIR`` when a delivery
runs it, waits there until the file ``release`` exists (so a test can kill or stop the runner while
the step is mid-flight), then makes its remote effect once per idempotency key and leaves
``effect-...`` only when this run made it: more than one such file for a step is a doubled effect.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from activities.worker.handlers.base import StepContext, agent


@agent("runner.block")
def block(ctx: StepContext) -> dict:
    box = Path(os.environ["RUNNER_TEST_DIR"])
    run = f"{ctx.instance_id}-{ctx.step_id}-{uuid.uuid4().hex[:8]}"
    (box / f"started-{run}").touch()
    while not (box / "release").exists():
        time.sleep(0.05)
    result = {"step": ctx.step_id}
    if ctx.effects.apply("runner-test", ctx.idempotency_key, result) is result:
        (box / f"effect-{run}").touch()
    return result
