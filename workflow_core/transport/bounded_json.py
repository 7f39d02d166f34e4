"""JSON from a queue, parsed within bounds: every way a hostile body can fail becomes one error.

``json.loads`` alone raises ``RecursionError`` on a few kilobytes of nesting, accepts duplicate keys
(the last one wins), lone UTF-16 surrogates (which Table Storage refuses), ``NaN``/``Infinity`` and
integers of thousands of digits. A queue reader must park such a message, not raise on it, so
:func:`loads` checks size and depth *before* parsing, the rest while parsing, and raises only
:class:`MalformedJson` (a ``ValueError``) with a reason fit for an audit row.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

MAX_CHARS = 1024 * 1024  # above any queue's message size (Service Bus Premium aside: 1 MiB here)
MAX_DEPTH = 64
MAX_NUMBER_CHARS = 64
MAX_REASON_CHARS = 200


class MalformedJson(ValueError):
    """The text is not JSON this app will read; ``str(exc)`` says why (bounded)."""


# A JSON string (the parser ends one at the same quote), and a lone surrogate, raw or escaped
# (``\\u`` + D800-DFFF; an escaped backslash before a ``u`` only costs the full check).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)  # unclosed: to the end
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE = re.compile("[\ud800-\udfff]")
MAYBE_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")


def depth_within(text: str, limit: int) -> bool:
    """Whether no array/object nests deeper than ``limit`` (strings skipped; the text need not be
    valid JSON: parsing comes after). Text that opens ``limit`` brackets or fewer cannot; otherwise
    the brackets outside strings are summed, in C (regular expressions, ``accumulate``)."""
    if text.count("[") + text.count("{") <= limit:
        return True
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_NESTING.__getitem__, brackets)), default=0) <= limit


def _checked_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise MalformedJson(f"duplicate key {key[:40]!r}")
        result[key] = value
    return result


def _number(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise MalformedJson(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    return text


def _float(text: str) -> float:
    value = float(_number(text))
    if not math.isfinite(value):
        raise MalformedJson(f"the number {text[:20]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise MalformedJson(f"{name} is not JSON")


def check_strings(value: Any) -> None:
    """No string (key or value, at any depth) holds a lone surrogate: valid JSON, but no UTF-8 store
    (Table Storage, a blob, a queue) can hold it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise MalformedJson(
                    f"the string {item[:40]!r} holds a lone UTF-16 surrogate (\\ud800-\\udfff), which cannot "
                    "be stored: send whole characters (a surrogate pair or the character)"
                )
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
    if not depth_within(data, max_depth):
        raise MalformedJson(f"nested deeper than {max_depth} levels")
    try:
        value = json.loads(
            data,
            object_pairs_hook=_checked_pairs,
            parse_int=lambda text: int(_number(text)),
            parse_float=_float,
            parse_constant=_constant,
        )
    except MalformedJson:
        raise
    except (ValueError, RecursionError, TypeError, OverflowError) as exc:
        raise MalformedJson(f"not JSON: {str(exc)[:MAX_REASON_CHARS]}") from None
    if MAYBE_SURROGATE.search(data):  # else no parsed string can hold one
        check_strings(value)
    return value
