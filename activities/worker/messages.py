"""Turn what a trigger hands a function into the parts our bodies need, for either transport.

A Storage Queue message's body is the envelope ``StorageQueueTransport`` wrote (one the host moved to
``<queue>-poison`` itself has no dead-letter reason); a Service Bus message's is the JSON body, the
rest message properties. The trigger kind is chosen once, at import, from ``AGENT_TRANSPORT``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import azure.functions as func

from workflow_core.settings import SERVICE_BUS_CONNECTION, STORAGE_CONNECTION, TransportKind
from workflow_core.transport.envelope import body_from_text, read_envelope
from workflow_core.workflows.pools import DEFAULT_POOL, pool_queue

HOST_POISON_REASON = "MaxDequeueCountExceeded"
HOST_POISON_DESCRIPTION = "moved to the poison queue by the Functions host after its last allowed delivery"


def transport_kind(env: dict[str, str] | None = None) -> TransportKind:
    """``AGENT_TRANSPORT`` (default ``servicebus``); an unknown value raises a clear error."""
    env = os.environ if env is None else env
    raw = (env.get("AGENT_TRANSPORT") or TransportKind.SERVICE_BUS.value).strip().lower()
    try:
        return TransportKind(raw)
    except ValueError:
        choices = ", ".join(k.value for k in TransportKind)
        raise ValueError(f"AGENT_TRANSPORT must be one of {choices}; got {raw!r}") from None


def pool_function_name(base: str, pool: str) -> str:
    """``base`` for the default pool, ``base_<pool>`` for another: one function per pool's queue."""
    return base if pool == DEFAULT_POOL else f"{base}_{pool.replace('-', '_')}"


def pool_queue_setting(pool: str) -> str:
    """A trigger's queue name for ``pool``'s work: ``%WORK_QUEUE_NAME%`` or ``%WORK_QUEUE_NAME%-<pool>``
    (the host resolves the app setting inside the name, as ``workflow_core.workflows.pools`` names it)."""
    return pool_queue("%WORK_QUEUE_NAME%", pool)


@dataclass(frozen=True)
class Incoming:
    body: dict[str, Any]
    message_id: str | None
    delivery_count: int
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    # Service Bus application properties / the envelope's: carry ``traceparent``/``tracestate``
    application_properties: dict[str, Any] = field(default_factory=dict)


def from_queue_message(msg: func.QueueMessage, *, dead_letter: bool = False) -> Incoming:
    envelope = read_envelope(_text(msg.get_body()))
    reason, description = envelope.dead_letter_reason, envelope.dead_letter_description
    if dead_letter and reason is None:
        reason, description = HOST_POISON_REASON, HOST_POISON_DESCRIPTION
    return Incoming(
        body=envelope.body,
        message_id=envelope.message_id or msg.id,
        delivery_count=int(msg.dequeue_count or 1),
        dead_letter_reason=reason,
        dead_letter_description=description,
        application_properties=dict(envelope.application_properties),
    )


def from_servicebus_message(msg: func.ServiceBusMessage) -> Incoming:
    return Incoming(
        body=body_from_text(_text(msg.get_body())),
        message_id=msg.message_id,
        delivery_count=int(msg.delivery_count or 1),
        dead_letter_reason=msg.dead_letter_reason,
        dead_letter_description=msg.dead_letter_error_description,
        application_properties=dict(getattr(msg, "application_properties", None) or {}),
    )


Read = Callable[[Incoming, Any], Awaitable[None]]


def bind_trigger(blueprint: Any, kind: TransportKind, name: str, queue: str) -> Callable[[Any], Any]:
    """The decorator that adds a function named ``name`` to ``blueprint``, triggered by ``queue`` (the
    setting naming it) with ``kind``'s trigger and connection, its message passed as ``msg``."""
    if kind is TransportKind.SERVICE_BUS:
        trigger, connection = blueprint.service_bus_queue_trigger, SERVICE_BUS_CONNECTION
    else:
        trigger, connection = blueprint.queue_trigger, STORAGE_CONNECTION
    bound = trigger(arg_name="msg", queue_name=queue, connection=connection)
    return lambda function: blueprint.function_name(name)(bound(function))


def bind_reader(
    blueprint: Any, kind: TransportKind, name: str, queue: str, read: Read, *, dead_letter: bool = False
) -> Any:
    """Add function ``name`` on ``queue`` with the trigger of ``kind``, awaiting ``read(incoming,
    client)`` with the durable client: the result and dead-letter handlers."""
    if kind is TransportKind.SERVICE_BUS:

        async def handler(msg: func.ServiceBusMessage, client) -> None:
            await read(from_servicebus_message(msg), client)
    else:

        async def handler(msg: func.QueueMessage, client) -> None:
            await read(from_queue_message(msg, dead_letter=dead_letter), client)

    with_client = blueprint.durable_client_input(client_name="client")(handler)
    return bind_trigger(blueprint, kind, name, queue)(with_client)


def _text(body: bytes | str | None) -> str:
    return body.decode("utf-8", errors="replace") if isinstance(body, bytes) else str(body or "")
