"""Tracing: the timeline every test failure prints, and the diagnosis a TimeoutError carries."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from .history import (
    ActionType,
    flatten_actions,
    format_time,
)
from .state import (
    TERMINAL_STATUSES,
)


class _Tracing:
    """Timeline lines and diagnoses, in host time."""

    def timeline(self, instance_id: str | None = None) -> list[tuple[datetime, str]]:
        """(host time, event) lines, for one instance or (prefixed with the instance id) all."""
        with self._lock:
            if instance_id is not None:
                return [(t, text) for t, iid, text in self._timeline if iid == instance_id]
            return [(t, f"[{iid}] {text}" if iid else text) for t, iid, text in self._timeline]

    def format_timeline(self, instance_id: str | None = None) -> str:
        start = self.clock.start
        return "\n".join(f"{_offset(t - start)}  {text}" for t, text in self.timeline(instance_id))

    def _log(self, instance_id: str, text: str) -> None:
        now = self.clock.now()
        self._timeline.append((now, instance_id, text))
        if self.on_progress is not None:
            self.on_progress(now, instance_id, text)

    def _diagnose(self, reason: str) -> str:
        lines = [reason]
        for inst in self._instances.values():
            if inst.status in TERMINAL_STATUSES:
                continue
            timers = ", ".join(
                f"#{t.id} at {format_time(t.fire_at)}"
                for t in self._open_tasks(inst.execution)
                if t.kind == "timer"
            )
            waiting = sorted(
                {
                    a.get("externalEventName")
                    for a in flatten_actions(inst.last_actions or [])
                    if a.get("actionType") == ActionType.WAIT_FOR_EXTERNAL_EVENT
                }
            )
            lines.append(
                f"  {inst.instance_id} ({inst.name}): {inst.status.value}; open timers: {timers or 'none'}; "
                f"events it has waited for: {waiting or 'none'}; undelivered messages: {len(inst.inbox)}"
            )
        tail = self.format_timeline().splitlines()[-15:]
        if tail:
            lines.append("last timeline lines:")
            lines.extend(f"  {line}" for line in tail)
        return "\n".join(lines)


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _delta(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:g}m"
    return f"{seconds / 3600:g}h"


def _offset(delta: timedelta) -> str:
    total_ms = int(delta.total_seconds() * 1000)
    sign = "-" if total_ms < 0 else "+"
    total_ms = abs(total_ms)
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}"
