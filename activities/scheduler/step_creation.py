"""``create_workflow_steps``: an orchestration's first activity writes all its steps, Pending.

It also adopts the instance record for the orchestration (in the steps' batch when it can), so the
watchdog knows which orchestration owns the instance from the start.
"""

from __future__ import annotations

import functools
from typing import Any

from activities.common import now, retry_on_conflict
from activities.scheduler.inputs import ACTOR, CreateStepsInput
from activities.scheduler.instances import promise
from workflow_core.ledger import InstanceConflict, InstanceHandle
from workflow_core.runtime import Services
from workflow_core.workflows.model import new_steps


def create_workflow_steps(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """All steps of the instance's workflow (its pinned version), Pending, in one idempotent ledger write."""
    from workflow_core.workflows.store import definition_for

    args = CreateStepsInput.model_validate(payload)
    definition = definition_for(args.workflow, args.version, services.definitions)
    orchestration_id = args.orchestration_id or args.instance_id
    ledger, grace = services.ledger, services.settings.watchdog_grace_seconds
    # Adopted in the steps' own batch; when the steps exist already (a re-run) or the instance moved
    # meanwhile, adopting is its own guarded write.
    found = ledger.find_instance(args.instance_id)
    handle = InstanceHandle(found) if found is not None and found.supervised else None
    pinned = {"version": args.version} if args.version else {}  # the definition version the run keeps
    fields = {"actor": ACTOR, "orchestration_id": orchestration_id, **pinned}
    create = functools.partial(
        ledger.create_steps, args.instance_id, definition.name, new_steps(definition), **fields
    )
    try:
        records = create(instance=handle, instance_changes=_adoption(handle, orchestration_id, grace))
    except InstanceConflict:
        handle = None
        records = create()
    if handle is None or handle.record is found:  # not adopted in the batch: on its own

        def adopt(record: Any) -> None:
            if record is not None and record.supervised:
                changes = _adoption(InstanceHandle(record), orchestration_id, grace)
                reason = f"orchestration {orchestration_id} created the steps"
                ledger.update_instance(record, actor=ACTOR, reason=reason, **changes)

        read = functools.partial(ledger.find_instance, args.instance_id)
        retry_on_conflict(read, adopt, what=f"adopt {args.instance_id}")
    return {
        "instance_id": args.instance_id,
        "workflow": definition.name,
        "steps": [{"step_id": r.step_id, "status": r.status.value, "attempt": r.attempt} for r in records],
    }


def _adoption(handle: InstanceHandle | None, orchestration_id: str, grace: float) -> dict[str, Any]:
    """The orchestration owns the instance and promises to dispatch at once, never *sooner* than the
    starter's promise: the index row stays put (a dead scheduler is found ``SCHEDULER_START_SECONDS`` on)."""
    promised = promise(handle, now(), grace, orchestration_id, keep_later=True)
    return {} if handle is None else {"orchestration_id": orchestration_id, **(promised or {})}
