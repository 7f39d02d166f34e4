"""Bulk operations: one operator action over every instance matching a filter, after an outage.

What is shown is what is done: the dry run (:func:`preview`) and the act apply one check
(:func:`eligibility`, asking ``instance_state``). A real operation is recorded (``~bulk``), then
*frozen*: the matching instances are written as its snapshot (``~bulk~<id>``, one ``pending`` row
each) before anything is acted on, so an instance that matches later is never swept up. Each runner
(the request, the timer, ``sas bulk``) claims a pending row (ETag), re-reads and re-checks the
instance, acts conditional on the record as checked, and records the outcome on its row. Each audit
row names the operation (``[bulk <id>]``), so an action whose runner died is recorded, not repeated.
Canary runs are never listed (docs/operations.md, "Bulk operations").

Idempotency keys are the single actions' rows (``workflow_core.ledger.idempotency``), claimed API-wide
with :data:`KEYS_PARTITION` as their "instance", so a key is used by one kind of request only; a key
stands for :func:`request_of` the request. A dry run takes no key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from azure.core.exceptions import ResourceModifiedError
from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus
from pydantic import BaseModel, ConfigDict, Field, field_validator

from supervisor import operator
from workflow_core import clock
from workflow_core.canary import CANARY_WORKFLOWS
from workflow_core.ledger import InstanceRecord, InstanceStatus, StepLedger, StepRecord
from workflow_core.ledger.bulk_rows import CLAIMED, PENDING, BulkRows
from workflow_core.ledger.families import BULK_KEYS_PARTITION
from workflow_core.ledger.instance_state import refusal

_ACTIVE = {
    OrchestrationRuntimeStatus.Pending,
    OrchestrationRuntimeStatus.Running,
    OrchestrationRuntimeStatus.ContinuedAsNew,
}
KEYS_PARTITION = BULK_KEYS_PARTITION  # where bulk requests' idempotency keys live
BULK_ACTIONS = ("retry", "skip", "compensate", "resume", "stop", "cancel")
PAGE = 50
ACTED, SKIPPED, NO_LONGER_MATCHES, FAILED = "acted", "skipped", "no-longer-matches", "failed"
RESULTS = (ACTED, SKIPPED, NO_LONGER_MATCHES, FAILED)
Terminate = Callable[[str, str], Awaitable[None]]  # (instance id, reason): end its orchestration


class BulkFilter(BaseModel):
    """Which instances: every field given must match (``error_contains``: case-insensitive, in its or
    a step's last error, its outcome or attention reason). Canary runs never match."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workflow: str | None = Field(default=None, max_length=200)
    version: str | None = Field(default=None, max_length=200)
    status: InstanceStatus | None = None
    needs_attention: bool | None = None
    error_contains: str | None = Field(default=None, min_length=1, max_length=500)
    started_after: datetime | None = None
    started_before: datetime | None = None
    business_key_prefix: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("workflow")
    @classmethod
    def _no_canary(cls, value: str | None) -> str | None:
        if value in CANARY_WORKFLOWS:
            raise ValueError(f"{value} runs are the recovery canary's: no bulk action takes them")
        return value

    def listing(self) -> dict[str, Any]:
        """The ledger listing's arguments (``error_contains`` is checked per record)."""
        same = self.model_dump(exclude={"error_contains", "started_after", "started_before"})
        window = {"started_from": self.started_after, "started_to": self.started_before}
        return {**same, **window, "exclude_workflow": CANARY_WORKFLOWS}

    def mismatch(self, record: InstanceRecord, steps: list[StepRecord]) -> str | None:
        """Why ``record`` (with its ``steps``) does not match the listing's condition, or None."""
        started = record.started_at or datetime.min.replace(tzinfo=UTC)
        checks = (
            (self.workflow is None or record.workflow == self.workflow, f"workflow is {record.workflow}"),
            (self.version is None or record.version == self.version, f"version is {record.version}"),
            (self.status is None or record.status is self.status, f"it is {record.status.value}"),
            (
                self.needs_attention is None or record.needs_attention == self.needs_attention,
                f"needs attention is {record.needs_attention}",
            ),
            (record.workflow not in CANARY_WORKFLOWS, "a canary run"),
            (
                self.business_key_prefix is None
                or (record.business_key or "").startswith(self.business_key_prefix),
                "its business key",
            ),
            (self.started_after is None or started >= self.started_after, "it started before the window"),
            (self.started_before is None or started < self.started_before, "it started after the window"),
        )
        why = next((why for ok, why in checks if not ok), None)
        if why is None and self.error_contains:
            errors = [record.last_error, record.outcome, record.attention_reason]
            errors += [s.last_error for s in steps]
            if self.error_contains.lower() not in " ".join(filter(None, errors)).lower():
                why = f"no error contains {self.error_contains!r}"
        return why


def request_of(action: str, flt: BulkFilter, reason: str) -> str:
    """What an idempotency key stands for, e.g. ``bulk resume 3f2a…`` (a digest: the reason may be long)."""
    canonical = {
        "action": action,
        "filter": flt.model_dump(mode="json", exclude_none=True),
        "reason": reason.strip(),
    }
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    return f"bulk {action} {digest.hexdigest()[:24]}"


@dataclass
class BulkOperation:
    bulk_id: str
    action: str
    filter: BulkFilter
    reason: str
    actor: str
    created_at: datetime
    cursor: str | None = None  # the listing's, while the snapshot is written
    frozen: bool = False  # the snapshot is complete: only its instances are acted on
    done: bool = False
    etag: str | None = None

    def properties(self) -> dict[str, Any]:
        return {
            "Action": self.action,
            "Filter": self.filter.model_dump_json(exclude_none=True),
            "Reason": self.reason,
            "Actor": self.actor,
            "CreatedAt": self.created_at,
            "Cursor": self.cursor or "",
            "Frozen": self.frozen,
            "Done": self.done,
        }

    @classmethod
    def from_entity(cls, e: Any) -> BulkOperation:
        return cls(
            bulk_id=e["RowKey"],
            action=e["Action"],
            filter=BulkFilter.model_validate_json(e["Filter"]),
            reason=e["Reason"],
            actor=e["Actor"],
            created_at=e["CreatedAt"],
            cursor=e.get("Cursor") or None,
            frozen=bool(e.get("Frozen")),
            done=bool(e.get("Done")),
            etag=e.metadata.get("etag"),
        )

    @property
    def marker(self) -> str:
        return f"[bulk {self.bulk_id}]"


class BulkStore:
    """Bulk operations and their instances (rows: ``workflow_core/ledger/bulk_rows.py``)."""

    def __init__(self, ledger: StepLedger, rows: BulkRows | None = None) -> None:
        self.ledger = ledger
        self.rows = rows or BulkRows.of(ledger)

    def create(
        self, action: str, flt: BulkFilter, *, reason: str, actor: str, matched: list[str] | None = None
    ) -> BulkOperation:
        """Record an operation; ``matched``: the instances the operator confirmed (its snapshot)."""
        if action not in BULK_ACTIONS:
            raise operator.OperatorError(f"no bulk action {action!r}; actions: {', '.join(BULK_ACTIONS)}")
        reason = operator.required_reason(reason)
        bulk_id = clock.utcnow().strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(4)
        op = BulkOperation(bulk_id, action, flt, reason, actor, clock.utcnow(), frozen=matched is not None)
        if matched:
            self.rows.freeze(bulk_id, matched)
        op.etag = self.rows.create(bulk_id, op.properties())
        return op

    def get(self, bulk_id: str) -> BulkOperation | None:
        row = self.rows.get(bulk_id)
        return None if row is None else BulkOperation.from_entity(row)

    def unfinished(self) -> list[BulkOperation]:
        return [BulkOperation.from_entity(e) for e in self.rows.unfinished()]

    def save(self, op: BulkOperation) -> None:
        op.etag = self.rows.replace(op.bulk_id, op.properties(), op.etag)

    def progress(self, op: BulkOperation) -> dict[str, Any]:
        rows = self.rows.instance_rows(op.bulk_id)
        by = {r: [e for e in rows if e.get("Result") == r] for r in (*RESULTS, PENDING, CLAIMED)}

        def listed(result: str) -> list[dict[str, Any]]:
            return [
                {"instanceId": e["RowKey"], "why": e.get("Why") or None, "runner": e.get("Runner")}
                for e in by[result]
            ]

        return {
            "id": op.bulk_id,
            "action": op.action,
            "filter": json.loads(op.filter.model_dump_json(exclude_none=True)),
            "reason": op.reason,
            "actor": op.actor,
            "createdAt": op.created_at.isoformat(),
            "dryRun": False,
            "frozen": op.frozen,
            "done": op.done,
            "matched": len(rows),
            "processed": sum(len(by[r]) for r in RESULTS),
            "counts": {r: len(by[r]) for r in (*RESULTS, PENDING)},
            "acted": [e["RowKey"] for e in by[ACTED]],
            "actedBy": {e["RowKey"]: e.get("Runner") for e in by[ACTED]},
            "skipped": listed(SKIPPED),
            "noLongerMatches": listed(NO_LONGER_MATCHES),
            "failed": listed(FAILED),
        }


def durable_terminate(client: Any) -> Terminate:
    """End an instance's orchestration through ``client`` if it is still active (stop, cancel)."""

    async def terminate(instance_id: str, reason: str) -> None:
        status = await client.get_status(instance_id)
        if status is not None and status.runtime_status in _ACTIVE:
            await client.terminate(instance_id, reason)

    return terminate


def eligibility(
    action: str, record: InstanceRecord, steps: list[StepRecord]
) -> tuple[str | None, str | None]:
    """``(why not, None)``, or ``(None, the step it moves or None for an instance action)``."""
    refused = refusal(action, record, steps)
    if refused is not None:
        return refused[1], None
    if action in ("retry", "skip"):
        step = next((s for s in steps if s.status in operator.RETRY.targets), None)
        if step is None:
            wanted = " or ".join(sorted(s.value for s in operator.RETRY.targets))
            return f"no step of {record.instance_id!r} is {wanted}", None
        return None, step.step_id
    if action == "compensate":
        try:
            return None, operator.compensation_target_of(record.instance_id, steps)
        except operator.OperatorError as exc:
            return str(exc), None
    return None, None


def preview(ledger: StepLedger, action: str, flt: BulkFilter) -> dict[str, Any]:
    """The dry run: what a real run would act on and skip (and why), as of now; writes nothing."""
    would_act: list[str] = []
    would_skip: list[dict[str, str]] = []
    token = None
    while True:
        page, token = ledger.list_instances(**flt.listing(), limit=PAGE, continuation=token)
        for record in page:
            steps = ledger.list_for_instance(record.instance_id)
            if flt.mismatch(record, steps) is not None:
                continue
            why, _ = eligibility(action, record, steps)
            if why is None:
                would_act.append(record.instance_id)
            else:
                would_skip.append({"instanceId": record.instance_id, "why": why})
        if token is None:
            break
    return {"action": action, "dryRun": True, "wouldAct": would_act, "wouldSkip": would_skip, "acted": []}


def act_on(ledger: StepLedger, op: BulkOperation, instance_id: str) -> tuple[str, str, bool]:
    """Re-read, re-check and act on the record as checked: ``(result, why, ends its orchestration)``."""
    for _ in range(operator.MAX_RACE_RETRIES):
        record, steps = ledger.read_instance_and_steps(instance_id)
        if record is None:
            return NO_LONGER_MATCHES, "its record is gone", False
        why = op.filter.mismatch(record, steps)
        if why is not None:
            return NO_LONGER_MATCHES, f"no longer matches: {why}", False
        why, step_id = eligibility(op.action, record, steps)
        if why is not None:
            return SKIPPED, why, False
        reason, user = f"{op.reason} {op.marker}", op.actor.removeprefix("operator:")
        try:
            if step_id is not None:
                intent = operator.INTENTS[op.action]
                step = next(s for s in steps if s.step_id == step_id)
                operator.apply_intent(
                    intent, ledger, instance_id, step_id, user=user, reason=reason, instance=record, step=step
                )
            else:
                operator.move_instance(
                    ledger, instance_id, op.action, reason=reason, actor=op.actor, instance=record
                )
        except operator.Changed:
            continue  # changed since it was checked: check again
        return ACTED, "", op.action in ("stop", "cancel")
    return NO_LONGER_MATCHES, "it keeps changing; left as it is", False


def _freeze(store: BulkStore, op: BulkOperation) -> None:
    """Write the snapshot from the cursor on, a page at a time (a lost race: go on from the winner's)."""
    ledger = store.ledger
    while not op.frozen:
        page, token = ledger.list_instances(**op.filter.listing(), limit=PAGE, continuation=op.cursor)
        steps_of = ledger.list_for_instance if op.filter.error_contains else lambda _: []  # read when used
        matched = [r.instance_id for r in page if op.filter.mismatch(r, steps_of(r.instance_id)) is None]
        store.rows.freeze(op.bulk_id, matched)
        op.cursor, op.frozen = token, token is None
        try:
            store.save(op)
        except ResourceModifiedError:
            fresh = store.get(op.bulk_id)
            if fresh is None:
                return
            op.__dict__.update(fresh.__dict__)


async def run(
    store: BulkStore,
    op: BulkOperation,
    *,
    runner: str = "runner",
    rate_per_second: float = 20,
    max_instances: int | None = None,
    terminate: Terminate | None = None,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> BulkOperation:
    """Freeze ``op``'s snapshot, then act on at most ``max_instances`` (None: all) of its pending
    instances, at most ``rate_per_second``; returns it as saved (``done`` when none is left)."""
    runner = f"{runner}-{secrets.token_hex(3)}"
    ledger = store.ledger
    _freeze(store, op)
    handled = 0
    gap = 1.0 / rate_per_second if rate_per_second > 0 else 0.0
    now = clock.utcnow()
    for row in store.rows.instance_rows(op.bulk_id, results=(PENDING, CLAIMED)):
        if row.get("Result") == CLAIMED and not store.rows.stale(row, now):
            continue  # another runner is on it
        if max_instances is not None and handled >= max_instances:
            return op
        claimed = store.rows.claim(row, runner)
        if claimed is None:
            continue  # another runner claimed it first: its outcome is that runner's
        handled += 1
        iid = row["RowKey"]
        # only a claim taken over can have been acted on: a runner that died after acting
        if row.get("Result") == CLAIMED and any(
            op.marker in (e.reason or "") for e in ledger.audit_trail(iid)
        ):
            store.rows.settle(claimed, ACTED, "acted before an interruption")
            continue
        try:
            result, why, ends = act_on(ledger, op, iid)
            if ends and terminate is not None:
                await terminate(iid, f"operator {op.action} by {op.actor}: {op.reason} {op.marker}")
        except operator.OperatorError as exc:
            result, why = SKIPPED, str(exc)
        except Exception as exc:  # one instance's failure never stops the operation
            result, why = FAILED, f"{type(exc).__name__}: {exc}"
        store.rows.settle(claimed, result, why)
        if gap:
            await sleep(gap)
    if not op.done and not store.rows.instance_rows(op.bulk_id, results=(PENDING, CLAIMED)):
        op.done = True
        try:
            store.save(op)
        except ResourceModifiedError:  # the other runner saved it done first
            fresh = store.get(op.bulk_id)
            op.__dict__.update((fresh or op).__dict__)
    return op
