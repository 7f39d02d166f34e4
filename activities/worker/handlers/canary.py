"""The recovery canary's agents (``sas-canary``; docs/operations.md, "Recovery canary").

The fault comes from the step's own input (``scenario``) and attempt, never the fault injector, so a
canary run can break only itself. There is no effect: both agents are idempotent by construction.
"""

from __future__ import annotations

from typing import Any

from activities.worker.handlers.base import NoReply, PermanentError, StepContext, agent


class CanaryFault(RuntimeError):
    """The failure a canary scenario makes its probe report, on purpose."""


@agent("canary.probe")
def canary_probe(ctx: StepContext) -> dict[str, Any]:
    scenario = str(ctx.input.get("scenario", ""))
    role = str(ctx.input.get("role", ctx.step_id))
    first = ctx.attempt <= 1
    if role == "probe" and first:
        if scenario == "lost-reply":
            raise NoReply("canary lost-reply: the first attempt never answers")
        if scenario == "retry":
            raise CanaryFault("canary retry: the first attempt fails")
        if scenario == "heartbeat-stops":
            ctx.heartbeat()
            raise NoReply("canary heartbeat-stops: one heartbeat, then silence")
    if role == "finish" and scenario == "compensate":
        raise PermanentError("canary compensate: the finish step fails for good")
    return {"canary": scenario, "role": role, "attempt": ctx.attempt}


@agent("canary.undo")
def canary_undo(ctx: StepContext) -> dict[str, Any]:
    return {"canary": str(ctx.step_input.get("scenario", "")), "undone": ctx.step_id}
