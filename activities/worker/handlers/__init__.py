"""Agent handlers: the registry (``base``: ``@agent("name")`` registers one in ``AGENT_HANDLERS``), the
example agents (registered by importing this package), fault injection and simulated remotes.
"""

from activities.worker.handlers import canary as _canary  # registers the recovery canary's agents
from activities.worker.handlers import examples as _examples  # registers the example agents
from activities.worker.handlers import faults
from activities.worker.handlers.base import (
    AGENT_HANDLERS,
    MissingAgentHandlers,
    StepContext,
    agent,
    check_agents_registered,
    check_shipped_workflows,
    get_handler,
)
from activities.worker.handlers.remote import EffectCancelled, RemoteEffects
