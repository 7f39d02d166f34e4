"""The result handler: turns an agent's reply into the external event its orchestration waits for.

Entry point for any host: ``await handle_result(body, client, services)``. ``client`` is anything
with ``raise_event(instance_id, event_name, event_data)``, async or plain (in Azure: the
``DurableOrchestrationClient`` of the ``durable_client_input`` binding).

The event is ``result_event_name(step_id, attempt, kind)``, raised on the message's
``orchestration_id`` with the ``ResultMessage`` as its data. If that orchestration is unknown (404)
or already finished (410), the reply is too late to matter: a ``late-result-ignored`` note goes to
the ledger's audit trail and the message is completed. Any other failure propagates, so the host
delivers the message again.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable
from typing import Any, Literal, Protocol

import azure.functions as func
from pydantic import ValidationError

from activities._bp import bp
from activities.messages import from_queue_message, from_servicebus_message, transport_kind
from workflow_core import telemetry
from workflow_core.contracts import RESULT_FUNCTION, ResultMessage, result_event_name
from workflow_core.runtime import Services, get_services
from workflow_core.settings import SERVICE_BUS_CONNECTION, STORAGE_CONNECTION, TransportKind

log = logging.getLogger(__name__)

ACTOR = "result-handler"

# DurableOrchestrationClient.raise_event raises a bare Exception for these HTTP answers
# (azure-functions-durable 1.x): 410 "Instance with ID <id> is gone: either completed or failed",
# 404 "No instance with ID <id> found.".
_GONE = re.compile(r"^(Instance with ID .* is gone|No instance with ID .* found)", re.DOTALL)


class EventClient(Protocol):
    """``DurableOrchestrationClient`` or anything with its ``raise_event`` (async, or plain)."""

    def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> Any: ...


class InvalidResultMessage(ValueError):
    """The message is not a ``ResultMessage``; it ends up dead-lettered on the result queue."""


def is_instance_gone(exc: BaseException) -> bool:
    """Did ``raise_event`` fail because the orchestration does not exist or has finished?"""
    return _GONE.match(str(exc)) is not None


async def raise_result_event(
    result: ResultMessage, client: EventClient, services: Services, *, actor: str = ACTOR
) -> Literal["raised", "late-result-ignored"]:
    """Raise the result's event on its orchestration; audit (not raise) if the orchestration is gone."""
    event = result_event_name(result.step_id, result.attempt, result.kind)
    try:
        raised = client.raise_event(result.orchestration_id, event, result.model_dump(mode="json"))
        if inspect.isawaitable(raised):  # the SDK's client is async; a test host's may not be
            await raised
    except Exception as exc:
        if not is_instance_gone(exc):
            raise
        log.info("late result %s for %s ignored: %s", event, result.orchestration_id, exc)
        try:
            telemetry.record_recovery(
                result.instance_id,
                result.step_id,
                result.attempt,
                "late_result_ignored",
                telemetry.OUTCOME_OK,
                kind=result.kind,
                reason=str(exc),
            )
        except Exception:  # telemetry must never fail the work it describes
            log.exception("could not record late-result telemetry")
        services.ledger.note(
            result.instance_id,
            result.step_id,
            actor=actor,
            action="late-result-ignored",
            reason=f"{event} ({result.outcome}) for orchestration {result.orchestration_id}: {exc}",
            attempt=result.attempt,
        )
        return "late-result-ignored"
    log.info("raised %s (%s) on %s", event, result.outcome, result.orchestration_id)
    return "raised"


async def handle_result(
    body: dict[str, Any], client: EventClient, services: Services
) -> Literal["raised", "late-result-ignored"]:
    """Handle one result-queue message body (a ``ResultMessage`` dict)."""
    try:
        result = ResultMessage.model_validate(body)
    except ValidationError as exc:
        raise InvalidResultMessage(f"not a result message: {exc}") from exc
    return await raise_result_event(result, client, services)


# ---- trigger-bound function -----------------------------------------------------------------------


def register_result_handler(blueprint: Any, kind: TransportKind) -> Callable[..., Any]:
    """Add ``agent_result_handler`` with the trigger of ``kind`` to ``blueprint``."""
    if kind is TransportKind.SERVICE_BUS:

        @blueprint.function_name(RESULT_FUNCTION)
        @blueprint.service_bus_queue_trigger(
            arg_name="msg", queue_name="%RESULT_QUEUE_NAME%", connection=SERVICE_BUS_CONNECTION
        )
        @blueprint.durable_client_input(client_name="client")
        async def agent_result_handler(msg: func.ServiceBusMessage, client) -> None:
            await handle_result(from_servicebus_message(msg).body, client, get_services())

        return agent_result_handler

    @blueprint.function_name(RESULT_FUNCTION)
    @blueprint.queue_trigger(arg_name="msg", queue_name="%RESULT_QUEUE_NAME%", connection=STORAGE_CONNECTION)
    @blueprint.durable_client_input(client_name="client")
    async def agent_result_handler(msg: func.QueueMessage, client) -> None:
        await handle_result(from_queue_message(msg).body, client, get_services())

    return agent_result_handler


agent_result_handler = register_result_handler(bp, transport_kind())
