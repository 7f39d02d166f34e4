"""The Agent role: the scheduler's activities, the agent worker, the result and dead-letter handlers.

``function_app`` registers :data:`blueprint` (a ``df.Blueprint``) and calls
:func:`check_shipped_workflows` at start-up. Every function is a thin binding around a plain body
that tests and the durable test host call directly (``ACTIVITY_BODIES``, ``process_work_message``,
``handle_result``, ``handle_dead_letter``). The queue-triggered functions use Service Bus or Storage
Queue triggers according to ``AGENT_TRANSPORT`` when this package is imported.
"""

from activities.common import bp as blueprint
from activities.replies.dead_letters import handle_dead_letter
from activities.replies.results import handle_result
from activities.scheduler.functions import ACTIVITY_BODIES
from activities.worker.agent_worker import process_work_message
from activities.worker.handlers import check_shipped_workflows

__all__ = [
    "ACTIVITY_BODIES",
    "blueprint",
    "check_shipped_workflows",
    "handle_dead_letter",
    "handle_result",
    "process_work_message",
]
