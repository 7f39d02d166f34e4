"""The Agent role: the scheduler's activities, the agent worker, the result and dead-letter handlers
(docs/agents.md). Every function is a thin binding (on :data:`blueprint`) around a plain body that tests
and the durable test host call directly; the queue triggers follow ``AGENT_TRANSPORT`` at import.
"""

from activities.common import bp as blueprint
from activities.replies.dead_letters import handle_dead_letter
from activities.replies.results import handle_result
from activities.scheduler.functions import ACTIVITY_BODIES
from activities.worker.agent_worker import process_work_message
from activities.worker.handlers import check_shipped_workflows
