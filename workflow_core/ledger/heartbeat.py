"""Heartbeats: a step's deadline moved on from the storage service's clock, never a writer's."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from workflow_core import clock
from workflow_core.ledger.entities import _from_entity
from workflow_core.ledger.errors import ConcurrencyConflict, InvalidLedgerInput, LedgerError, StepNotFound
from workflow_core.ledger.model import (
    DEADLINE_STATUSES,
    StepRecord,
    require_aware,
    validate_instance_id,
    validate_step_id,
)


class HeartbeatMixin:
    def extend_deadline(
        self,
        record: StepRecord,
        seconds: float,
        *,
        actor: str,
        reason: str = "heartbeat",
        allow_earlier: bool = False,
        now: datetime | None = None,
        record_kept: bool = False,
    ) -> StepRecord:
        """The deadline becomes *trusted now* + ``seconds``, whatever the heartbeating machine's clock
        says; a later deadline is kept unless ``allow_earlier``, with no write unless ``record_kept``
        (then the beat is recorded all the same, in ``last_heartbeat`` and the audit trail). ``now``:
        the service's time of the read that returned ``record`` (:meth:`get_with_service_time`),
        sparing :meth:`trusted_now` a read.
        """
        if not isinstance(seconds, int | float) or seconds != seconds or abs(seconds) > 10 * 365 * 86400:
            raise InvalidLedgerInput(f"extend by {seconds!r}: expected a finite number of seconds")
        if record.status not in DEADLINE_STATUSES:
            raise InvalidLedgerInput(
                f"step {record.step_id!r} is {record.status.value}; only steps in "
                f"{sorted(s.value for s in DEADLINE_STATUSES)} have a deadline to extend"
            )
        now = self.trusted_now(record) if now is None else require_aware(now, "now")
        target = now + timedelta(seconds=seconds)
        if not allow_earlier and record.deadline is not None and record.deadline >= target:
            if not record_kept:
                return record
            # A message-only agent's beat (one write, like any heartbeat that moves the deadline): an
            # agent that beats on without replying is told apart from one that went silent.
            deadline, reason = record.deadline, f"{reason} (deadline kept)"
        else:
            deadline = target
        return self._write(
            record,
            actor=actor,
            reason=reason,
            status=record.status,
            action="heartbeat",
            deadline=deadline,
            last_heartbeat=now,
        )

    def trusted_now(self, record: StepRecord) -> datetime:
        """The storage service's time: the later of a point read's ``Date`` header (whole seconds) and
        the row's service-written ``Timestamp``, both at most a second plus latency behind the truth.
        A virtual clock stands in for it. Raises :class:`ConcurrencyConflict` if the row changed.
        """
        if clock.is_virtual():
            return clock.utcnow()
        current, now = self.get_with_service_time(record.instance_id, record.step_id)
        if record.etag is not None and current.etag != record.etag:
            raise ConcurrencyConflict(record.instance_id, record.step_id)
        return now

    def get_with_service_time(self, instance_id: str, step_id: str) -> tuple[StepRecord, datetime]:
        """A point read of the step, and the storage service's time of its answer."""
        validate_instance_id(instance_id)
        validate_step_id(step_id)
        headers: dict[str, str] = {}

        def keep_date(response: Any) -> None:
            headers["date"] = response.http_response.headers.get("Date", "")

        try:
            entity = self._steps.get_entity(instance_id, step_id, raw_response_hook=keep_date)
        except ResourceNotFoundError:
            raise StepNotFound(instance_id, step_id) from None
        self.stats.step_entities_read += 1
        if clock.is_virtual():
            return _from_entity(entity), clock.utcnow()
        candidates = [t for t in (_http_date(headers.get("date")), entity.metadata.get("timestamp")) if t]
        if not candidates:
            raise LedgerError("the storage service sent neither a Date header nor a row Timestamp")
        now = max(datetime(*t.timetuple()[:6], t.microsecond, tzinfo=UTC) for t in candidates)
        return _from_entity(entity), now


def _http_date(text: str | None) -> datetime | None:
    with contextlib.suppress(TypeError, ValueError):  # none, or not an HTTP date
        return parsedate_to_datetime(text).astimezone(UTC)
    return None
