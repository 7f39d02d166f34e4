"""Drive real Durable Functions orchestrator handlers through replay, without the Functions host.

The host talks to a Python orchestrator through one JSON contract: it sends the history (plus the
input and instance id) and gets back the actions the orchestrator wants, ``isDone``, the output and
the custom status. This module plays the host's side of that contract:

- ``HistoryBuilder`` writes history events in the shapes the Python SDK reads (task and timer
  sequence ids included, so completions match the tasks they complete);
- ``run_orchestrator`` calls a handler made by ``Orchestrator.create`` (or registered on a
  blueprint) and parses what it returns, failures included;
- ``OrchestrationPlayer`` runs an orchestration episode by episode like the host: run, read the new
  actions, record them as scheduled, let time pass until the next completion (an activity result,
  a timer, an external event, a sub-orchestration), append it, run again. Answers come from a
  ``Scenario`` (activity responders and agent replies). It also checks determinism on every
  episode: the actions an orchestrator already took must come back identical on replay.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

# --- history events --------------------------------------------------------------------------------

EXECUTION_STARTED = 0
TASK_SCHEDULED = 4
TASK_COMPLETED = 5
TASK_FAILED = 6
SUB_ORCHESTRATION_CREATED = 7
SUB_ORCHESTRATION_COMPLETED = 8
SUB_ORCHESTRATION_FAILED = 9
TIMER_CREATED = 10
TIMER_FIRED = 11
ORCHESTRATOR_STARTED = 12
ORCHESTRATOR_COMPLETED = 13
EVENT_RAISED = 15

# --- action types (what an orchestrator returns) --------------------------------------------------

CALL_ACTIVITY = 0
CALL_ACTIVITY_WITH_RETRY = 1
CALL_SUB_ORCHESTRATOR = 2
CALL_SUB_ORCHESTRATOR_WITH_RETRY = 3
CONTINUE_AS_NEW = 4
CREATE_TIMER = 5
WAIT_FOR_EXTERNAL_EVENT = 6
WHEN_ANY = 11
WHEN_ALL = 12
# Actions that take a task sequence number (external events are matched by name instead).
NUMBERED_ACTIONS = frozenset({0, 1, 2, 3, 4, 5, 7, 8, 9})

# Replay protocol versions, as the extension announces them in the context JSON.
SCHEMA_V1 = {"upperSchemaVersion": 0}
SCHEMA_V3 = {  # what current extensions send: flat action list with compound WhenAny/WhenAll actions
    "upperSchemaVersion": 1,
    "upperSchemaVersionNew": 2,
    "maximumShortTimerDuration": "6.00:00:00",
    "longRunningTimerIntervalDuration": "3.00:00:00",
}


def iso_z(moment: datetime) -> str:
    """A UTC timestamp as the host writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


