"""Start one workflow instance: the one path every starter takes (the HTTP starter in ``api/handlers.py``,
the recovery canary, bulk operations).

It validates the input against the pinned definition, refuses what the ledger cannot hold, stores
the definition, writes the instance record *before* the orchestration starts (so one that never
starts is still supervised), and opens the instance's trace. What it refuses is a :class:`StartRefused`
whose ``code`` is the HTTP API's problem code; storage failures (``AzureError``) pass through.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from workflow_core import clock, tracing
from workflow_core.contracts import WORKFLOW_ORCHESTRATOR
from workflow_core.ledger import (
    MAX_STEPS_WITH_INSTANCE,
    InstanceAlreadyExists,
    InstanceStatus,
    StepLedger,
    StepStatus,
    encode_json,
    outcome_json,
)
from workflow_core.ledger.known_rows import created_snapshot
from workflow_core.payloads import PayloadTooLarge
from workflow_core.resume import resume_state
from workflow_core.runtime import Services
from workflow_core.workflows import PinnedDefinition, WorkflowInputError, get_workflow, pin
from workflow_core.workflows.model import new_steps

log = logging.getLogger(__name__)

# How long the orchestration may take, after the starter wrote the instance record, to show up (and
# create its steps, when the starter could not) before the watchdog treats it as a scheduler that
# never started (on top of the watchdog's grace).
SCHEDULER_START_SECONDS = 60.0
CHOOSE_ANOTHER = "choose another instance_id, or omit it to get a fresh one"
SINGLE_USE = f"instance ids are single-use: {CHOOSE_ANOTHER}"
ACTIVE_RUNTIME_STATUSES = frozenset({"Pending", "Running", "ContinuedAsNew", "Suspended"})


class StartRefused(Exception):
    """The start is refused; ``code`` is the HTTP API's problem code (``invalid-input``,
    ``input-too-large``, ``instance-exists``, ``durable-unavailable``)."""

    def __init__(self, code: str, message: str, details: list[str], **extra: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.details, self.extra = code, message, details, extra


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def start_instance(
    client: Any,
    services: Services,
    workflow: PinnedDefinition | str,
    given: dict[str, Any],
    *,
    instance_id: str | None = None,
    actor: str = "api:start",
    trace_parent: Mapping[str, str] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> str:
    """Start ``workflow`` (pinned, or a name: its deployed version) on ``given`` as ``instance_id``
    (None: a fresh one, 128 random bits), writing the ledger record first; the instance id.

    All in the span ``sas.workflow.start``, the root of the instance's trace: its parent is the current
    span when one is (the host's invocation span), else ``trace_parent`` (a caller's headers, which
    makes it a server span). The span's context goes into the orchestration input and the instance
    record (``workflow_core.tracing``), never into a decision."""
    pinned = workflow if isinstance(workflow, PinnedDefinition) else pin(get_workflow(workflow))
    definition, name, chosen = pinned.definition, pinned.definition.name, instance_id
    nested = tracing.has_current_span()
    with tracing.span(
        tracing.START_SPAN,
        parent=None if nested else trace_parent,
        kind=SpanKind.SERVER if trace_parent is not None and not nested else SpanKind.INTERNAL,
        attributes={**(attributes or {}), "sas.workflow": name},
    ):
        try:
            validated = definition.validate_input(given)
        except WorkflowInputError as exc:
            message, problems = f"invalid input for workflow {name!r}", exc.problems or [str(exc)]
            raise StartRefused("invalid-input", message, problems, workflow=name) from None
        input_json = await asyncio.to_thread(storable_input, name, validated, services)
        instance_id = chosen or uuid.uuid4().hex
        if chosen:  # an id made here is new: no look-up (the record's insert still guards)
            await ensure_unused(client, services, instance_id)
        # before the record names it, so whoever reads one finds the other (once per version)
        await asyncio.to_thread(services.definitions.save, pinned)
        trace_context = tracing.current()
        trace.get_current_span().set_attribute("sas.instance_id", instance_id)
        rows = await record_instance(
            services, definition, instance_id, validated, input_json, pinned.version, trace_context, actor
        )
        # The definition travels with the input: every replay, generation and child runs on exactly it.
        start = dict(workflow=name, input=validated, version=pinned.version, definition=pinned.data)
        if rows is not None:  # a state says the steps exist: step 0 comes first, no creation
            start["state"] = resume_state(definition, [])
            start["rows"] = rows  # their versions: first dispatches write unread
        if trace_context:  # observability data for the orchestrators to pass on (workflow_core.tracing)
            start[tracing.TRACE_FIELD] = trace_context
        try:
            await client.start_new(WORKFLOW_ORCHESTRATOR, instance_id, start)
        except Exception as exc:
            await _never_started(services, instance_id, exc, actor)
            if "already exists" in str(exc).lower():  # the host answered 409: we lost a race
                raise _exists(instance_id, SINGLE_USE) from None
            log.warning("starting %s for %s failed: %r", WORKFLOW_ORCHESTRATOR, instance_id, exc)
            raise _unavailable("start the workflow", exc) from None
        log.info("started workflow %s as instance %s", pinned.version, instance_id)
        return instance_id


def storable_input(name: str, validated: dict[str, Any], services: Services) -> str:
    """The input as the ledger stores it (inline, or a blob reference when its JSON is larger than a
    ledger property), or ``input-too-large`` over ``MAX_PAYLOAD_BYTES``: the instance record keeps it
    (and a resume restarts from it), so input the app cannot carry must be refused before anything is
    written or started, not discovered steps later."""
    try:
        services.payloads.check_size(validated, "the input")
    except PayloadTooLarge as exc:
        hint = f"{exc}: pass larger data by reference (e.g. a blob URL) instead"
        too_large = f"input of workflow {name!r} is too large"
        raise StartRefused("input-too-large", too_large, [hint], limit=exc.limit, size=exc.size) from None
    return encode_json(services.payloads.stored(validated))


async def record_instance(
    services: Services,
    definition: Any,
    instance_id: str,
    validated: dict[str, Any],
    input_json: str,
    version: str,
    trace_context: dict[str, str] | None = None,
    actor: str = "api:start",
) -> dict[str, Any] | None:
    """The instance record (a used id is ``instance-exists``), with its steps, Pending, in the same
    transaction when they fit one: the orchestration then starts without creating them, and a scheduler
    that never starts is resumed onto step rows that exist. The versions written when the steps went
    with it (``orchestrators.state.StartedRows``: the record's snapshot, each step's ETag), else None."""
    steps = new_steps(definition) if len(definition.steps) <= MAX_STEPS_WITH_INSTANCE else None
    grace = services.settings.watchdog_grace_seconds
    deadline = clock.utcnow() + timedelta(seconds=SCHEDULER_START_SECONDS + grace)

    def create() -> Any:
        return services.ledger.create_instance_with_steps(
            instance_id,
            definition.name,
            actor=actor,
            input_json=input_json,
            scheduler_deadline=deadline,
            business_key=definition.business_key_of(validated),
            max_resumes=definition.max_resumes,
            on_scheduler_lost=definition.on_scheduler_lost,
            version=version,
            steps_due_after_seconds=definition.shortest_deadline_seconds,
            steps=steps,
            **tracing.ledger_fields(trace_context),
        )

    try:
        record, step_etags = await asyncio.to_thread(create)
    except InstanceAlreadyExists as exc:
        raise _exists(instance_id, f"{exc}; {SINGLE_USE}") from None
    return None if steps is None else {"instance": created_snapshot(record), "steps": step_etags}


async def _never_started(services: Services, instance_id: str, exc: BaseException, actor: str) -> None:
    """The host refused the start: the record must not make the watchdog start it later behind the
    caller's back (they were told it failed and may retry under another id). The steps the starter
    wrote with it never ran: Cancelled too, so no view shows them waiting."""

    def cancel(ledger: StepLedger) -> None:
        record = ledger.find_instance(instance_id)
        if record is None or record.status is not InstanceStatus.RUNNING:
            return
        why = f"the orchestration could not be started: {describe_error(exc)}"
        outcome = outcome_json("cancelled", error=describe_error(exc))
        ledger.transition_instance(record, InstanceStatus.CANCELLED, actor=actor, reason=why, outcome=outcome)
        for step in ledger.list_for_instance(instance_id):
            if step.status is StepStatus.PENDING:
                ledger.transition(step, StepStatus.CANCELLED, actor=actor, reason=why)

    try:
        await asyncio.to_thread(cancel, services.ledger)
    except Exception:  # the watchdog starts it at its scheduler deadline instead: logged, not hidden
        log.exception("could not cancel the record of %s after a failed start", instance_id)


async def ensure_unused(client: Any, services: Services, instance_id: str) -> None:
    """``instance-exists`` unless the id is new to both the Durable task hub and the ledger.

    Instance ids are single-use even after the orchestration finished: the ledger rows of a finished
    run are settled (Succeeded, Compensated...) and a new run under the same id could not dispatch them.
    """

    async def durable_status() -> Any:
        try:
            return await client.get_status(instance_id)
        except Exception as exc:
            log.warning("Durable Functions client call failed (check the instance id): %r", exc)
            raise _unavailable("check the instance id", exc) from None

    def ledger_steps() -> list[Any]:  # a frame of its own: the request counter names its read by it
        return services.ledger.list_for_instance(instance_id)

    status, steps = await asyncio.gather(durable_status(), asyncio.to_thread(ledger_steps))
    if status:
        runtime = getattr(status.runtime_status, "value", None) or "unknown"
        state = "is still running" if runtime in ACTIVE_RUNTIME_STATUSES else f"exists ({runtime})"
        detail = f"an orchestration with this id {state}; {SINGLE_USE}"
        raise _exists(instance_id, detail, runtimeStatus=runtime)
    if steps:
        held = f"the step ledger already holds {len(steps)} steps of workflow {steps[0].workflow_name!r}"
        raise _exists(instance_id, f"{held} for this id; {CHOOSE_ANOTHER}")


def _unavailable(doing: str, exc: BaseException) -> StartRefused:
    message = f"could not {doing}: the Durable Functions host call failed"
    return StartRefused("durable-unavailable", message, [describe_error(exc)])


def _exists(instance_id: str, detail: str, **extra: str) -> StartRefused:
    message = f"workflow instance {instance_id!r} already exists"
    return StartRefused("instance-exists", message, [detail], instanceId=instance_id, **extra)
