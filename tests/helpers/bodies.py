"""Test tools over bodies and calls: counting an object's calls, and every leaf of a JSON body, each
replaced in turn (for tests that alter one field of a message at a time)."""

from __future__ import annotations

import json
from typing import Any

import pytest


class CallCounter:
    """Counts calls of some of an object's methods (still made): how many ledger reads a path made."""

    def __init__(self, target: Any, monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
        self.calls = 0
        for name in names:
            monkeypatch.setattr(target, name, self._counting(getattr(target, name)))

    def _counting(self, real: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        return counted


def json_paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every leaf of a JSON body, as a path of keys."""
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in json_paths(v, (*prefix, k))]
    return [prefix]


def altered_at(body: dict[str, Any], path: tuple, new: Any) -> dict[str, Any]:
    """``body`` with the value at ``path`` replaced by ``new`` (a deep copy)."""
    copy = json.loads(json.dumps(body))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return copy
