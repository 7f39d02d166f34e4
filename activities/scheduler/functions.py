"""The scheduler's activities on the blueprint: every ledger write and send the orchestrations need.

Orchestrators do no I/O; each call below is one activity. Each activity is a thin binding wrapper
around a plain function ``(payload: dict, services) -> dict`` that tests and the durable test host
call directly. All of them are idempotent: the durable engine may run an activity again after a
crash, so each one decides from what the ledger says now, and a second run changes nothing a
first run already changed (see docs/agents.md).

The bodies live in one module per concern and are re-exported here, so ``activities.scheduler.functions``
stays the one place that names the scheduler's activities:

- ``activities.scheduler.step_creation``: ``create_workflow_steps``;
- ``activities.scheduler.dispatch``: ``dispatch_step``, ``dispatch_compensation`` (and the send's retries),
  moving the row by the rules of ``activities.scheduler.dispatch_rules``;
- ``activities.scheduler.checks``: ``check_step``, ``check_compensation``;
- ``activities.scheduler.retries``: ``schedule_retry``, ``give_up_step``, ``finish_compensation``;
- ``activities.scheduler.compensation_plan``: ``plan_compensation``;
- ``activities.scheduler.inputs``: the input models and status sets they share.

Return values (JSON objects):

- ``create_workflow_steps`` -> ``{"instance_id", "workflow", "steps": [{"step_id", "status",
  "attempt"}]}``
- ``dispatch_step`` / ``dispatch_compensation`` -> :class:`DispatchOutcome` as a dict
- ``check_step`` / ``check_compensation`` -> ``StepCheck`` (``workflow_core.contracts``) as a dict
- ``schedule_retry``, ``give_up_step``, ``finish_compensation`` -> ``{"instance_id", "step_id",
  "status", "changed"}``
- ``plan_compensation`` -> ``{"steps": [...], "cancelled": [step ids]}`` (see docs/contracts.md)
"""

from __future__ import annotations

from activities._bp import bp
from activities.scheduler.checks import check_compensation, check_step, wait_until
from activities.scheduler.compensation_plan import plan_compensation
from activities.scheduler.dispatch import (
    DispatchOutcome,
    DispatchResult,
    dispatch_compensation,
    dispatch_step,
)
from activities.scheduler.instances import settle_instance
from activities.scheduler.retries import finish_compensation, give_up_step, schedule_retry
from activities.scheduler.step_creation import create_workflow_steps
from workflow_core import contracts as c
from workflow_core.runtime import get_services

# ---- bindings -------------------------------------------------------------------------------------
# Thin wrappers: the Functions worker decodes the activity input (JSON) and encodes the returned dict.


@bp.function_name(c.ACTIVITY_CREATE_STEPS)
@bp.activity_trigger(input_name="payload")
def create_workflow_steps_activity(payload: dict) -> dict:
    return create_workflow_steps(payload, get_services())


@bp.function_name(c.ACTIVITY_DISPATCH_STEP)
@bp.activity_trigger(input_name="payload")
def dispatch_step_activity(payload: dict) -> dict:
    return dispatch_step(payload, get_services())


@bp.function_name(c.ACTIVITY_CHECK_STEP)
@bp.activity_trigger(input_name="payload")
def check_step_activity(payload: dict) -> dict:
    return check_step(payload, get_services())


@bp.function_name(c.ACTIVITY_SCHEDULE_RETRY)
@bp.activity_trigger(input_name="payload")
def schedule_retry_activity(payload: dict) -> dict:
    return schedule_retry(payload, get_services())


@bp.function_name(c.ACTIVITY_GIVE_UP_STEP)
@bp.activity_trigger(input_name="payload")
def give_up_step_activity(payload: dict) -> dict:
    return give_up_step(payload, get_services())


@bp.function_name(c.ACTIVITY_PLAN_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def plan_compensation_activity(payload: dict) -> dict:
    return plan_compensation(payload, get_services())


@bp.function_name(c.ACTIVITY_DISPATCH_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def dispatch_compensation_activity(payload: dict) -> dict:
    return dispatch_compensation(payload, get_services())


@bp.function_name(c.ACTIVITY_CHECK_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def check_compensation_activity(payload: dict) -> dict:
    return check_compensation(payload, get_services())


@bp.function_name(c.ACTIVITY_FINISH_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def finish_compensation_activity(payload: dict) -> dict:
    return finish_compensation(payload, get_services())


# Plain bodies by activity name: the durable test host can route call_activity(name, input) here.
ACTIVITY_BODIES = {
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
}


__all__ = [
    "ACTIVITY_BODIES",
    "DispatchOutcome",
    "DispatchResult",
    "check_compensation",
    "check_step",
    "create_workflow_steps",
    "dispatch_compensation",
    "dispatch_step",
    "finish_compensation",
    "give_up_step",
    "plan_compensation",
    "schedule_retry",
    "settle_instance",
    "wait_until",
]
