"""The Agent role: the scheduler's activities, the agent worker, the result and dead-letter handlers.

``function_app`` registers :data:`blueprint` (a ``df.Blueprint``) and may call
:func:`check_shipped_workflows` at start-up. Every function is a thin binding around a plain body
that tests and the durable test host call directly:

- ``activities.scheduler.functions``: ``create_workflow_steps``, ``dispatch_step``, ``check_step``,
  ``schedule_retry``, ``give_up_step``, ``plan_compensation``, ``dispatch_compensation``,
  ``check_compensation``, ``finish_compensation``, and ``activities.scheduler.instances.settle_instance``
  -- each ``(payload: dict, services) -> dict``
  (``ACTIVITY_BODIES`` maps activity names to them; the bodies live in ``step_creation``,
  ``dispatch``, ``step_checks``, ``retries`` and ``compensation_plan``, re-exported there);
- ``activities.verification.verify_result``: the ledger's outcome of the attempt a result event names;
- ``activities.worker.agent_worker.process_work_message(body, *, delivery_count, services,
  worker_id)`` (one delivery's flow is ``activities.worker.delivery``, its claim and record rules
  ``activities.worker.delivery_rules``);
- ``activities.replies.results.handle_result(body, client, services)`` (async);
- ``activities.replies.dead_letters.handle_dead_letter(body, *, reason, description, client,
  services)`` (async).

The queue-triggered functions use Service Bus or Storage Queue triggers according to
``AGENT_TRANSPORT`` when this package is imported.
"""

from activities import verification
from activities._bp import bp as blueprint
from activities.replies import dead_letters, results
from activities.replies.dead_letters import handle_dead_letter
from activities.replies.results import handle_result
from activities.scheduler import functions as scheduling
from activities.scheduler import instances
from activities.scheduler.functions import ACTIVITY_BODIES as _SCHEDULING_BODIES
from activities.verification import verify_result
from activities.worker import agent_worker as worker
from activities.worker.agent_worker import default_worker_id, process_work_message
from activities.worker.handlers import AGENT_HANDLERS, agent, check_agents_registered, check_shipped_workflows
from workflow_core.contracts import ACTIVITY_VERIFY_RESULT

blueprints = [blueprint]
ACTIVITY_BODIES = {**_SCHEDULING_BODIES, ACTIVITY_VERIFY_RESULT: verify_result}

__all__ = [
    "ACTIVITY_BODIES",
    "AGENT_HANDLERS",
    "agent",
    "blueprint",
    "blueprints",
    "check_agents_registered",
    "check_shipped_workflows",
    "dead_letters",
    "default_worker_id",
    "handle_dead_letter",
    "handle_result",
    "instances",
    "process_work_message",
    "results",
    "scheduling",
    "verification",
    "worker",
]
