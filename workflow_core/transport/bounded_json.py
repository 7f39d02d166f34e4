"""JSON from a queue, parsed within bounds: every way a hostile body can fail becomes one error.

``json.loads`` alone raises ``RecursionError`` on a few kilobytes of nesting, accepts duplicate keys
(the last one silently wins), lone UTF-16 surrogates (which Table Storage and every later
``encode("utf-8")`` refuse), ``NaN``/``Infinity`` and integers of thousands of digits. A queue
reader must park such a message, not raise on it (a redelivery cannot fix it, and an exception sends
it to a poison queue nothing reads), so :func:`loads` checks size and depth *before* parsing and
everything else while parsing, and raises only :class:`MalformedJson` (a ``ValueError``) with a
reason fit for an audit row.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_CHARS = 1024 * 1024  # above any queue's message size (Service Bus Premium aside: 1 MiB here)
MAX_DEPTH = 64
MAX_NUMBER_CHARS = 64
MAX_REASON_CHARS = 200


class MalformedJson(ValueError):
    """The text is not JSON this app will read; ``str(exc)`` says why (bounded)."""


def _depth_within(text: str, limit: int) -> bool:
    """Whether no array/object nests deeper than ``limit`` (strings skipped; the text need not be
    valid JSON: parsing comes after)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return False
        elif char in "]}":
            depth -= 1
    return True


def _has_lone_surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


def _checked_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise MalformedJson(f"duplicate key {key[:40]!r}")
        result[key] = value
    return result


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise MalformedJson(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise MalformedJson(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    value = float(text)
    if not math.isfinite(value):
        raise MalformedJson(f"the number {text[:20]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise MalformedJson(f"{name} is not JSON")


def _check_strings(value: Any) -> None:
    """No string (key or value, at any depth) holds a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _has_lone_surrogate(item):
                raise MalformedJson("a string holds a lone UTF-16 surrogate")
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())


def loads(data: str | bytes, *, max_chars: int = MAX_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """``data`` parsed as strict JSON within the bounds, or :class:`MalformedJson` saying why."""
    if isinstance(data, bytes | bytearray):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedJson(f"not UTF-8 (byte {exc.start})") from None
    if len(data) > max_chars:
        raise MalformedJson(f"{len(data)} characters (at most {max_chars})")
    if not _depth_within(data, max_depth):
        raise MalformedJson(f"nested deeper than {max_depth} levels")
    try:
        value = json.loads(
            data,
            object_pairs_hook=_checked_pairs,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_constant,
        )
    except MalformedJson:
        raise
    except (ValueError, RecursionError, TypeError, OverflowError) as exc:
        raise MalformedJson(f"not JSON: {str(exc)[:MAX_REASON_CHARS]}") from None
    _check_strings(value)
    return value