class HistoryBuilder:
    """An orchestration history, appended to the way the host appends it.

    Scheduling events (``TaskScheduled``, ``TimerCreated``, ``SubOrchestrationInstanceCreated``)
    carry the task's sequence id as ``EventId``; completions refer to it (``TaskScheduledId``,
    ``TimerId``). Events before the current episode's ``OrchestratorStarted`` are marked played.
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.now: datetime | None = None

    def _add(self, event_type: int, event_id: int = -1, **fields: Any) -> dict[str, Any]:
        assert self.now is not None, "start an episode first (orchestrator_started)"
        event = {
            "EventType": event_type,
            "EventId": event_id,
            "IsPlayed": False,
            "Timestamp": iso_z(self.now),
        }
        event.update(fields)
        self.events.append(event)
        return event

    # episode boundaries
    def orchestrator_started(self, at: datetime) -> HistoryBuilder:
        self.now = at
        self._add(ORCHESTRATOR_STARTED)
        return self

    def orchestrator_completed(self) -> HistoryBuilder:
        self._add(ORCHESTRATOR_COMPLETED)
        return self

    def execution_started(self, name: str, input_: Any) -> HistoryBuilder:
        self._add(EXECUTION_STARTED, Name=name, Input=json.dumps(input_), Version="")
        return self

    # activities
    def task_scheduled(self, task_id: int, name: str, input_json: str | None) -> HistoryBuilder:
        self._add(TASK_SCHEDULED, task_id, Name=name, Input=input_json)
        return self

    def task_completed(self, task_id: int, result: Any) -> HistoryBuilder:
        self._add(TASK_COMPLETED, TaskScheduledId=task_id, Result=json.dumps(result))
        return self

    def task_failed(self, task_id: int, reason: str, details: str = "") -> HistoryBuilder:
        self._add(TASK_FAILED, TaskScheduledId=task_id, Reason=reason, Details=details)
        return self

    # timers
    def timer_created(self, task_id: int, fire_at: str) -> HistoryBuilder:
        self._add(TIMER_CREATED, task_id, FireAt=fire_at)
        return self

    def timer_fired(self, task_id: int, fire_at: str) -> HistoryBuilder:
        self._add(TIMER_FIRED, TimerId=task_id, FireAt=fire_at)
        return self

    # external events
    def event_raised(self, name: str, payload: Any) -> HistoryBuilder:
        self._add(EVENT_RAISED, Name=name, Input=json.dumps(payload))
        return self

    # sub-orchestrations
    def sub_orchestration_created(
        self, task_id: int, name: str, instance_id: str | None, input_json: str | None
    ) -> HistoryBuilder:
        self._add(SUB_ORCHESTRATION_CREATED, task_id, Name=name, InstanceId=instance_id, Input=input_json)
        return self

    def sub_orchestration_completed(self, task_id: int, result: Any) -> HistoryBuilder:
        self._add(SUB_ORCHESTRATION_COMPLETED, TaskScheduledId=task_id, Result=json.dumps(result))
        return self

    def sub_orchestration_failed(self, task_id: int, reason: str, details: str = "") -> HistoryBuilder:
        self._add(SUB_ORCHESTRATION_FAILED, TaskScheduledId=task_id, Reason=reason, Details=details)
        return self

    def context_json(
        self,
        instance_id: str,
        input_: Any,
        parent_instance_id: str | None = None,
        schema: dict[str, Any] | None = None,
    ) -> str:
        """The JSON the host hands the orchestrator handler."""
        last_start = max(i for i, e in enumerate(self.events) if e["EventType"] == ORCHESTRATOR_STARTED)
        history = [{**e, "IsPlayed": i < last_start} for i, e in enumerate(self.events)]
        body = {
            "history": history,
            "instanceId": instance_id,
            "isReplaying": last_start > 0,
            "parentInstanceId": parent_instance_id,
            "input": json.dumps(input_),
        }
        body.update(schema if schema is not None else SCHEMA_V3)
        return json.dumps(body)


# --- failure shapes, as the extension writes them ----------------------------------------------------
# Written here independently of the durable test host so each checks the other against the source:
# TaskActivityShim + OutOfProcExceptionHelpers (activity: the worker's "Exception: <Type>: <msg>" text
# after "\nException:", hence two spaces), OutOfProcOrchestrationShim (orchestrator), and
# TaskOrchestrationContext.HandleExecutionTerminatedEvent (a terminated child: the reason itself).


def activity_failure_reason(name: str, exc: BaseException) -> str:
    return f"Activity function '{name}' failed:  {type(exc).__name__}: {exc}"


def activity_failure_details(exc: BaseException) -> str:
    """``Utils.SerializeCause``: the .NET exception serialised as JSON, friendly message first."""
    friendly = f" {type(exc).__name__}: {exc}"
    return json.dumps({"ClassName": "System.Exception", "Message": friendly, "InnerException": None})


def orchestrator_failure_reason(name: str, error: str) -> str:
    return f"Orchestrator function '{name}' failed: {error}"


def orchestrator_failure_details(error: str) -> str:
    return f"Message: {error}, StackTrace: "


# --- running a handler -----------------------------------------------------------------------------


def flatten_actions(actions: list[Any]) -> list[dict[str, Any]]:
    """Leaf actions in the order the orchestrator created them (compound actions expanded)."""
    flat: list[dict[str, Any]] = []

    def walk(item: Any) -> None:
        if isinstance(item, list):
            for child in item:
                walk(child)
        elif item.get("actionType") in (WHEN_ANY, WHEN_ALL):
            walk(item.get("compoundActions", []))
        else:
            flat.append(item)

    walk(actions)
    return flat


@dataclass
class Episode:
    """What one handler invocation returned."""

    is_done: bool
    actions: list[dict[str, Any]]  # flattened, in creation order
    raw_actions: list[Any]
    output: Any
    custom_status: Any
    error: str | None
    raw: str

    @property
    def numbered_actions(self) -> list[dict[str, Any]]:
        return [a for a in self.actions if a.get("actionType") in NUMBERED_ACTIONS]


OUT_OF_PROC_MARK = "$OutOfProcData$:"


def run_orchestrator(handler: Callable[[str], str], context_json: str) -> Episode:
    """Call the real handler; an orchestrator exception comes back as ``Episode.error``."""
    try:
        raw = handler(context_json)
        error = None
    except Exception as exc:
        text = str(exc)
        if OUT_OF_PROC_MARK not in text:
            raise
        error, _, raw = text.partition(OUT_OF_PROC_MARK)
        error = error.strip()
    state = json.loads(raw)
    return Episode(
        is_done=bool(state.get("isDone")),
        actions=flatten_actions(state.get("actions", [])),
        raw_actions=state.get("actions", []),
        output=state.get("output"),
        custom_status=state.get("customStatus"),
        error=error or state.get("error"),
        raw=raw,
    )


def blueprint_handler(blueprint: Any, function_name: str) -> Callable[[str], str]:
    """The handler a blueprint registered under ``function_name``: exactly what the worker calls."""
    for builder in blueprint._function_builders:
        function = builder._function
        if function.get_function_name() == function_name:
            return function.get_user_function()
    raise LookupError(f"no function {function_name!r} on the blueprint")


# --- the simulated host ----------------------------------------------------------------------------


class ActivityFailed(Exception):
    """Raise from a responder to make the activity fail (``TaskFailed``)."""


class NonDeterminism(AssertionError):
    """On replay the orchestrator produced different actions for work it had already scheduled."""


@dataclass(frozen=True)
class Reply:
    """How an agent answers one attempt: an event after ``after`` seconds, or silence (``None``)."""

    outcome: str  # "succeeded" | "failed"
    output: dict[str, Any] | None = None
    error: str | None = None
    after: float = 5.0

    @staticmethod
    def succeed(output: dict[str, Any] | None = None, after: float = 5.0) -> Reply:
        return Reply("succeeded", output=output or {}, after=after)

    @staticmethod
    def fail(error: str = "agent failed", after: float = 5.0) -> Reply:
        return Reply("failed", error=error, after=after)


def parse_event_name(name: str) -> tuple[str, str, int]:
    """``result:<step>:<attempt>`` / ``compensation-result:<step>:<attempt>`` -> (kind, step, attempt)."""
    prefix, _, rest = name.partition(":")
    step_id, _, attempt = rest.rpartition(":")
    return ("work" if prefix == "result" else "compensate"), step_id, int(attempt)


@dataclass
class Scheduled:
    """A numbered task the orchestrator scheduled, as the host recorded it."""

    task_id: int
    kind: str  # "activity" | "timer" | "sub_orchestration" | "continue_as_new"
    name: str | None
    input: Any
    scheduled_at: datetime
    episode: int
    fire_at: datetime | None = None
    instance_id: str | None = None
    cancelled: bool = False
    completed: bool = False


@dataclass(order=True)
class _Happening:
    at: datetime
    seq: int
    kind: str = field(compare=False)  # "task" | "event"
    task_id: int | None = field(default=None, compare=False)
    event_name: str | None = field(default=None, compare=False)
    payload: Any = field(default=None, compare=False)


class Scenario:
    """The world outside the orchestrator: activity responders and agent replies.

    ``activities`` maps activity names to ``f(input, player) -> result`` (raise ``ActivityFailed``
    to fail it). ``replies`` maps result event names (``result:<step>:<attempt>``) to a ``Reply``
    or ``None`` for silence; unlisted names get ``default_reply(name)``. ``sub_orchestrators`` maps
    orchestrator names to handlers that a nested player runs to completion.
    """

    def __init__(
        self,
        activities: dict[str, Callable[[Any, OrchestrationPlayer], Any]] | None = None,
        replies: dict[str, Reply | None] | None = None,
        default_reply: Callable[[str], Reply | None] | None = None,
        sub_orchestrators: dict[str, Callable[[str], str]] | None = None,
        activity_seconds: float = 1.0,
    ) -> None:
        self.activities = dict(activities or {})
        self.replies = dict(replies or {})
        self.default_reply = default_reply or (lambda name: Reply.succeed())
        self.sub_orchestrators = dict(sub_orchestrators or {})
        self.activity_seconds = activity_seconds
        self.players: list[OrchestrationPlayer] = []  # every player that ran under this scenario

    def reply_for(self, name: str) -> Reply | None:
        return self.replies[name] if name in self.replies else self.default_reply(name)


class OrchestrationPlayer:
    """Runs one orchestration instance episode by episode, as the host would."""

    def __init__(
        self,
        handler: Callable[[str], str],
        input_: Any,
        scenario: Scenario,
        *,
        instance_id: str = "inst-1",
        start: datetime = datetime(2030, 1, 1, tzinfo=UTC),
        name: str = "orchestrator",
        parent_instance_id: str | None = None,
        schema: dict[str, Any] | None = None,
        deliver_cancelled_timers: bool = True,
        batch_window: float | None = None,
        order: Callable[[list[Any]], list[Any]] | None = None,
    ) -> None:
        self.handler = handler
        self.input = input_
        self.scenario = scenario
        self.instance_id = instance_id
        self.name = name
        self.parent_instance_id = parent_instance_id
        self.schema = schema if schema is not None else SCHEMA_V3
        self.deliver_cancelled_timers = deliver_cancelled_timers
        # The backend hands an episode every message that is there (``batch_window`` seconds after
        # the first one), in the order ``order`` gives them; ``None`` means one event per episode.
        self.batch_window = batch_window
        self.order = order
        self.history = HistoryBuilder()
        self.now = start
        self.episodes: list[Episode] = []
        self.contexts: list[str] = []
        self.scheduled: list[Scheduled] = []
        self.waits: dict[str, int] = {}  # event name -> episode that first waited for it
        self.events_raised: list[tuple[datetime, str, Any]] = []
        self._queue: list[_Happening] = []
        self._seq = itertools.count()
        self._seen_numbered: list[dict[str, Any]] = []
        scenario.players.append(self)
        self.history.orchestrator_started(start).execution_started(name, input_)

    # -- one episode ------------------------------------------------------------------------------
    def run_episode(self) -> Episode:
        context = self.history.context_json(
            self.instance_id, self.input, self.parent_instance_id, self.schema
        )
        self.contexts.append(context)
        episode = run_orchestrator(self.handler, context)
        self.episodes.append(episode)
        self._check_determinism(episode)
        self._record_new_actions(episode)
        self.history.orchestrator_completed()
        return episode

    def _check_determinism(self, episode: Episode) -> None:
        numbered = episode.numbered_actions
        for index, before in enumerate(self._seen_numbered):
            if index >= len(numbered) and (episode.error or episode.is_done):
                break  # a failing or finishing episode may stop early; it adds nothing after this
            now = numbered[index] if index < len(numbered) else None
            comparable = {k: v for k, v in before.items() if k != "isCanceled"}
            if now is None or {k: v for k, v in now.items() if k != "isCanceled"} != comparable:
                raise NonDeterminism(f"action #{index} was {before}, replay produced {now}")

    def _record_new_actions(self, episode: Episode) -> None:
        numbered = episode.numbered_actions
        for task_id, action in enumerate(numbered):
            if task_id < len(self.scheduled):
                if action.get("isCanceled"):
                    self.scheduled[task_id].cancelled = True
                continue
            self._schedule(task_id, action)
        self._seen_numbered = numbered
        for action in episode.actions:
            if action.get("actionType") == WAIT_FOR_EXTERNAL_EVENT:
                self._wait(action["externalEventName"])

    def _schedule(self, task_id: int, action: dict[str, Any]) -> None:
        kind = action["actionType"]
        episode = len(self.episodes) - 1
        if kind in (CALL_ACTIVITY, CALL_ACTIVITY_WITH_RETRY):
            item = Scheduled(
                task_id, "activity", action["functionName"], json.loads(action["input"]), self.now, episode
            )
            self.history.task_scheduled(task_id, item.name, action["input"])
            self._push(self.now + timedelta(seconds=self.scenario.activity_seconds), "task", task_id=task_id)
        elif kind == CREATE_TIMER:
            fire_at = parse_time(action["fireAt"])
            item = Scheduled(task_id, "timer", None, None, self.now, episode, fire_at=fire_at)
            item.cancelled = bool(action.get("isCanceled"))
            self.history.timer_created(task_id, action["fireAt"])
            self._push(max(fire_at, self.now), "task", task_id=task_id)
        elif kind in (CALL_SUB_ORCHESTRATOR, CALL_SUB_ORCHESTRATOR_WITH_RETRY):
            item = Scheduled(
                task_id,
                "sub_orchestration",
                action["functionName"],
                json.loads(action["input"]),
                self.now,
                episode,
                instance_id=action.get("instanceId"),
            )
            self.history.sub_orchestration_created(task_id, item.name, item.instance_id, action["input"])
            self._push(self.now, "task", task_id=task_id)
        elif kind == CONTINUE_AS_NEW:
            item = Scheduled(task_id, "continue_as_new", None, json.loads(action["input"]), self.now, episode)
        else:
            raise NotImplementedError(f"action type {kind} is not simulated: {action}")
        self.scheduled.append(item)

    def _wait(self, name: str) -> None:
        if name in self.waits:
            return
        self.waits[name] = len(self.episodes) - 1
        reply = self.scenario.reply_for(name)
        if reply is None:
            return
        kind, step_id, attempt = parse_event_name(name)
        payload = self.result_message(kind, step_id, attempt, reply)
        self._push(self.now + timedelta(seconds=reply.after), "event", event_name=name, payload=payload)

    def result_message(self, kind: str, step_id: str, attempt: int, reply: Reply) -> dict[str, Any]:
        """The ``ResultMessage`` an agent would send for this attempt."""
        dispatch = self.last_dispatch(step_id, attempt, kind)
        return {
            "kind": kind,
            "instance_id": dispatch["instance_id"] if dispatch else self.instance_id,
            "orchestration_id": self.instance_id,
            "step_id": step_id,
            "attempt": attempt,
            "outcome": reply.outcome,
            "output": reply.output,
            "error": reply.error,
        }

    def raise_event_later(self, seconds: float, name: str, payload: Any) -> None:
        """Have ``name`` raised ``seconds`` from now, whether or not anything waits for it yet."""
        self._push(self.now + timedelta(seconds=seconds), "event", event_name=name, payload=payload)

    def _push(self, at: datetime, kind: str, **fields: Any) -> None:
        heapq.heappush(self._queue, _Happening(at, next(self._seq), kind, **fields))

    # -- completions (each starts a new episode) --------------------------------------------------
    def _begin(self, at: datetime) -> None:
        self.now = max(self.now, at)
        self.history.orchestrator_started(self.now)

    def _complete(self, happening: _Happening, begin: Callable[[datetime], None] | None = None) -> bool:
        """Append the completion for ``happening``; False when it no longer matters (nothing appended).

        ``begin`` opens the episode (by default, one episode per completion)."""
        begin = begin or self._begin
        if happening.kind == "event":
            begin(happening.at)
            self.history.event_raised(happening.event_name, happening.payload)
            self.events_raised.append((self.now, happening.event_name, happening.payload))
            return True
        item = self.scheduled[happening.task_id]
        if item.kind == "timer":
            if item.cancelled and not self.deliver_cancelled_timers:
                return False
            begin(happening.at)
            self.history.timer_fired(item.task_id, iso_z(item.fire_at))
        elif item.kind == "activity":
            begin(happening.at)
            responder = self.scenario.activities.get(item.name)
            if responder is None:
                raise LookupError(f"scenario has no responder for activity {item.name!r}")
            try:
                result = responder(item.input, self)
            except ActivityFailed as exc:
                self.history.task_failed(
                    item.task_id, activity_failure_reason(item.name, exc), activity_failure_details(exc)
                )
            else:
                self.history.task_completed(item.task_id, result)
        elif item.kind == "sub_orchestration":
            child = OrchestrationPlayer(
                self.scenario.sub_orchestrators[item.name],
                item.input,
                self.scenario,
                instance_id=item.instance_id or f"{self.instance_id}:sub{item.task_id}",
                start=self.now,
                name=item.name,
                parent_instance_id=self.instance_id,
                schema=self.schema,
                deliver_cancelled_timers=self.deliver_cancelled_timers,
            )
            final = child.play()
            begin(child.now)
            if final.error:
                self.history.sub_orchestration_failed(
                    item.task_id,
                    orchestrator_failure_reason(item.name, final.error),
                    orchestrator_failure_details(final.error),
                )
            else:
                self.history.sub_orchestration_completed(item.task_id, final.output)
        item.completed = True
        return True

    # -- the loop ---------------------------------------------------------------------------------
    def play(self, max_episodes: int = 500, stop_after: int | None = None) -> Episode:
        """Run until the orchestration finishes, fails, continues as new, or nothing is left to
        happen; ``stop_after`` pauses after that many episodes in total (``play`` again resumes)."""
        episode = self.episodes[-1] if self.episodes else self.run_episode()
        while not (episode.is_done or episode.error):
            if stop_after is not None and len(self.episodes) >= stop_after:
                return episode
            if len(self.episodes) >= max_episodes:
                raise AssertionError(f"no end after {max_episodes} episodes")
            if not self._queue:
                return episode  # waiting for something no one will send
            if self._deliver(self._next_batch()):
                episode = self.run_episode()
        return episode

    def _next_batch(self) -> list[_Happening]:
        batch = [heapq.heappop(self._queue)]
        if self.batch_window is not None:
            limit = batch[0].at + timedelta(seconds=self.batch_window)
            while self._queue and self._queue[0].at <= limit:
                batch.append(heapq.heappop(self._queue))
        return self.order(batch) if self.order else batch

    def _deliver(self, batch: list[_Happening]) -> bool:
        """Append the batch's completions after one OrchestratorStarted (at the latest of their times)."""
        latest = max(h.at for h in batch)
        started = False

        def begin(at: datetime) -> None:
            nonlocal started
            if not started:
                self._begin(max(at, latest))
                started = True

        appended = [self._complete(happening, begin) for happening in batch]
        return any(appended)

    # -- views for assertions ---------------------------------------------------------------------
    def activities(self, name: str | None = None) -> list[Scheduled]:
        return [s for s in self.scheduled if s.kind == "activity" and (name is None or s.name == name)]

    def activity_names(self) -> list[str]:
        return [s.name for s in self.activities() if s.name]

    def timers(self) -> list[Scheduled]:
        return [s for s in self.scheduled if s.kind == "timer"]

    def last_dispatch(self, step_id: str, attempt: int, kind: str = "work") -> dict[str, Any] | None:
        for item in reversed(self.activities()):
            data = item.input
            if (
                isinstance(data, dict)
                and (data.get("step_id"), data.get("attempt"), data.get("kind", "work"))
                == (step_id, attempt, kind)
                and "deadline" in data
            ):
                return data
        return None

    def continued_as_new(self) -> Scheduled | None:
        return next((s for s in self.scheduled if s.kind == "continue_as_new"), None)

    def iter_players(self) -> Iterator[OrchestrationPlayer]:
        yield from self.scenario.players


def play_generations(
    handler: Callable[[str], str], input_: Any, scenario: Scenario, max_generations: int = 20, **kwargs: Any
) -> list[OrchestrationPlayer]:
    """Play an orchestration through its continue_as_new generations (same instance id, fresh
    history each time, like the host); the last player holds the final episode."""
    players: list[OrchestrationPlayer] = []
    start = kwargs.pop("start", datetime(2030, 1, 1, tzinfo=UTC))
    for _ in range(max_generations):
        player = OrchestrationPlayer(handler, input_, scenario, start=start, **kwargs)
        players.append(player)
        player.play()
        continued = player.continued_as_new()
        if continued is None or not player.episodes[-1].is_done:
            return players
        input_ = continued.input
        start = player.now
    raise AssertionError(f"still continuing as new after {max_generations} generations")
