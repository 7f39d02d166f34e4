"""``conformance.echo`` for ``sas-agent``: the agent the conformance kit (``sas conformance``) drives.

    sas-agent --pool default --handlers agent_runner.conformance_echo --lock-seconds 2

What it must do: docs/agents.md, "Check an agent with the conformance kit". Its remote service is the
file ``$CONFORMANCE_EFFECTS`` (unset, as when it serves the recovery canary: no effect to make); a real
agent passes the same key to its own service. The canary's faults (``fault``, ``fault_attempts``) map
to the handler exceptions as ``activities/worker/handlers/canary.py`` does for ``canary.probe``.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from activities.worker.handlers.base import NoReply, PermanentError, StepContext, agent

FAULTS = ("silent", "fail", "fail-permanently", "heartbeat-then-silent")


class EchoFault(RuntimeError):
    """The failure the ``fail`` fault makes an attempt report, on purpose (retryable)."""


def apply_once(key: str) -> None:
    """Append ``key`` to ``$CONFORMANCE_EFFECTS`` unless an earlier delivery did: a marker file per
    key, created exclusively, is the dedupe record (two deliveries at once cannot both create it)."""
    if not os.environ.get("CONFORMANCE_EFFECTS"):
        return  # no remote service here (the canary): nothing to make
    effects = Path(os.environ["CONFORMANCE_EFFECTS"])
    marker = effects.with_name(f"{effects.name}.{hashlib.sha256(key.encode()).hexdigest()}")
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return
    with effects.open("a", encoding="utf-8") as log:
        log.write(key + "\n")


def inject_fault(ctx: StepContext) -> None:
    """The canary's fault for this attempt, if any: applied while ``attempt <= fault_attempts``
    (default 1), before the effect, so a faulted attempt makes none."""
    fault = ctx.input.get("fault") or "none"
    if fault == "none":
        return
    attempts = ctx.input.get("fault_attempts", 1)
    if fault not in FAULTS or isinstance(attempts, bool) or not isinstance(attempts, int):
        raise PermanentError(f"fault must be one of none, {', '.join(FAULTS)}; fault_attempts an integer")
    if ctx.attempt > attempts:
        return
    if fault == "silent":
        raise NoReply("conformance.echo fault silent: no heartbeat, no reply")
    if fault == "fail":
        raise EchoFault(f"conformance.echo fault fail: attempt {ctx.attempt} fails")
    if fault == "fail-permanently":
        raise PermanentError(f"conformance.echo fault fail-permanently: attempt {ctx.attempt} fails for good")
    ctx.heartbeat()  # heartbeat-then-silent
    raise NoReply("conformance.echo fault heartbeat-then-silent: one heartbeat, then silence")


@agent("conformance.echo")
def echo(ctx: StepContext) -> dict:
    if ctx.kind == "compensate":
        return {"undone": True}  # nothing to undo: the effect is a line nobody takes back
    inject_fault(ctx)
    if ctx.input.get("slow_seconds"):
        ctx.heartbeat(ctx.input.get("heartbeat_seconds"))
        time.sleep(float(ctx.input["slow_seconds"]))
    apply_once(ctx.idempotency_key)
    crash_once = ctx.input.get("crash_once")
    if crash_once and not Path(crash_once).exists():
        Path(crash_once).touch()
        os._exit(3)  # mid-step: the effect made, nothing recorded, the message not settled
    return {"echo": ctx.input.get("value")}
