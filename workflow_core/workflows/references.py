"""References inside a step's ``input`` mapping (``$input.<field>...``, ``$steps.<id>.output...``,
``$$`` for a literal ``$``), and how they are resolved.

Any other ``$`` string is refused at load, so a typo fails a deployment instead of sending
``"$inputs.x"`` to a remote service. Resolution is pure, so orchestrators call it during replay.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from workflow_core.workflows.errors import StepInputError

_STEPS = re.compile(r"^\$steps\.(?P<step>[^$]+?)\.output(?:\.(?P<path>.+))?$")
_INPUT = re.compile(r"^\$input(?:\.(?P<path>.+))?$")


@dataclass(frozen=True)
class Reference:
    text: str
    source: str  # "input" or "steps"
    step_id: str | None
    path: tuple[str, ...]


def parse_reference(value: Any) -> Reference | None:
    """The reference ``value`` denotes, ``None`` for a literal; ``ValueError`` for a malformed one."""
    if not isinstance(value, str) or not value.startswith("$") or value.startswith("$$"):
        return None
    if match := _STEPS.match(value):
        return Reference(value, "steps", match["step"], _split(value, match["path"]))
    if match := _INPUT.match(value):
        return Reference(value, "input", None, _split(value, match["path"]))
    raise ValueError(
        f"{value!r} is not a valid reference; use $input.<field>, $steps.<step_id>.output[.<key>], "
        "or start the string with $$ for a literal $"
    )


def _split(text: str, path: str | None) -> tuple[str, ...]:
    parts = tuple(path.split(".")) if path is not None else ()
    if "" in parts:
        raise ValueError(f"{text!r} has an empty path segment")
    return parts


def iter_references(value: Any, where: str) -> Iterator[tuple[str, Reference]]:
    """Every reference in a (possibly nested) input value, with a readable location for errors."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from iter_references(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from iter_references(item, f"{where}[{index}]")
    else:
        try:
            ref = parse_reference(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if ref is not None:
            yield where, ref


def resolve_value(
    value: Any, workflow_input: Mapping[str, Any], outputs: Mapping[str, Any], where: str
) -> Any:
    if isinstance(value, Mapping):
        return {
            key: resolve_value(item, workflow_input, outputs, f"{where}.{key}") for key, item in value.items()
        }
    if isinstance(value, list):
        return [resolve_value(item, workflow_input, outputs, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, str) and value.startswith("$$"):  # a literal "$..."
        return value[1:]
    try:
        ref = parse_reference(value)
    except ValueError as exc:
        raise StepInputError(f"{where}: {exc}") from None
    if ref is None:
        return value
    if ref.source == "input":
        current: Any = workflow_input
        root_name = "the workflow input"
    elif ref.step_id not in outputs:
        raise StepInputError(
            f"{where}: {ref.text} needs the output of step {ref.step_id!r}, which has none yet"
        )
    else:
        current = outputs[ref.step_id]
        root_name = f"the output of step {ref.step_id!r}"
    for depth, key in enumerate(ref.path):
        if isinstance(current, Mapping) and key in current:
            current = current[key]
        elif isinstance(current, list) and key.isdigit() and int(key) < len(current):
            current = current[int(key)]
        else:
            so_far = ".".join(ref.path[:depth]) or "(top level)"
            raise StepInputError(
                f"{where}: {ref.text} cannot be resolved: {root_name} has no {key!r} under {so_far}"
            )
    # A copy: a caller that edits the resolved input must not edit the outputs it came from.
    return copy.deepcopy(current)
