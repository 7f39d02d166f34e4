"""What the pattern harness observes: every committed ledger write (as :class:`LedgerEvent`), every
agent handler call and every remote effect, and the queries over them (``handler_calls``,
``double_effects``...), so tests can assert "each step ran once" and the demo can print a step's life.
A mixin of :class:`devtools.harness.PatternHarness`, split out so the harness module stays about
running the app.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from activities.worker.handlers import AGENT_HANDLERS, RemoteEffects
from workflow_core import clock
from workflow_core.ledger import StepLedger, StepRecord


@dataclass(frozen=True)
class LedgerEvent:
    """One committed ledger write (a status change, a field update, a heartbeat or an audit note)."""

    seq: int
    at: datetime  # host time of the write
    instance_id: str
    step_id: str  # "*" for the instance's "created" row
    actor: str
    action: str  # created | transition | update | heartbeat | note
    reason: str
    from_status: str | None = None
    to_status: str | None = None
    attempt: int | None = None
    note: str | None = None  # the audit action of a note ("late-result-ignored", "recovery"...)
    changes: tuple[str, ...] = ()  # fields an update/transition set
    record: StepRecord | None = None  # the step after the write (None for notes)


class HarnessObservation:
    """Mixin: the observation hooks of :class:`devtools.harness.PatternHarness`."""

    def _emit(
        self, at: datetime, instance_id: str, step_id: str, actor: str, action: str, reason: str, **rest: Any
    ) -> None:
        with self._lock:
            event = LedgerEvent(next(self._seq), at, instance_id, step_id, actor, action, reason, **rest)
            self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def _observe_ledger(self, ledger: StepLedger) -> None:
        """Wrap the ledger's public writes (on this instance only) to record each committed write."""
        names = ("transition", "update", "extend_deadline", "note", "create_steps")
        originals = {name: getattr(ledger, name) for name in names}

        def write(action: str) -> Callable[..., StepRecord]:
            def observed(record: StepRecord, *args: Any, actor: str, reason: str = "", **changes: Any):
                updated = originals[action](record, *args, actor=actor, reason=reason, **changes)
                self._emit_write(action, record, updated, actor, reason, changes)
                return updated

            return observed

        def extend_deadline(record: StepRecord, seconds: float, *, actor: str, **kwargs: Any):
            updated = originals["extend_deadline"](record, seconds, actor=actor, **kwargs)
            if updated is not record:  # a heartbeat that kept a later deadline writes nothing
                reason = kwargs.get("reason", "heartbeat")
                self._emit_write("heartbeat", record, updated, actor, reason, {"deadline": updated.deadline})
            return updated

        def note(instance_id: str, step_id: str, *, actor: str, action: str, reason: str, **kwargs: Any):
            originals["note"](instance_id, step_id, actor=actor, action=action, reason=reason, **kwargs)
            status = kwargs.get("status")
            rest = {
                "from_status": status,
                "to_status": status,
                "attempt": kwargs.get("attempt"),
                "note": action,
            }
            self._emit(clock.utcnow(), instance_id, step_id, actor, "note", reason, **rest)

        def create_steps(instance_id: str, workflow_name: str, steps: Any, *, actor: str, **kwargs: Any):
            before = bool(ledger.list_for_instance(instance_id))
            records = originals["create_steps"](instance_id, workflow_name, steps, actor=actor, **kwargs)
            if not before:
                reason = f"workflow {workflow_name}: {', '.join(r.step_id for r in records)}"
                self._emit(
                    clock.utcnow(), instance_id, "*", actor, "created", reason, to_status="Pending", attempt=0
                )
            return records

        ledger.transition, ledger.update = write("transition"), write("update")
        ledger.extend_deadline, ledger.note, ledger.create_steps = extend_deadline, note, create_steps

    def _emit_write(
        self, action: str, before: StepRecord, after: StepRecord, actor: str, reason: str, changes: Mapping
    ) -> None:
        rest = {"from_status": before.status.value, "to_status": after.status.value, "attempt": after.attempt}
        rest |= {"changes": tuple(sorted(changes)), "record": after}
        self._emit(after.updated_at, after.instance_id, after.step_id, actor, action, reason, **rest)

    def _observe_agents(self) -> None:
        """Count every handler call per (instance, step, kind, attempt) and every remote effect made."""
        current = threading.local()
        originals = dict(AGENT_HANDLERS)

        def counting(handler: Callable) -> Callable:
            @functools.wraps(handler)
            def wrapper(ctx: Any) -> Any:
                key = (ctx.instance_id, ctx.step_id, ctx.kind, ctx.attempt)
                with self._lock:
                    self._calls[key] += 1
                current.step = key
                try:
                    self._maybe_kill(ctx, after_effect=False)
                    result = handler(ctx)
                    self._maybe_kill(ctx, after_effect=True)
                    return result
                finally:
                    current.step = None

            return wrapper

        for name, handler in originals.items():
            AGENT_HANDLERS[name] = counting(handler)

        original_apply, original_undo = RemoteEffects.apply, RemoteEffects.undo

        def apply(effects: Any, service: str, key: str, result: dict[str, Any]) -> dict[str, Any]:
            out = original_apply(effects, service, key, result)
            step = getattr(current, "step", None)
            if step is not None:
                with self._lock:
                    self._effect_keys[step[:2]].add((service, key))
                    if out is result:  # apply returns its argument only when it created the effect
                        self._effects[(step[0], step[1], "work")] += 1
            return out

        def undo(effects: Any, service: str, key: str) -> dict[str, Any]:
            out = original_undo(effects, service, key)
            step = getattr(current, "step", None)
            if step is not None and out.get("undone"):
                with self._lock:
                    self._effects[(step[0], step[1], "compensate")] += 1
            return out

        RemoteEffects.apply, RemoteEffects.undo = apply, undo

        def restore() -> None:
            AGENT_HANDLERS.clear()
            AGENT_HANDLERS.update(originals)
            RemoteEffects.apply, RemoteEffects.undo = original_apply, original_undo

        self._restore.append(restore)

    def steps(self, instance_id: str) -> dict[str, StepRecord]:
        return {r.step_id: r for r in self.ledger.list_for_instance(instance_id)}

    def settled(self, instance_id: str) -> bool:
        """The instance record says the workflow ended (its scheduler, whichever, settled it)."""
        record = self.ledger.find_instance(instance_id)
        return record is not None and not record.supervised

    def statuses(self, instance_id: str) -> dict[str, str]:
        return {r.step_id: r.status.value for r in self.ledger.list_for_instance(instance_id)}

    def handler_calls(
        self, instance_id: str, step_id: str, *, kind: str = "work", attempt: int | None = None
    ) -> int:
        with self._lock:
            return sum(
                n
                for (i, s, k, a), n in self._calls.items()
                if (i, s, k) == (instance_id, step_id, kind) and (attempt is None or a == attempt)
            )

    def effects(self, instance_id: str, step_id: str, *, kind: str = "work") -> int:
        """Remote effects made for the step (``kind="compensate"``: effects undone)."""
        with self._lock:
            return self._effects[(instance_id, step_id, kind)]

    def double_effects(self, instance_ids: Iterable[str] | None = None) -> dict[tuple[str, str, str], int]:
        """Every (instance, step, kind) with more than one remote effect: must be empty."""
        wanted = None if instance_ids is None else set(instance_ids)
        with self._lock:
            return {
                key: n for key, n in self._effects.items() if n > 1 and (wanted is None or key[0] in wanted)
            }

    def remote_effects(self, instance_id: str, step_id: str) -> list[dict[str, Any]]:
        """The simulated remote service's rows for the step (``State``: applied / undone)."""
        effects = RemoteEffects.for_services(self.services)
        with self._lock:
            keys = sorted(self._effect_keys.get((instance_id, step_id), ()))
        return [row for service, key in keys if (row := effects.get(service, key)) is not None]

    def events_for(self, instance_id: str) -> list[LedgerEvent]:
        with self._lock:
            return [e for e in self.events if e.instance_id == instance_id]

    def decisions(self, instance_id: str | None = None) -> list[Any]:
        """Every watchdog decision so far (``watchdog_model.Decision``), optionally for one instance."""
        with self._lock:
            found = [d for r in self.tick_reports for d in r.decisions]
        return [d for d in found if instance_id is None or d.instance_id == instance_id]
