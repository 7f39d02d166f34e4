"""HTTP starter and status API: start workflows, read their orchestration status and step ledger.

``function_app.py`` registers :data:`blueprint`; the plain ``async (req, client, services)`` bodies
live in :mod:`api.handlers` and :mod:`api.start` so tests and the in-process durable test host can
call them directly.
"""

from api.functions import blueprint
from api.handlers import get_workflow_status, get_workflow_steps, health, list_workflows
from api.start import start_workflow

__all__ = [
    "blueprint",
    "get_workflow_status",
    "get_workflow_steps",
    "health",
    "list_workflows",
    "start_workflow",
]
