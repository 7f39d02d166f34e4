"""A deliberately broken ``conformance.echo`` for the conformance kit's tests: it ignores the
idempotency key, so every run of the step makes its effect again (a redelivery after a crash does it
twice). Everything else is as ``agent_runner.conformance_echo`` does it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from activities.worker.handlers.base import StepContext, agent


@agent("conformance.echo")
def echo(ctx: StepContext) -> dict:
    if ctx.input.get("slow_seconds"):
        ctx.heartbeat(ctx.input.get("heartbeat_seconds"))
        time.sleep(float(ctx.input["slow_seconds"]))
    with open(os.environ["CONFORMANCE_EFFECTS"], "a", encoding="utf-8") as effects:
        effects.write(ctx.idempotency_key + "\n")
    crash_once = ctx.input.get("crash_once")
    if crash_once and not Path(crash_once).exists():
        Path(crash_once).touch()
        os._exit(3)
    return {"echo": ctx.input.get("value")}
