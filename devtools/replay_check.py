"""The replay check: do recorded orchestration histories still replay on the current orchestrator code?

Definitions are pinned per instance, so what remains to guard against breaking instances in flight
is the orchestrator *code*. A *replay file* is JSON: one recording, or ``{"recordings": [...]}``::

    {"orchestrator": "workflow_orchestrator", "instanceId": "...", "history": [<events>]}

with the history events as the Durable extension hands them to the Python worker; the orchestrator's
name and input default to the ExecutionStarted event's. What is compared episode by episode, how an
episode is handed over, and what the check cannot see: docs/scheduler.md, "The replay check".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.durable_host.history import (
    ActionType,
    HistoryEventType,
    flatten_actions,
    json_value,
    parse_failure,
    parse_time,
    replay,
    schema_fields,
)

H = HistoryEventType

# Events in which the history records an action the orchestrator took, and the action kinds.
_DECISIONS = {
    H.TASK_SCHEDULED: "activity",
    H.SUB_ORCHESTRATION_INSTANCE_CREATED: "sub-orchestration",
    H.TIMER_CREATED: "timer",
}
_ACTIONS = {
    ActionType.CALL_ACTIVITY: "activity",
    ActionType.CALL_ACTIVITY_WITH_RETRY: "activity",
    ActionType.CALL_SUB_ORCHESTRATOR: "sub-orchestration",
    ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY: "sub-orchestration",
    ActionType.CREATE_TIMER: "timer",
}
# Not part of what the orchestrator code sees while it runs.
_OUTSIDE = {H.ORCHESTRATOR_COMPLETED, H.EXECUTION_COMPLETED, H.EXECUTION_TERMINATED, H.CONTINUE_AS_NEW}
CONTINUED = "continue-as-new"


class ReplayFileError(ValueError):
    """The file is not a replay file (the message says what is wrong)."""


@dataclass
class Recording:
    orchestrator: str
    instance_id: str
    history: list[dict]
    input: str | None = None
    parent_instance_id: str | None = None
    source: str = ""
    generation: int | None = None  # of a run that continued as new

    @property
    def label(self) -> str:
        generation = f" (generation {self.generation})" if self.generation else ""
        return f"{self.source}: {self.orchestrator} {self.instance_id}{generation}".lstrip(": ")


@dataclass
class ReplayResult:
    recording: Recording
    episodes: int = 0
    actions: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def recording_from(data: Mapping[str, Any], source: str = "") -> Recording:
    history = data.get("history")
    if not isinstance(history, list) or not all(isinstance(e, dict) and "EventType" in e for e in history):
        raise ReplayFileError(f"{source or 'recording'}: 'history' must be a list of history events")
    started = next((e for e in history if e["EventType"] == H.EXECUTION_STARTED), None)
    if started is None:
        raise ReplayFileError("the history has no ExecutionStarted event")
    parent = ((started.get("ParentInstance") or {}).get("OrchestrationInstance") or {}).get("InstanceId")
    own = (started.get("OrchestrationInstance") or {}).get("InstanceId")
    raw_input = data.get("input", started.get("Input"))
    return Recording(
        orchestrator=str(data.get("orchestrator") or started.get("Name") or ""),
        instance_id=str(data.get("instanceId") or own or "replay"),
        history=history,
        input=raw_input if raw_input is None or isinstance(raw_input, str) else json.dumps(raw_input),
        parent_instance_id=data.get("parentInstanceId", parent),
        source=source,
        generation=data.get("generation"),
    )


def load_recordings(path: str | Path) -> list[Recording]:
    """The recordings in a replay file (one recording, or ``{"recordings": [...]}``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReplayFileError(f"{path}: cannot read a JSON replay file: {exc}") from None
    items = data.get("recordings") if isinstance(data, dict) and "recordings" in data else [data]
    if not isinstance(items, list) or not items:
        raise ReplayFileError(f"{path}: no recordings")
    return [
        recording_from(item, f"{path.name}[{i}]" if len(items) > 1 else path.name)
        for i, item in enumerate(items)
    ]


def app_orchestrators() -> dict[str, Callable[[Any], str]]:
    """The orchestrator handlers the app registers (``orchestrators.blueprint``), by function name."""
    from devtools.durable_host.registry import FunctionTable
    from orchestrators import blueprint

    table = FunctionTable()
    table.load(blueprint)
    return {name: entry.handler for name, entry in table.orchestrators.items()}


def episodes_of(history: list[dict]) -> list[tuple[int, int]]:
    """``(start, end)`` index ranges of the episodes (each from an OrchestratorStarted)."""
    starts = [i for i, e in enumerate(history) if e["EventType"] == H.ORCHESTRATOR_STARTED]
    return [(s, starts[n + 1] if n + 1 < len(starts) else len(history)) for n, s in enumerate(starts)]


Signature = tuple[str, str | None, Any]  # kind, name, what else must match (input, fire time...)


def _signature(kind: str, fields: dict, name: str, instance_id: str, data: str, fire_at: str) -> Signature:
    """A recorded event or a returned action (their field names given) as what must match."""
    if kind == "timer":
        return kind, None, parse_time(fields[fire_at])
    if kind == "sub-orchestration":
        return kind, fields.get(name), (fields.get(instance_id), json_value(fields.get(data)))
    return kind, fields.get(name), json_value(fields.get(data))


def _action(action: dict) -> Signature:
    if action["actionType"] == ActionType.CONTINUE_AS_NEW:
        return CONTINUED, None, json_value(action.get("input"))
    return _signature(_ACTIONS[action["actionType"]], action, "functionName", "instanceId", "input", "fireAt")


def retry_events(history: list[dict]) -> set[int]:
    """Indexes of the events the extension writes for a call with a retry policy, on top of the one
    action the orchestrator returned for it: after a failure, a retry timer (in the failure's
    episode); when it fires, the call scheduled again (in the timer's episode). DurableTask.Core's
    RetryInterceptor; docs/durable-test-host.md, "Retries"."""
    calls = (H.TASK_SCHEDULED, H.SUB_ORCHESTRATION_INSTANCE_CREATED)
    names = {e["EventId"]: e.get("Name") for e in history if e["EventType"] in calls}
    marked: set[int] = set()
    failed: list[str | None] = []  # failures in this episode awaiting their retry timer
    timers: dict[int, str | None] = {}  # retry timer id -> the call it retries
    again: list[str | None] = []  # fired retry timers in this episode awaiting their call
    for index, event in enumerate(history):
        kind = event["EventType"]
        if kind == H.ORCHESTRATOR_STARTED:
            failed, again = [], []
        elif kind in (H.TASK_FAILED, H.SUB_ORCHESTRATION_INSTANCE_FAILED):
            failed.append(names.get(event.get("TaskScheduledId")))
        elif kind == H.TIMER_CREATED and failed:
            timers[event["EventId"]] = failed.pop(0)
            marked.add(index)
        elif kind == H.TIMER_FIRED and event.get("TimerId") in timers:
            again.append(timers.pop(event["TimerId"]))
        elif kind in calls and event.get("Name") in again:
            again.remove(event.get("Name"))
            marked.add(index)
    return marked


def _continued(history: list[dict]) -> Signature | None:
    """The recorded end of a generation that continued as new, as the action that ended it."""
    for event in history:
        if event["EventType"] == H.CONTINUE_AS_NEW or (
            event["EventType"] == H.EXECUTION_COMPLETED
            and event.get("OrchestrationStatus") == "ContinuedAsNew"
        ):
            return CONTINUED, None, json_value(event.get("Result"))
    return None


def _describe(signature: Signature) -> str:
    kind, name, detail = signature
    head = f"{kind} {name!r}" if name else kind
    text = detail.isoformat() if hasattr(detail, "isoformat") else json.dumps(detail, default=str)
    return f"{head} [{text[:300]}{'...' if len(text) > 300 else ''}]"


def check_recording(
    recording: Recording, orchestrators: Mapping[str, Callable[[Any], str]] | None = None
) -> ReplayResult:
    """Replay one recording episode by episode against ``orchestrators`` (default: the app's)."""
    table = app_orchestrators() if orchestrators is None else orchestrators
    result = ReplayResult(recording)
    handler = table.get(recording.orchestrator)
    if handler is None:
        result.problems.append(
            f"orchestrator {recording.orchestrator!r} is not registered (known: {', '.join(sorted(table))})"
        )
        return result
    history = recording.history
    finished = any(e["EventType"] == H.EXECUTION_COMPLETED for e in history)
    episodes = episodes_of(history)
    if not episodes:
        result.problems.append("the history has no OrchestratorStarted event: nothing to replay")
        return result
    retries = retry_events(history)
    for number, (start, end) in enumerate(episodes, 1):
        # Earlier episodes as stored (``IsPlayed`` as the framework left it); this one's events are
        # new, so unplayed, as the extension serialises them before the episode runs.
        seen = [e for e in history[:start] if e["EventType"] not in _OUTSIDE]
        received = [
            {**e, "IsPlayed": False}
            for e in history[start:end]
            if e["EventType"] not in _DECISIONS and e["EventType"] not in _OUTSIDE
        ]
        expected = [
            _signature(_DECISIONS[e["EventType"]], e, "Name", "InstanceId", "Input", "FireAt")
            for i, e in enumerate(history[:end])
            if e["EventType"] in _DECISIONS and i not in retries
        ]
        if number == len(episodes) and (ended := _continued(history)) is not None:
            expected.append(ended)
        context = {"history": seen + received, "instanceId": recording.instance_id, "isReplaying": number > 1}
        context |= {"parentInstanceId": recording.parent_instance_id, "input": recording.input}
        try:
            state, error = replay(handler, context | schema_fields(2)), None
        except Exception as exc:
            state, error, _ = parse_failure(exc)
        produced = [
            _action(a)
            for a in flatten_actions(state.get("actions") or [])
            if a.get("actionType") in _ACTIONS or a.get("actionType") == ActionType.CONTINUE_AS_NEW
        ]
        result.episodes = number
        problem = _compare(number, expected, produced)
        if problem is None and number == len(episodes) and finished and not (state.get("isDone") or error):
            problem = (
                f"episode {number}: the recorded run finished here, but the current code waits for more "
                f"after {len(produced)} action(s)"
            )
        if problem is not None:
            result.problems.append(
                problem + (f" (the replay raised: {error.splitlines()[0]})" if error else "")
            )
            return result
        result.actions = len(produced)
    return result


def _first_difference(recorded: Any, current: Any, path: str = "") -> str:
    """Where two JSON values first differ, as ``path: recorded -> current``."""
    if isinstance(recorded, dict) and isinstance(current, dict):
        for key in sorted(recorded.keys() | current.keys()):
            if recorded.get(key, ...) != current.get(key, ...):
                return _first_difference(recorded.get(key), current.get(key), f"{path}.{key}")
    if (
        isinstance(recorded, list | tuple)
        and isinstance(current, list | tuple)
        and len(recorded) == len(current)
    ):
        for i, (a, b) in enumerate(zip(recorded, current, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    show = lambda v: (v.isoformat() if hasattr(v, "isoformat") else json.dumps(v, default=str))[:200]  # noqa: E731
    return f"{path or 'value'}: {show(recorded)} -> {show(current)}"


def _compare(episode: int, expected: list[Signature], produced: list[Signature]) -> str | None:
    for index, (want, got) in enumerate(zip(expected, produced, strict=False)):
        if want != got:
            where = "" if want[:2] != got[:2] else f" ({_first_difference(want[2], got[2])})"
            return (
                f"episode {episode}: action #{index} differs{where}\n"
                f"    recorded: {_describe(want)}\n"
                f"    current:  {_describe(got)}"
            )
    if len(produced) < len(expected):
        return (
            f"episode {episode}: the recorded run had taken {len(expected)} action(s) by now, the current "
            f"code takes only {len(produced)} (next recorded: {_describe(expected[len(produced)])})"
        )
    if len(produced) > len(expected):
        return (
            f"episode {episode}: the current code takes action #{len(expected)} "
            f"({_describe(produced[len(expected)])}) where the recorded run took none"
        )
    return None


def check_file(
    path: str | Path, orchestrators: Mapping[str, Callable[[Any], str]] | None = None
) -> list[ReplayResult]:
    table = orchestrators if orchestrators is not None else app_orchestrators()
    return [check_recording(r, table) for r in load_recordings(path)]
