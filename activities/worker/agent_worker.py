"""The agent worker's entry point, :func:`process_work_message`, for the ``agent_worker`` functions
below (one per hosted pool), the durable test host's queue pumps and the ``sas-agent`` runner. It
returns when the message is dealt with (ignored or parked included) and raises when it must be
delivered again (ledger or transport unavailable, a crash; after ``MAX_DELIVERY_COUNT``: dead-lettered).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import azure.functions as func

from activities.common import bp, parse_or_park
from activities.worker.delivery import Delivery
from activities.worker.messages import (
    Incoming,
    bind_trigger,
    from_queue_message,
    from_servicebus_message,
    pool_function_name,
    pool_queue_setting,
    transport_kind,
)
from workflow_core import clock, tracing
from workflow_core.contracts import WORKER_FUNCTION, WorkMessage
from workflow_core.messages import is_expired
from workflow_core.runtime import Services, get_services
from workflow_core.settings import TransportKind, hosted_pools
from workflow_core.transport.envelope import is_doctor_probe
from workflow_core.workflows.pools import DEFAULT_POOL, pool_queue

log = logging.getLogger("sas.worker")
# The worker refuses work whose attempt expired (``WorkMessage.expires_at``) by its own clock, allowing
# for this much of a fast clock: the ledger refuses a non-current attempt's claim whatever the clock.
FAST_CLOCK_ALLOWANCE_SECONDS = 300.0


def default_worker_id(invocation_id: str | None = None) -> str:
    """``worker:<host>:<pid>[:<invocation>]``: who owns a Running step, for the ledger and operators."""
    base = f"worker:{socket.gethostname()}:{os.getpid()}"
    return f"{base}:{invocation_id[:8]}" if invocation_id else base


def process_work_message(
    body: Any,
    *,
    delivery_count: int,
    services: Services,
    worker_id: str,
    message_id: str | None = None,
    trace: Any = None,
    pool: str = DEFAULT_POOL,
) -> str | None:
    """Handle one delivery of a work message (``trace``: its application properties: this span's
    parent is the dispatch). A body that is not a valid ``WorkMessage`` is parked (its reason returned)."""
    queue = pool_queue(services.settings.work_queue, pool)
    if is_doctor_probe(body):  # its cancel did not take: nothing to do, nothing to park
        log.info("dropped a sas doctor probe delivered on %s (message %s)", queue, message_id)
        return None
    fields = body if isinstance(body, dict) else {}
    with tracing.consumer_span(
        f"process {queue}",
        transport=services.settings.transport,
        queue=queue,
        message_id=message_id,
        body=body,
        parent=trace,
        kind=fields.get("kind"),
        delivery_count=delivery_count,
        pool=pool,
    ):
        park = {"source": "work", "actor": worker_id, "message_id": message_id}
        message = parse_or_park(WorkMessage, body, services, **park)
        if isinstance(message, str):
            return message
        if is_expired(message, clock.utcnow(), FAST_CLOCK_ALLOWANCE_SECONDS):
            reason = f"attempt {message.attempt} of {message.step_id} expired at {message.expires_at}"
            log.warning("refused work message %s: %s", message_id, reason)
            return reason
        Delivery(message, delivery_count, services, worker_id).process()
        return None


def run_queue_message(msg: func.QueueMessage, **options: Any) -> None:
    """Storage Queue trigger body (``options``: as :func:`run_incoming` takes them)."""
    run_incoming(from_queue_message(msg), **options)


def run_servicebus_message(msg: func.ServiceBusMessage, **options: Any) -> None:
    """Service Bus trigger body (``options``: as :func:`run_incoming` takes them)."""
    run_incoming(from_servicebus_message(msg), **options)


def run_incoming(
    incoming: Incoming,
    *,
    services: Services | None = None,
    worker_id: str | None = None,
    pool: str = DEFAULT_POOL,
) -> None:
    process_work_message(
        incoming.body,
        delivery_count=incoming.delivery_count,
        services=services or get_services(),
        worker_id=worker_id or default_worker_id(),
        message_id=incoming.message_id,
        trace=incoming.application_properties,
        pool=pool,
    )


def register_worker(blueprint: Any, kind: TransportKind, pool: str = DEFAULT_POOL) -> Callable[..., Any]:
    """Add the worker of ``pool``'s queue with the trigger of ``kind`` to ``blueprint``."""
    name, queue = pool_function_name(WORKER_FUNCTION, pool), pool_queue_setting(pool)
    if kind is TransportKind.SERVICE_BUS:

        def agent_worker(msg: func.ServiceBusMessage, context: func.Context) -> None:
            run_servicebus_message(msg, worker_id=default_worker_id(context.invocation_id), pool=pool)
    else:

        def agent_worker(msg: func.QueueMessage, context: func.Context) -> None:
            run_queue_message(msg, worker_id=default_worker_id(context.invocation_id), pool=pool)

    return bind_trigger(blueprint, kind, name, queue)(agent_worker)


agent_workers = {pool: register_worker(bp, transport_kind(), pool) for pool in hosted_pools()}
