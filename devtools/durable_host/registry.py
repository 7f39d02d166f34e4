"""Finding orchestrators and activities in what ``azure.functions`` apps and blueprints expose
(the accepted sources: docs/durable-test-host.md, "Loading functions")."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import azure.durable_functions as df
from azure.functions import meta
from azure.functions.durable_functions import ActivityTriggerConverter


@dataclass
class OrchestratorFunction:
    #: The handler the worker calls: context JSON in, state JSON out (made by ``Orchestrator.create``).
    handler: Callable[[Any], str]


@dataclass
class ActivityFunction:
    fn: Callable[..., Any]
    #: The trigger binding's parameter name (the worker passes the input by this keyword); ``None``
    #: for explicit maps, which get the input as their first positional argument.
    parameter: str | None = None

    def decode_input(self, input_json: str | None) -> Any:
        """Decode the activity input exactly like the worker's activity-trigger converter."""
        if input_json is not None:
            return ActivityTriggerConverter.decode(
                meta.Datum(type="json", value=input_json), trigger_metadata={}
            )
        return None

    @staticmethod
    def encode_output(value: Any) -> str:
        """Encode the activity result exactly like the worker does (raises ``ValueError`` if it can't)."""
        return ActivityTriggerConverter.encode(value, expected_type=None).value

    def invoke(self, value: Any) -> Any:
        return self.fn(value) if self.parameter is None else self.fn(**{self.parameter: value})


@dataclass
class FunctionTable:
    orchestrators: dict[str, OrchestratorFunction] = field(default_factory=dict)
    activities: dict[str, ActivityFunction] = field(default_factory=dict)
    #: Every other function (HTTP, timer, queue... triggers), by name, as ``Function`` objects.
    others: dict[str, Any] = field(default_factory=dict)

    def load(self, source: Any) -> None:
        if isinstance(source, Mapping):
            for name, fn in source.items():
                self.add_callable(name, fn)
        elif callable(getattr(source, "get_functions", None)) and hasattr(source, "_function_builders"):
            for function in source.get_functions():  # once: a second call raises
                self.add_function(function)
        elif _is_function(source):
            self.add_function(source)
        elif hasattr(source, "_function_builders"):  # a blueprint: read, never register
            for builder in source._function_builders:
                self.add_function(builder._function)
        elif isinstance(source, Iterable) and not isinstance(source, str | bytes):
            for item in source:
                self.load(item)
        else:
            raise TypeError(
                f"cannot load functions from {source!r}: pass a DFApp, a Blueprint, Function objects, "
                "or a {name: callable} map"
            )

    def add_function(self, function: Any) -> None:
        trigger, name = function.get_trigger(), function.get_function_name()
        kind, user_function = getattr(trigger, "type", None), function.get_user_function()
        if kind == "orchestrationTrigger":
            self._put(self.orchestrators, name, OrchestratorFunction(_as_handler(user_function)))
        elif kind == "activityTrigger":
            self._put(self.activities, name, ActivityFunction(user_function, trigger.name))
        else:
            self.others[name] = function

    def add_callable(self, name: str, fn: Any, kind: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"{name!r}: {fn!r} is not callable")
        is_orchestrator = hasattr(fn, "orchestrator_function") or inspect.isgeneratorfunction(fn)
        if kind == "orchestrator" or (kind is None and is_orchestrator):
            self._put(self.orchestrators, name, OrchestratorFunction(_as_handler(fn)))
        else:
            self._put(self.activities, name, ActivityFunction(fn))

    @staticmethod
    def _put(table: dict, name: str, entry: Any) -> None:
        if name in table:
            raise ValueError(f"two functions are named {name!r}")
        table[name] = entry


def _is_function(source: Any) -> bool:
    return all(callable(getattr(source, attr, None)) for attr in ("get_trigger", "get_user_function"))


def _as_handler(fn: Callable) -> Callable[[Any], str]:
    """The worker-facing handler: ``Orchestrator.create`` output, wrapping a raw generator if needed."""
    return fn if hasattr(fn, "orchestrator_function") else df.Orchestrator.create(fn)
