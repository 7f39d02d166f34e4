"""Agent handlers: the registry (``base``), the example agents, fault injection and simulated remotes.

``AGENT_HANDLERS`` maps agent names to handlers; ``@agent("name")`` registers one. Importing this
package registers the example agents (``examples``). See docs/agents.md for how to add an agent.
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
