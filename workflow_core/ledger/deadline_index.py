"""The deadline index: the steps' rows in the index table, the watchdog's only way to find them
(the order of writes on a deadline change: ``store.py``)."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.data.tables import TableTransactionError

from workflow_core.ledger.entities import MAX_BATCH, _deadline_key
from workflow_core.ledger.errors import InvalidLedgerInput, StepNotFound
from workflow_core.ledger.index_keys import overdue_upper_partition
from workflow_core.ledger.instance_index import INSTANCE_INDEX_PREFIX
from workflow_core.ledger.model import StepRecord, require_aware
from workflow_core.ledger.watch import has_own_row

log = logging.getLogger("workflow_core.ledger.store")

ATTENTION_PARTITION = "attention"  # sorts after every digit bucket, so overdue() never reads it
# Index rows retired while ``StepLedger.deferred_index_deletes`` is active (None: delete at once).
_DEFERRED: ContextVar[list[str] | None] = ContextVar("deferred_index_deletes", default=None)


class DeadlineIndexMixin:
    @contextlib.contextmanager
    def deferred_index_deletes(self):
        """Delete the index rows retired inside on the way out, one batch per partition (off the
        critical path; one request per partition, not per step). A crash before the flush leaves
        stray rows, which ``overdue`` removes when they fall due."""
        pending: list[str] = []
        token = _DEFERRED.set(pending)
        try:
            yield pending
        finally:
            _DEFERRED.reset(token)
            self._delete_index_rows(pending)

    def _retire_index_row(self, index_key: str) -> None:
        pending = _DEFERRED.get()
        if pending is not None:
            pending.append(index_key)
        else:
            self._delete_index_row(index_key)

    def _delete_index_rows(self, keys: Sequence[str]) -> None:
        by_partition: dict[str, list[str]] = {}
        for key in dict.fromkeys(k for k in keys if has_own_row(k)):
            partition, _, row = key.partition("|")
            by_partition.setdefault(partition, []).append(row)
        for partition, rows in by_partition.items():
            for start in range(0, len(rows), MAX_BATCH):
                chunk = rows[start : start + MAX_BATCH]
                if len(chunk) == 1:
                    self._delete_index_row(f"{partition}|{chunk[0]}")
                    continue
                try:
                    self._index.submit_transaction(
                        [("delete", {"PartitionKey": partition, "RowKey": r}) for r in chunk]
                    )
                except (TableTransactionError, HttpResponseError):  # one already gone: one by one
                    for r in chunk:
                        self._delete_index_row(f"{partition}|{r}")

    def _delete_index_row(self, index_key: str | None) -> None:
        if not has_own_row(index_key):  # none, or watched through the instance's row
            return
        partition, _, row = index_key.partition("|")
        try:
            self._index.delete_entity(partition, row)
        except ResourceNotFoundError:
            pass
        except HttpResponseError as exc:  # stays as a stray row; overdue() removes it later
            log.warning("could not delete deadline-index row %s: %s", index_key, exc)

    def overdue(self, now: datetime, limit: int = 100) -> list[StepRecord]:
        """Steps due by ``now``, earliest first, at most ``limit``: reads only index rows in buckets up
        to ``now``, then verifies each against its step; stray index rows are deleted."""
        now = require_aware(now, "now")
        if limit < 1:
            raise InvalidLedgerInput(f"limit must be >= 1, got {limit}")
        found: list[StepRecord] = []
        stale: list[str] = []
        self.stats.queries += 1
        pages = self._index.query_entities(
            "PartitionKey le @bucket and RowKey le @key",
            parameters={"bucket": overdue_upper_partition(now), "key": _deadline_key(now) + "~~"},
            results_per_page=min(max(limit, 10), 1000),
        )
        for row in pages:
            self.stats.index_entities_read += 1
            key = f"{row['PartitionKey']}|{row['RowKey']}"
            try:
                record = self.get(row["InstanceId"], row["StepId"])
            except StepNotFound:
                record = None
            if record is None or record.index_key != key:
                stale.append(key)
                self.stats.stale_index_rows_removed += 1
                continue
            if record.is_overdue(now):
                found.append(record)
                if len(found) >= limit:
                    break
        self._delete_index_rows(stale)
        # Rows come minute by minute, and within a minute shard by shard: sort what was found.
        return sorted(found, key=lambda r: r.deadline or now)

    def needing_attention(self, limit: int = 100) -> list[StepRecord]:
        """Steps no automation will move on from (CompensationFailed): the operator's inbox. A row its
        step no longer names is deleted."""
        self.stats.queries += 1
        result: list[StepRecord] = []
        for row in self._index.query_entities(
            "PartitionKey eq @p", parameters={"p": ATTENTION_PARTITION}, results_per_page=limit
        ):
            key = f"{row['PartitionKey']}|{row['RowKey']}"
            try:
                record = self.get(row["InstanceId"], row["StepId"])
            except StepNotFound:
                record = None
            if record is None or record.index_key != key:
                self._delete_index_row(key)
                continue
            result.append(record)
            if len(result) >= limit:
                break
        return result

    def count_in_flight(self, cap: int = 5000) -> int:
        """Work in flight the watchdog watches (the ``sas.work.in_flight`` gauge; never decided on):
        steps Dispatched or Running with a row of their own, plus supervised instances (their row
        watches their steps), from index rows only, at most ``cap``."""
        # Two range queries, not one with "or": an "or" across partition ranges makes the service
        # scan the whole table, the operators' listing partition (one row per instance ever) included.
        ranges = (
            (
                "PartitionKey lt @letters and ( Status eq @dispatched or Status eq @running )",
                {"letters": "a", "dispatched": "Dispatched", "running": "Running"},
            ),
            (
                "PartitionKey ge @lo and PartitionKey lt @hi and Kind eq @instance",
                {"lo": INSTANCE_INDEX_PREFIX, "hi": f"{INSTANCE_INDEX_PREFIX}~", "instance": "instance"},
            ),
        )
        counted = 0
        for query, parameters in ranges:
            self.stats.queries += 1
            rows = self._index.query_entities(
                query, parameters=parameters, select=["Status"], results_per_page=1000
            )
            counted += sum(1 for _ in itertools.islice(rows, cap - counted))
        return counted

    def index_rows(self) -> list[dict[str, Any]]:
        """Every deadline-index row (consistency checks; a full scan)."""
        return [dict(e, _key=f"{e['PartitionKey']}|{e['RowKey']}") for e in self._index.list_entities()]
