"""The dead-letter handler: a work message that could not be processed fails its step *now*, so its
orchestration retries or compensates at once instead of at the deadline (docs/agents.md, "Result
and dead-letter handlers"). An attempt the ledger already settled has that outcome raised instead.
An orchestration found gone makes its instance due now, as for a reply (``scheduler_gone``).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from activities.common import bp, emit_recovery, grace_deadline, never_fails, parse_or_park, retry_on_conflict
from activities.replies.results import EventClient, raise_result_event
from activities.worker import messages as m
from activities.worker.delivery_rules import recorded_reply
from workflow_core import telemetry, tracing
from workflow_core.contracts import DEAD_LETTER_FUNCTION, ResultMessage, WorkMessage, fit_text
from workflow_core.ledger import StepNotFound, StepRecord, StepStatus
from workflow_core.ledger.model import COMP_FAILED
from workflow_core.ledger.scheduler_gone import bring_forward
from workflow_core.runtime import Services, get_services
from workflow_core.settings import TransportKind, hosted_pools
from workflow_core.workflows.loader import agent_pools
from workflow_core.workflows.pools import DEFAULT_POOL, pool_queue

log = logging.getLogger(__name__)
S = StepStatus
ACTOR = "dead-letter-handler"


async def handle_dead_letter(
    body: Any,
    *,
    reason: str | None,
    description: str | None = None,
    client: EventClient,
    services: Services,
    message_id: str | None = None,
    trace: Any = None,
    pool: str = DEFAULT_POOL,
) -> str:
    """Fail the dead-lettered attempt (a dead letter of ``pool``'s queue) and tell its orchestration:
    ``failed-event-raised``, ``result-event-raised`` (the ledger already had an outcome),
    ``late-result-ignored``, ``ignored`` or ``parked``."""
    queue = pool_queue(services.settings.work_queue, pool)
    fields = body if isinstance(body, dict) else {}
    with tracing.consumer_span(
        f"process {queue}/dead-letter",
        transport=services.settings.transport,
        queue=queue,
        message_id=message_id,
        body=body,
        parent=trace,
        dead_letter_reason=reason,
        pool=pool,
    ):
        texts = {
            k: v if isinstance(v := fields.get(k), str) else None
            for k in ("workflow", "instance_id", "step_id", "kind")
        }
        attempt = fields.get("attempt") if isinstance(fields.get("attempt"), int) else None
        with never_fails("the dead letter"):
            telemetry.record_dead_letter(
                queue, reason=reason or "unknown", attempt=attempt, pool=pool, **texts
            )
        detail = f": {description}" if description else ""
        error = fit_text(f"dead-lettered: {reason or 'unknown reason'}{detail}")
        park = {"source": "dead-letter", "actor": ACTOR, "message_id": message_id, "note": f" ({error})"}
        message = parse_or_park(WorkMessage, body, services, **park)
        if isinstance(message, str):
            return "parked"
        ledger, a, ids = services.ledger, message.attempt, (message.instance_id, message.step_id)
        where = "/".join(ids)
        failure = {"actor": ACTOR, "reason": error, "last_error": error, "non_retryable": False}

        def decide(r: StepRecord) -> tuple[ResultMessage | None, str]:
            """The reply to raise (a failure written now, or the outcome recorded), or why none."""
            failure["deadline"] = grace_deadline(services.settings.watchdog_grace_seconds)
            if message.kind == "work":
                if r.attempt != a:
                    return None, f"ledger is at attempt {r.attempt} ({r.status.value})"
                if r.status in (S.SUCCEEDED, S.FAILED):
                    return recorded_reply(message, r, error), ""
                if r.status not in (S.DISPATCHED, S.RUNNING):
                    return None, f"step is {r.status.value}"
                ledger.transition(r, S.FAILED, **failure)
            else:
                if r.compensation_attempt != a:
                    at = f"compensation attempt {r.compensation_attempt}"
                    return None, f"ledger is at {at} ({r.status.value})"
                if r.status not in (S.COMPENSATING, S.COMPENSATED):
                    return None, f"step is {r.status.value}"
                if r.status is S.COMPENSATED or r.compensation_status == COMP_FAILED:
                    return recorded_reply(message, r, error), ""
                ledger.update(r, compensation_status=COMP_FAILED, **failure)
            emit_recovery(r, "dead_letter", attempt=a, kind=message.kind, reason=error)
            log.warning("%s %s#%d (pool %s) failed: %s", message.kind, where, a, pool, error)
            return ResultMessage.answering(message, ok=False, error=error), ""

        read = functools.partial(ledger.get, *ids)
        try:
            to_raise, why = retry_on_conflict(read, decide, what=f"dead-letter {where}")
        except StepNotFound:
            log.warning("dead-lettered message for unknown step %s", where)
            return "ignored"
        if to_raise is None:
            why = f"{message.kind} attempt {a} ({error}): {why}"
            ledger.note(*ids, actor=ACTOR, action="dead-letter-ignored", reason=why, attempt=a)
            return "ignored"
        raised = await raise_result_event(to_raise, client, services, actor=ACTOR)
        if raised == "late-result-ignored":  # its scheduler is gone: the instance is due now
            why = f"dead-lettered {message.kind} attempt {a}: its {to_raise.outcome} could not be raised"
            record = ledger.find_instance(message.instance_id)  # read only on this rare path
            bring_forward(ledger, record, to_raise.orchestration_id, actor=ACTOR, why=why)
        if raised != "raised":
            return raised
        return "failed-event-raised" if to_raise.outcome == "failed" else "result-event-raised"


async def _on_message(incoming: m.Incoming, client: EventClient, *, pool: str) -> None:
    await handle_dead_letter(
        incoming.body,
        reason=incoming.dead_letter_reason,
        description=incoming.dead_letter_description,
        client=client,
        services=get_services(),
        message_id=incoming.message_id,
        trace=incoming.application_properties,
        pool=pool,
    )


def dead_letter_pools(kind: TransportKind) -> list[str]:
    """The pools whose dead letters this app reads: on Service Bus the hosted ones only (no receive
    right on another pool's queue; docs/agents.md, "Result and dead-letter handlers"), on Storage
    Queues every declared pool's ``<queue>-poison``."""
    return list(hosted_pools()) if kind is TransportKind.SERVICE_BUS else agent_pools().names


def register_dead_letter_handler(blueprint: Any, kind: TransportKind, pool: str = DEFAULT_POOL) -> Any:
    """Add the dead-letter handler of ``pool``'s queue to ``blueprint`` (on Storage Queues the default
    pool's is ``DEAD_LETTER_QUEUE_NAME``, where the Functions host also moves poison messages)."""
    name, queue = m.pool_function_name(DEAD_LETTER_FUNCTION, pool), m.pool_queue_setting(pool)
    if kind is TransportKind.SERVICE_BUS:
        queue = f"{queue}/$DeadLetterQueue"
    else:
        queue = "%DEAD_LETTER_QUEUE_NAME%" if pool == DEFAULT_POOL else f"{queue}-poison"
    read = functools.partial(_on_message, pool=pool)
    return m.bind_reader(blueprint, kind, name, queue, read, dead_letter=True)


_kind = m.transport_kind()
dead_letter_handlers = {p: register_dead_letter_handler(bp, _kind, p) for p in dead_letter_pools(_kind)}
