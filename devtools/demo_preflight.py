"""What both demos check before they start anything: the definitions in ``workflows/`` load and every
agent they name has a handler, and the sample inputs the demos start workflows with.

Its own module so that ``./scripts/demo`` and ``./scripts/demo --serve`` (``devtools.console_demo``)
share it without importing each other: a broken YAML stops either with one ``error:`` line naming
the file, before Azurite or a server is started.
"""

from __future__ import annotations

from typing import Any

DEFAULT_INPUTS: dict[str, dict[str, Any]] = {
    "provision-tenant": {"tenant_id": "contoso", "admin_email": "admin@contoso.example"},
    "onboard-tenant": {"tenant_id": "fabrikam", "admin_email": "admin@fabrikam.example"},
    "order-fulfilment": {
        "order_id": "o-1001",
        "customer_id": "c-42",
        "items": [{"sku": "book-1", "quantity": 2}],
        "amount": 59.9,
        "shipping_address": {"city": "Utrecht", "street": "Oudegracht 1"},
    },
}


class DemoError(Exception):
    """What stops the demo before it starts: one ``error:`` line saying what and how to fix it."""


def check_definitions() -> None:
    """Load every definition the way the app does at start-up; DemoError saying which file and what
    is wrong, or which agent has no handler."""
    from activities.worker.handlers.base import MissingAgentHandlers, check_agents_registered
    from workflow_core.workflows import WorkflowDefinitionError, load_workflows

    try:
        check_agents_registered(load_workflows())
    except WorkflowDefinitionError as exc:
        where = "workflows/" if str(exc).split(":", 1)[0].endswith((".yaml", ".yml")) else ""
        raise DemoError(f"{where}{exc} (fix the file, or move it out of workflows/)") from None
    except MissingAgentHandlers as exc:
        raise DemoError(str(exc)) from None
