"""The result handler: turns an agent's reply into the external event its orchestration waits for
(docs/agents.md, "Result and dead-letter handlers"). A keyed work success is raised unread (the
scheduler's next write proves it); any other reply is a claim, raised only as the ledger recorded it
for that very attempt, and otherwise audited.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Literal, Protocol

from activities.common import audit, bp, never_fails, park, parse_or_park
from activities.replies.agent_reports import record_reply
from activities.replies.attempt_status import handle_heartbeat
from activities.verification import UNDOING, attempt_token, recorded_outcome, verdict_of
from activities.worker.messages import Incoming, bind_reader, transport_kind
from workflow_core import telemetry, tracing
from workflow_core.contracts import RESULT_FUNCTION, ConfirmedResult, ResultMessage, result_event_name
from workflow_core.ledger import InstanceRecord, InvalidLedgerInput, StepNotFound, StepRecord
from workflow_core.ledger.known_rows import WATCHED_KEY, instance_snapshot
from workflow_core.ledger.scheduler_gone import bring_forward, is_instance_gone
from workflow_core.runtime import Services, get_services
from workflow_core.settings import TransportKind
from workflow_core.transport.envelope import is_doctor_probe

log = logging.getLogger(__name__)

ACTOR = "result-handler"


class EventClient(Protocol):
    """``DurableOrchestrationClient`` or anything with its ``raise_event`` (async, or plain)."""

    def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> Any: ...


async def raise_result_event(
    result: ResultMessage,
    client: EventClient,
    services: Services,
    *,
    actor: str = ACTOR,
    quiet_if_gone: bool = False,
    instance: InstanceRecord | None = None,
) -> Literal["raised", "late-result-ignored", "gone"]:
    """Raise the result's event on its orchestration; if that is gone, audit it (``quiet_if_gone``:
    only answer ``gone``), and when ``instance`` (as read) still names it, make the instance due now."""
    event = result_event_name(result.step_id, result.attempt, result.kind)
    try:
        data = result.model_dump(mode="json")
        # the scheduler builds later inputs from the output: the value, not a blob reference
        data["output"] = services.payloads.resolve(data.get("output"))
        if isinstance(data.get("verdict"), dict):
            data["verdict"]["output"] = services.payloads.resolve(data["verdict"].get("output"))
        raised = client.raise_event(result.orchestration_id, event, data)
        if inspect.isawaitable(raised):  # the SDK's client is async; a test host's may not be
            await raised
    except Exception as exc:
        if not is_instance_gone(exc):
            raise
        if quiet_if_gone:
            return "gone"
        log.info("late result %s for %s ignored: %s", event, result.orchestration_id, exc)
        ids = (result.instance_id, result.step_id)
        with never_fails("late-result telemetry"):
            outcome = (result.attempt, "late_result_ignored", telemetry.OUTCOME_OK)
            telemetry.record_recovery(*ids, *outcome, kind=result.kind, reason=str(exc))
        why = f"{event} ({result.outcome}) for orchestration {result.orchestration_id}: {exc}"
        services.ledger.note(
            *ids, actor=actor, action="late-result-ignored", reason=why, attempt=result.attempt
        )
        why = f"the {result.outcome} result {event} could not be raised: {exc}"
        bring_forward(services.ledger, instance, result.orchestration_id, actor=actor, why=why)
        return "late-result-ignored"
    log.info("raised %s (%s) on %s", event, result.outcome, result.orchestration_id)
    return "raised"


HandleOutcome = Literal[
    "raised", "late-result-ignored", "unconfirmed-result-ignored", "result-mismatch", "parked", "dropped"
]


def confirm(result: ResultMessage, r: StepRecord) -> tuple[ResultMessage | None, str, str]:
    """The ledger's version of ``result`` if row ``r`` records that outcome for that very attempt, else
    ``(None, audit action, why)``."""
    # a late reply of a step undone since is still true about its attempt (its orchestration is gone)
    found = recorded_outcome(r, result.kind, result.attempt, undone_succeeded=True)
    where = f"ledger says {r.status.value} at attempt {r.attempt}"
    if result.kind == "compensate":
        where += f", compensation attempt {r.compensation_attempt} ({r.compensation_status})"
    if not found.exact or found.state == "unconfirmed":
        return None, "unconfirmed-result-ignored", f"no outcome recorded for this attempt ({where})"
    if result.outcome == "succeeded":
        if found.state != "succeeded":
            return None, "result-mismatch", f"message says succeeded; {where}"
        # (a compensator's output is not kept in the ledger: only its success is)
        if result.kind == "work" and (result.output or {}) != (found.output or {}):
            return None, "result-mismatch", "message's output differs from the output the ledger recorded"
    elif found.state == "succeeded":
        return None, "result-mismatch", f"message says failed; {where}"
    # Once a step is being undone the ledger names its compensation's orchestration, not the one that
    # waited for this work result: only then is the message's own (verified-by-the-scheduler) target used.
    undone = result.kind == "work" and r.status in UNDOING
    target = result.orchestration_id if undone or not r.orchestration_id else r.orchestration_id
    if target != result.orchestration_id:
        return None, "result-mismatch", f"message names orchestration {result.orchestration_id!r}"
    confirmed = result.model_copy(
        update={
            "orchestration_id": target,
            "output": found.output if found.state == "succeeded" else None,
            "error": None if found.state == "succeeded" else (found.error or result.error),
            "permanent": found.permanent,
            "ledger": None,  # read, not taken provisionally: the event carries the ledger's verdict
        }
    )
    return ResultMessage.model_validate(confirmed.model_dump()), "", ""


async def handle_result(
    body: Any, client: EventClient, services: Services, *, message_id: str | None = None, trace: Any = None
) -> HandleOutcome:
    """Handle one result-queue message body; ``trace``: its application properties (the worker's
    span is this one's parent: the reply stays in the workflow's trace)."""
    queue = services.settings.result_queue
    if is_doctor_probe(body):  # `sas doctor`'s probe whose cancel did not take: nothing to do or park
        log.info("dropped a sas doctor probe delivered on %s (message %s)", queue, message_id)
        return "dropped"
    fields = body if isinstance(body, dict) else {}
    with tracing.consumer_span(
        f"process {queue}",
        transport=services.settings.transport,
        queue=queue,
        message_id=message_id,
        body=body,
        parent=trace,
        kind=fields.get("kind"),
        outcome=fields.get("outcome"),
    ):
        if fields.get("type") == "heartbeat":  # a message-only agent's
            return await handle_heartbeat(body, services, client, message_id=message_id)  # type: ignore[return-value]
        park_as = {"source": "result", "actor": ACTOR, "message_id": message_id}
        result = parse_or_park(ResultMessage, body, services, **park_as)
        if isinstance(result, str):
            return "parked"
        if result.reply_token is not None:  # a message-only agent's reply: recorded for it first
            result, refused = record_reply(result, services)
            if refused is not None:
                return refused  # type: ignore[return-value]
        keyed = result.ledger is not None and bool(result.ledger.etags.get("instance"))
        if keyed and result.kind == "work" and result.outcome == "succeeded":
            # A success recorded with a basis row goes unread: the scheduler's next write proves it. An
            # orchestration that is gone may have been replaced by a resumed one the ledger names: read.
            raised = await raise_result_event(result, client, services, quiet_if_gone=True)
            if raised == "raised":
                return raised
        try:  # the instance record and what its row watches, in the same request: they ride on the event
            ids = (result.instance_id, result.step_id)
            record, handle, watched = services.ledger.read_step_instance_and_watched(*ids)
        except (StepNotFound, InvalidLedgerInput) as exc:
            park(services, source="result", reason=f"result for no known step: {exc}", body=body, actor=ACTOR)
            return "parked"
        confirmed, action, why = confirm(result, record)
        if confirmed is None:
            log.warning("result %s/%s#%d ignored: %s", *ids, result.attempt, why)
            why = f"{result.kind} result for attempt {result.attempt} ({result.outcome}) ignored: {why}"
            audit(services.ledger, record, ACTOR, action, why, result.attempt)
            return action  # type: ignore[return-value]
        # with the ledger's verdict, the attempt's token and the instance's snapshot (with the steps its
        # row watches), the orchestrator need not read the ledger again; unless no token or outcome
        instance = handle.record if handle is not None else None
        token = attempt_token(record, confirmed.kind, confirmed.attempt)
        verdict = verdict_of(recorded_outcome(record, confirmed.kind, confirmed.attempt))
        if token is not None and verdict.state != "unconfirmed":
            snapshot = (
                None if instance is None else {**instance_snapshot(instance), WATCHED_KEY: list(watched)}
            )
            fields = confirmed.model_dump()
            confirmed = ConfirmedResult(**fields, ledger_token=token, verdict=verdict, instance=snapshot)
        return await raise_result_event(confirmed, client, services, instance=instance)


async def _on_message(incoming: Incoming, client: EventClient) -> None:
    trace = incoming.application_properties
    await handle_result(incoming.body, client, get_services(), message_id=incoming.message_id, trace=trace)


def register_result_handler(blueprint: Any, kind: TransportKind) -> Any:
    """Add ``agent_result_handler`` with the trigger of ``kind`` to ``blueprint``."""
    return bind_reader(
        blueprint, kind, RESULT_FUNCTION, "%RESULT_QUEUE_NAME%", _on_message, dead_letter=False
    )


agent_result_handler = register_result_handler(bp, transport_kind())
