"""Bulk operations: one operator action over every instance matching a filter, after an outage.

The operation is recorded in the ledger *first* (partition ``~bulk``: filter, action, actor, reason,
cursor), then each matching instance is acted on individually through the same code as a single
action (:mod:`supervisor.operator`), so the same state machine, ETag guards and audit rows apply; each
audit row names the operation (``[bulk <id>]`` in its reason). Exactly once per instance, across a
crash anywhere: before acting, the runner looks for its outcome row (partition ``~bulk~<id>``, RowKey
the instance id: the key derived from the bulk id and the instance) and then for an audit row naming
the operation, which the action writes in the same transaction as its move; a move found there was
done by an interrupted run and is only recorded. The cursor (the listing's continuation token) moves
after each page, so a restart goes over at most one page again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import UpdateMode
from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus
from pydantic import BaseModel, ConfigDict, Field

from supervisor import operator
from workflow_core import clock
from workflow_core.ledger import InstanceRecord, StepLedger, StepStatus

_ACTIVE = {
    OrchestrationRuntimeStatus.Pending,
    OrchestrationRuntimeStatus.Running,
    OrchestrationRuntimeStatus.ContinuedAsNew,
}
BULK_PARTITION = "~bulk"
BULK_ACTIONS = ("retry", "skip", "compensate", "resume", "stop", "cancel")
PAGE = 50
ACTED, SKIPPED, FAILED, WOULD_ACT = "acted", "skipped", "failed", "would-act"
Terminate = Callable[[str, str], Awaitable[None]]  # (instance id, reason): end its orchestration


class BulkFilter(BaseModel):
    """Which instances: every field given must match (``error_contains``: in its or a step's last
    error, its outcome or attention reason, case-insensitive)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workflow: str | None = Field(default=None, max_length=200)
    version: str | None = Field(default=None, max_length=200)
    status: str | None = Field(default=None, max_length=40)
    needs_attention: bool | None = None
    error_contains: str | None = Field(default=None, min_length=1, max_length=500)
    started_after: datetime | None = None
    started_before: datetime | None = None
    business_key_prefix: str | None = Field(default=None, min_length=1, max_length=200)

    def listing(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "version": self.version,
            "status": self.status,
            "needs_attention": self.needs_attention,
            "started_from": self.started_after,
            "started_to": self.started_before,
            "business_key_prefix": self.business_key_prefix,
        }

    def matches(self, record: InstanceRecord, ledger: StepLedger) -> bool:
        if not self.error_contains:
            return True
        errors = [record.last_error, record.outcome, record.attention_reason]
        errors += [s.last_error for s in ledger.list_for_instance(record.instance_id)]
        return self.error_contains.lower() in " ".join(filter(None, errors)).lower()


@dataclass
class BulkOperation:
    bulk_id: str
    action: str
    filter: BulkFilter
    reason: str
    actor: str
    created_at: datetime
    dry_run: bool = False
    cursor: str | None = None
    done: bool = False
    etag: str | None = None

    def entity(self) -> dict[str, Any]:
        return {
            "PartitionKey": BULK_PARTITION,
            "RowKey": self.bulk_id,
            "Action": self.action,
            "Filter": self.filter.model_dump_json(exclude_none=True),
            "Reason": self.reason,
            "Actor": self.actor,
            "CreatedAt": self.created_at,
            "DryRun": self.dry_run,
            "Cursor": self.cursor or "",
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
            dry_run=bool(e.get("DryRun")),
            cursor=e.get("Cursor") or None,
            done=bool(e.get("Done")),
            etag=e.metadata.get("etag"),
        )

    @property
    def marker(self) -> str:
        return f"[bulk {self.bulk_id}]"


def _outcomes_partition(bulk_id: str) -> str:
    return f"{BULK_PARTITION}~{bulk_id}"


