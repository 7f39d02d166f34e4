"""The activities the orchestrators call, bound on the blueprint (docs/agents.md, "The activities").

Each is a plain body ``(payload: dict, services) -> dict`` (``ACTIVITY_BODIES``, for tests and the
durable test host), idempotent: the engine may run it again, so each decides from the ledger now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.common import bp
from activities.scheduler.checks import check_compensation, check_step
from activities.scheduler.compensation_plan import plan_compensation
from activities.scheduler.dispatch import dispatch_compensation, dispatch_step
from activities.scheduler.instances import settle_instance
from activities.scheduler.retries import finish_compensation, give_up_step, schedule_retry
from activities.scheduler.step_creation import create_workflow_steps
from activities.verification import verify_result
from workflow_core import contracts as c
from workflow_core.runtime import get_services

# Plain bodies by activity name: the durable test host routes call_activity(name, input) here.
ACTIVITY_BODIES: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]] = {
    c.ACTIVITY_CREATE_STEPS: create_workflow_steps,
    c.ACTIVITY_DISPATCH_STEP: dispatch_step,
    c.ACTIVITY_CHECK_STEP: check_step,
    c.ACTIVITY_SCHEDULE_RETRY: schedule_retry,
    c.ACTIVITY_GIVE_UP_STEP: give_up_step,
    c.ACTIVITY_PLAN_COMPENSATION: plan_compensation,
    c.ACTIVITY_DISPATCH_COMPENSATION: dispatch_compensation,
    c.ACTIVITY_CHECK_COMPENSATION: check_compensation,
    c.ACTIVITY_FINISH_COMPENSATION: finish_compensation,
    c.ACTIVITY_SETTLE_INSTANCE: settle_instance,
    c.ACTIVITY_VERIFY_RESULT: verify_result,
}


def _bind(name: str, body: Callable[[dict[str, Any], Any], dict[str, Any]]) -> None:
    """The Functions worker decodes the activity input (JSON) and encodes the returned dict."""

    @bp.function_name(name)
    @bp.activity_trigger(input_name="payload")
    def activity(payload: dict) -> dict:
        return body(payload, get_services())


for _name, _body in ACTIVITY_BODIES.items():
    _bind(_name, _body)
