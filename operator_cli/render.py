"""How the CLI shows things: rich tables for people, JSON for scripts (``--output json``).

Tables go to the given stream through a rich ``Console``; on a pipe or in a test the console is plain
text (no colour codes) and wide enough that a column is never cut mid-word.

Everything shown comes from the ledger, and the ledger holds what callers sent (business keys, error
texts, reasons): it is data, never instructions to the terminal. The console interprets no rich
markup or emoji codes (``[/]`` would crash a table, ``[link=...]`` be eaten), and :func:`terminal_safe`
shows every control or format character (ESC and OSC sequences, bidi overrides) as an escape.
"""

from __future__ import annotations

import io
import json
import unicodedata
from collections.abc import Callable
from datetime import datetime
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from workflow_core.ledger import AuditEntry, InstanceRecord, StepRecord

PLAIN_WIDTH = 200


def console_for(stream: IO[str], width: int | None = None) -> Console:
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    width = width or (None if is_tty else PLAIN_WIDTH)
    # ledger text is data: "[/]" or "[link=...]" is shown as it is (no markup, no emoji codes)
    return Console(file=stream, width=width, highlight=False, soft_wrap=False, markup=False, emoji=False)


def terminal_safe(text: Any, *, lines: bool = False) -> str:
    """``text`` with every control (Cc) and format (Cf: bidi overrides, zero-width) character shown
    as a Python-style escape, so data cannot move the cursor, set a title, link or recolour the
    terminal. ``lines``: newlines are kept (a message of several lines), else escaped too (a cell)."""

    def safe(ch: str) -> str:
        if (ch == "\n" and lines) or unicodedata.category(ch) not in ("Cc", "Cf"):
            return ch
        return ch.encode("unicode_escape").decode("ascii")

    return "".join(map(safe, str(text)))


def to_json(value: Any) -> Any:
    """A pydantic model (ledger records) or plain data as JSON-ready data, without ETags."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude={"etag", "index_key"})
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def print_json(stream: IO[str], data: Any) -> None:
    print(json.dumps(to_json(data), indent=2, default=str), file=stream)


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def ago(now: datetime, value: datetime | None) -> str:
    if value is None:
        return "-"
    seconds = int((now - value).total_seconds())
    if seconds < 0:
        return f"in {-seconds}s"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def short(text: str | None, limit: int = 60) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Identifiers and keys an operator copies: never wrapped mid-value (a narrow terminal cuts them with
# an ellipsis; ``sas list -o wide`` or ``-o json`` shows them whole).
WHOLE_VALUES = frozenset({"INSTANCE", "WORKFLOW", "VERSION", "BUSINESS KEY", "STEP", "STARTED", "UPDATED"})
ID_COLUMN_CHARS = 64  # an instance id, workflow or step name up to this is shown whole in a table
KEY_COLUMN_CHARS = 40  # a business key beyond this is cut ("…"): -o wide shows it
WIDE_WIDTH = 100_000  # -o wide: as wide as the longest row needs


def table(title: str | None, headers: list[str], rows: list[list[str]], *, wide: bool = False) -> Table:
    """``wide``: identifiers and keys whole however long (for :func:`wide_text`)."""
    result = Table(
        title=terminal_safe(title) if title else None,
        title_justify="left",
        show_edge=False,
        header_style="bold",
        box=None,
    )
    for n, header in enumerate(headers):
        if header in WHOLE_VALUES:  # as wide as its values (to a point), then cut, never wrapped
            longest = max([len(header), *(len(terminal_safe(row[n])) for row in rows if n < len(row))])
            limit = WIDE_WIDTH if wide else KEY_COLUMN_CHARS if header == "BUSINESS KEY" else ID_COLUMN_CHARS
            result.add_column(
                header, overflow="ellipsis", no_wrap=True, min_width=min(longest, limit), max_width=limit
            )
        else:
            result.add_column(header, overflow="fold")
    for row in rows:
        result.add_row(*(terminal_safe(cell) for cell in row))
    return result


def wide_text(renderable: Any) -> str:
    """``renderable`` as plain text on lines as long as it needs: nothing cut, nothing wrapped."""
    console = console_for(io.StringIO(), WIDE_WIDTH)
    with console.capture() as captured:
        console.print(renderable)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


Column = tuple[str, Callable[[Any], str]]  # a header, and the cell of one record under it
_INSTANCE: Column = ("INSTANCE", lambda r: r.instance_id)
_STEP: tuple[Column, ...] = (
    ("STEP", lambda r: r.step_id),
    ("STATUS", lambda r: r.status.value),
)
_ATTEMPT: tuple[Column, ...] = (
    ("ATTEMPT", lambda r: str(r.attempt)),
    ("DEADLINE", lambda r: when(r.deadline)),
)
_OWNER: Column = ("OWNER", lambda r: r.owner or "-")


def _columns(records: list[Any], *columns: Column, wide: bool = False) -> Table:
    rows = [[cell(r) for _, cell in columns] for r in records]
    return table(None, [header for header, _ in columns], rows, wide=wide)


def _last_error(limit: int) -> Column:
    return ("LAST ERROR", lambda r: short(r.last_error, limit))


def instances_table(records: list[InstanceRecord], *, wide: bool = False) -> Table:
    return _columns(
        records,
        _INSTANCE,
        ("WORKFLOW", lambda r: r.workflow),
        ("VERSION", lambda r: str(r.version)),
        ("STATUS", lambda r: r.status.value),
        ("BUSINESS KEY", lambda r: r.business_key or ""),
        ("STARTED", lambda r: when(r.started_at)),
        ("UPDATED", lambda r: when(r.updated_at)),
        ("ATTN", lambda r: "yes" if r.needs_attention else ""),
        ("NOTE", lambda r: short(r.attention_reason or r.last_error, 50)),
        wide=wide,
    )


def steps_table(steps: list[StepRecord]) -> Table:
    return _columns(steps, ("#", lambda r: str(r.sequence)), *_STEP, *_ATTEMPT, _OWNER, _last_error(50))


def _move(a: AuditEntry) -> str:
    return f"{a.from_status or '-'} -> {a.to_status}" if a.from_status != a.to_status else a.to_status or ""


def audit_table(audit: list[AuditEntry]) -> Table:
    return _columns(
        audit,
        ("AT (UTC)", lambda a: a.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]),
        ("STEP", lambda a: a.step_id),
        ("ACTOR", lambda a: a.actor),
        ("ACTION", lambda a: a.action),
        ("STATUS", _move),
        ("ATTEMPT", lambda a: "" if a.attempt is None else str(a.attempt)),
        ("REASON", lambda a: short(a.reason, 100)),
    )


def overdue_table(now: datetime, steps: list[StepRecord]) -> Table:
    late: Column = ("LATE", lambda r: ago(now, r.deadline))
    return _columns(steps, _INSTANCE, *_STEP, *_ATTEMPT, late, _OWNER, _last_error(40))


def attention_table(steps: list[StepRecord]) -> Table:
    compensation: Column = ("COMP. ATTEMPT", lambda r: str(r.compensation_attempt))
    return _columns(steps, _INSTANCE, *_STEP, compensation, _last_error(60))
