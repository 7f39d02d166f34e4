"""``conformance.echo`` for ``sas-agent``: the agent the conformance kit (``sas conformance``) drives.

    sas-agent --pool default --handlers agent_runner.conformance_echo --lock-seconds 2

What it must do: docs/agents.md, "Check an agent with the conformance kit". Its remote service is the
file ``$CONFORMANCE_EFFECTS``; a real agent passes the same key to its own service.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from activities.worker.handlers.base import StepContext, agent


def apply_once(key: str) -> None:
    """Append ``key`` to ``$CONFORMANCE_EFFECTS`` unless an earlier delivery did: a marker file per
    key, created exclusively, is the dedupe record (two deliveries at once cannot both create it)."""
    effects = Path(os.environ["CONFORMANCE_EFFECTS"])
    marker = effects.with_name(f"{effects.name}.{hashlib.sha256(key.encode()).hexdigest()}")
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return
    with effects.open("a", encoding="utf-8") as log:
        log.write(key + "\n")


@agent("conformance.echo")
def echo(ctx: StepContext) -> dict:
    if ctx.input.get("slow_seconds"):
        ctx.heartbeat(ctx.input.get("heartbeat_seconds"))
        time.sleep(float(ctx.input["slow_seconds"]))
    apply_once(ctx.idempotency_key)
    crash_once = ctx.input.get("crash_once")
    if crash_once and not Path(crash_once).exists():
        Path(crash_once).touch()
        os._exit(3)  # mid-step: the effect made, nothing recorded, the message not settled
    return {"echo": ctx.input.get("value")}