class BulkStore:
    """Bulk operations and their per-instance outcomes, in the ledger table."""

    def __init__(self, ledger: StepLedger) -> None:
        self.ledger = ledger
        self.table = ledger.table_client()

    def create(
        self, action: str, flt: BulkFilter, *, reason: str, actor: str, dry_run: bool = False
    ) -> BulkOperation:
        if action not in BULK_ACTIONS:
            raise operator.OperatorError(f"no bulk action {action!r}; actions: {', '.join(BULK_ACTIONS)}")
        reason = operator.required_reason(reason)
        bulk_id = clock.utcnow().strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(4)
        op = BulkOperation(bulk_id, action, flt, reason, actor, clock.utcnow(), dry_run=dry_run)
        meta = self.table.create_entity(op.entity())
        op.etag = meta.get("etag")
        return op

    def get(self, bulk_id: str) -> BulkOperation | None:
        try:
            return BulkOperation.from_entity(self.table.get_entity(BULK_PARTITION, bulk_id))
        except ResourceNotFoundError:
            return None

    def unfinished(self) -> list[BulkOperation]:
        rows = self.table.query_entities(
            "PartitionKey eq @pk and Done eq false", parameters={"pk": BULK_PARTITION}
        )
        return [BulkOperation.from_entity(e) for e in rows]

    def save(self, op: BulkOperation) -> None:
        """The cursor moves on (ETag-guarded: two runners of one operation never both move it)."""
        meta = self.table.update_entity(
            op.entity(), mode=UpdateMode.REPLACE, etag=op.etag, match_condition=MatchConditions.IfNotModified
        )
        op.etag = meta.get("etag")

    def outcome(self, bulk_id: str, instance_id: str) -> dict[str, Any] | None:
        try:
            return dict(self.table.get_entity(_outcomes_partition(bulk_id), instance_id))
        except ResourceNotFoundError:
            return None

    def record(self, bulk_id: str, instance_id: str, result: str, why: str = "") -> None:
        entity = {
            "PartitionKey": _outcomes_partition(bulk_id),
            "RowKey": instance_id,
            "Result": result,
            "Why": why[:2000],
            "At": clock.utcnow(),
        }
        with contextlib.suppress(ResourceExistsError):  # an interrupted run's word stands
            self.table.create_entity(entity)

    def outcomes(self, bulk_id: str) -> list[dict[str, Any]]:
        rows = self.table.query_entities(
            "PartitionKey eq @pk", parameters={"pk": _outcomes_partition(bulk_id)}
        )
        return [{"instanceId": e["RowKey"], "result": e["Result"], "why": e.get("Why") or None} for e in rows]

    def progress(self, op: BulkOperation, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The operation and its outcomes (``rows``: as already read, else read now)."""
        rows = self.outcomes(op.bulk_id) if rows is None else rows
        counts = {k: sum(1 for r in rows if r["result"] == k) for k in (ACTED, SKIPPED, FAILED, WOULD_ACT)}
        return {
            "id": op.bulk_id,
            "action": op.action,
            "filter": json.loads(op.filter.model_dump_json(exclude_none=True)),
            "reason": op.reason,
            "actor": op.actor,
            "createdAt": op.created_at.isoformat(),
            "dryRun": op.dry_run,
            "done": op.done,
            "processed": len(rows),
            "counts": counts,
            "acted": [r["instanceId"] for r in rows if r["result"] == ACTED],
            "wouldAct": [r["instanceId"] for r in rows if r["result"] == WOULD_ACT],
            "skipped": [
                {"instanceId": r["instanceId"], "why": r["why"]} for r in rows if r["result"] == SKIPPED
            ],
            "failed": [
                {"instanceId": r["instanceId"], "why": r["why"]} for r in rows if r["result"] == FAILED
            ],
        }


def durable_terminate(client: Any) -> Terminate:
    """End an instance's orchestration through ``client`` if it is still active (stop, cancel)."""

    async def terminate(instance_id: str, reason: str) -> None:
        status = await client.get_status(instance_id)
        if status is not None and status.runtime_status in _ACTIVE:
            await client.terminate(instance_id, reason)

    return terminate


def _why(row: dict[str, Any]) -> dict[str, Any]:
    return {"instanceId": row["instanceId"], "why": row["why"]}


def _failed_step(ledger: StepLedger, instance_id: str, statuses: Iterable[StepStatus]) -> str:
    wanted = set(statuses)
    for step in ledger.list_for_instance(instance_id):
        if step.status in wanted:
            return step.step_id
    raise operator.OperatorError(
        f"no step of {instance_id!r} is {' or '.join(sorted(s.value for s in wanted))}"
    )


def act_on(ledger: StepLedger, op: BulkOperation, instance_id: str) -> bool:
    """The single action's ledger move, its audit reason naming the operation. True: the
    orchestration must be ended next (stop, cancel)."""
    reason = f"{op.reason} {op.marker}"
    user = op.actor.removeprefix("operator:")
    if op.action in ("retry", "skip"):  # the instance's failed step (what a retry accepts)
        step_id = _failed_step(ledger, instance_id, operator.RETRY.targets)
        apply = operator.retry_step if op.action == "retry" else operator.skip_step
        apply(ledger, instance_id, step_id, user=user, reason=reason)
        return False
    if op.action == "compensate":
        steps = ledger.list_for_instance(instance_id)
        failed = [s for s in steps if s.status in (StepStatus.FAILED, StepStatus.TIMED_OUT)]
        done = [s for s in steps if s.status is StepStatus.SUCCEEDED]
        target = (failed or done[-1:] or [None])[0]
        if target is None:
            raise operator.OperatorError(f"nothing to compensate in {instance_id!r}")
        operator.request_compensation(ledger, instance_id, target.step_id, user=user, reason=reason)
        return False
    operator.move_instance(ledger, instance_id, op.action, reason=reason, actor=op.actor)
    return op.action in ("stop", "cancel")


def _already_acted(ledger: StepLedger, op: BulkOperation, instance_id: str) -> bool:
    return any(op.marker in (entry.reason or "") for entry in ledger.audit_trail(instance_id))


async def run(
    store: BulkStore,
    op: BulkOperation,
    *,
    rate_per_second: float = 20,
    max_instances: int | None = None,
    terminate: Terminate | None = None,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> BulkOperation:
    """Carry ``op`` on from its cursor: at most ``max_instances`` (None: to the end), at most
    ``rate_per_second``. Returns it as saved (``done`` at the end of the listing)."""
    ledger = store.ledger
    handled = 0
    gap = 1.0 / rate_per_second if rate_per_second > 0 else 0.0
    while not op.done:
        page, token = ledger.list_instances(**op.filter.listing(), limit=PAGE, continuation=op.cursor)
        for record in page:
            if max_instances is not None and handled >= max_instances:
                return op
            iid = record.instance_id
            if store.outcome(op.bulk_id, iid) is not None or not op.filter.matches(record, ledger):
                continue
            handled += 1
            if op.dry_run:
                store.record(op.bulk_id, iid, WOULD_ACT)
                continue
            if _already_acted(ledger, op, iid):
                store.record(op.bulk_id, iid, ACTED, "acted before an interruption")
                continue
            try:
                ends = act_on(ledger, op, iid)
                if ends and terminate is not None:
                    await terminate(iid, f"operator {op.action} by {op.actor}: {op.reason} {op.marker}")
            except operator.OperatorError as exc:
                store.record(op.bulk_id, iid, SKIPPED, str(exc))
            except Exception as exc:  # one instance's failure never stops the operation
                store.record(op.bulk_id, iid, FAILED, f"{type(exc).__name__}: {exc}")
            else:
                store.record(op.bulk_id, iid, ACTED)
            if gap:
                await sleep(gap)
        op.cursor = token
        op.done = token is None
        store.save(op)
    return op
