"""``create_workflow_steps``: an orchestration's first activity writes all its steps, Pending.

Kept apart from the per-step activities because it is the one write per workflow rather than per
step: it also adopts the instance record for the orchestration (one batch with the steps when it
can, a guarded write of its own when the steps exist already), so the watchdog knows which
orchestration owns the instance from the start.
"""

from __future__ import annotations

import functools
from typing import Any

from activities.common import as_dict, now, retry_on_conflict
from activities.scheduler.inputs import ACTOR, CreateStepsInput
from activities.scheduler.instances import with_promise
from workflow_core import contracts as c
from workflow_core.ledger import InstanceConflict, InstanceHandle
from workflow_core.runtime import Services
from workflow_core.workflows.step_rows import new_steps


def create_workflow_steps(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """All steps of the instance's workflow (its pinned version), Pending, in one idempotent ledger write."""
    from workflow_core.workflows.store import definition_for

    args = CreateStepsInput.model_validate(as_dict(payload, c.ACTIVITY_CREATE_STEPS))
    definition = definition_for(args.workflow, args.version, services.definitions if args.version else None)
    steps = new_steps(definition)
    orchestration_id = args.orchestration_id or args.instance_id
    pinned = {"version": args.version} if args.version else {}
    ledger = services.ledger
    # The instance record is adopted in the steps' own batch (one read, one write); when the steps
    # exist already (a re-run) or the instance moved meanwhile, adopting is its own guarded write.
    found = ledger.find_instance(args.instance_id)
    handle = InstanceHandle(found) if found is not None and found.supervised else None
    adoption = _adoption(handle, orchestration_id, services.settings.watchdog_grace_seconds)
    create = functools.partial(
        ledger.create_steps,
        args.instance_id,
        definition.name,
        steps,
        actor=ACTOR,
        orchestration_id=orchestration_id,
        **pinned,
    )
    try:
        records = create(instance=handle, instance_changes=adoption)
    except InstanceConflict:
        handle = None
        records = create()
    if handle is None or handle.record is found:
        _adopt_instance(services, args.instance_id, orchestration_id)
    return {
        "instance_id": args.instance_id,
        "workflow": definition.name,
        "steps": [{"step_id": r.step_id, "status": r.status.value, "attempt": r.attempt} for r in records],
    }


def _adoption(handle: InstanceHandle | None, orchestration_id: str, grace: float) -> dict[str, Any]:
    """The instance changes of an orchestration that showed up: it owns the instance and promises
    to dispatch at once.

    The promise never *shortens* the starter's (the start's own deadline, a minute or so ahead): the
    instance's index row then stays where the starter put it instead of being moved earlier (an
    insert and a delete per workflow). A scheduler that dies right after creating the steps is
    found at the starter's deadline, at most ``api.start.SCHEDULER_START_SECONDS`` later than otherwise."""
    if handle is None:
        return {}
    promised = with_promise(handle, now(), grace, orchestration_id, keep_later=True)
    return {"orchestration_id": orchestration_id, **(promised.get("instance_changes") or {})}


def _adopt_instance(services: Services, instance_id: str, orchestration_id: str) -> None:
    """Adopt the instance on its own (see :func:`_adoption`)."""
    ledger = services.ledger
    grace = services.settings.watchdog_grace_seconds

    def decide(record: Any) -> None:
        if record is None or not record.supervised:
            return
        ledger.update_instance(
            record,
            actor=ACTOR,
            reason=f"orchestration {orchestration_id} created the steps",
            **_adoption(InstanceHandle(record), orchestration_id, grace),
        )

    retry_on_conflict(lambda: ledger.find_instance(instance_id), decide, what=f"adopt {instance_id}")
