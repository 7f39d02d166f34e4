"""Read the histories of a task hub's running instances from the Durable backend's own store, the
Azure Storage provider's tables and blobs, as the replay check's recordings.

The Durable client's status API returns a history *view* (no ``EventId``, no ``TaskScheduledId``, no
activity inputs); the provider keeps the history the orchestrator replays, one ``<TaskHub>History``
row per event, large properties as gzip blobs in ``<taskhub>-largemessages``. Each row becomes the
event as the extension hands it to the Python worker, so :func:`devtools.replay_check.check_recording`
replays it unchanged. The rows' names, types and their source lines: docs/platform.md, "The Azure
Storage provider's history rows".
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from devtools.durable_host.history import HistoryEventType, format_time
from devtools.replay_check import Recording, recording_from

# DurableTask.Core.History.EventType's names by value (a row stores the name, the worker gets the
# number): the SDK's HistoryEventType, which stops one short of the last.
EVENT_TYPES = (
    *("".join(w.capitalize() for w in t.name.split("_")) for t in HistoryEventType),
    "ExecutionRewound",
)
# Members of a type the table converter does not store natively: written with Json.NET.
JSON_MEMBERS = frozenset(
    {"OrchestrationInstance", "ParentInstance", "Tags", "ParentTraceContext", "FailureDetails", "State"}
)
# The properties the tracking store moves to a blob when too large (VariableSizeEntityProperties).
BLOB_MEMBERS = frozenset(
    {"Name", "Input", "Result", "Output", "Reason", "Details", "Correlation", "FailureDetails", "Tags"}
)
TIMESTAMP = "_Timestamp"  # HistoryEvent.Timestamp: "Timestamp" is the table's own property
SENTINEL = "sentinel"
# The row's keys and the tracking store's own bookkeeping, not event members.
_NOT_MEMBERS = frozenset({"PartitionKey", "RowKey", "ExecutionId", "EventType"})
IN_FLIGHT = ("Running", "Pending", "Suspended", "ContinuedAsNew")  # will replay again


class LiveHistoryError(Exception):
    """A task hub's store could not be read as the provider writes it (the message says what)."""


@dataclass(frozen=True)
class TaskHub:
    """The names of a task hub's tables and large-message container (``TaskHubName`` setting)."""

    name: str

    @property
    def history_table(self) -> str:
        return f"{self.name}History"

    @property
    def instances_table(self) -> str:
        return f"{self.name}Instances"

    @property
    def large_messages(self) -> str:
        return f"{self.name.lower()}-largemessages"


_ESCAPES = {"^": "^^", "/": "^0", "\\": "^1", "#": "^2", "?": "^3"}
_UNESCAPES = {v[1]: k for k, v in _ESCAPES.items()}


def escape_partition_key(instance_id: str) -> str:
    """``KeySanitation.EscapePartitionKey``: the characters a PartitionKey cannot hold, escaped."""
    out = []
    for c in instance_id:
        control = ord(c) <= 0x1F or 0x7F <= ord(c) <= 0x9F
        out.append(_ESCAPES.get(c) or ("^" + chr(ord("À") + ord(c)) if control else c))
    return "".join(out)


def unescape_partition_key(key: str) -> str:
    """``KeySanitation.UnescapePartitionKey``."""
    out, chars = [], iter(key)
    for c in chars:
        if c == "^":
            c = next(chars, "")
            c = _UNESCAPES.get(c) or (c if c < "À" else chr(ord(c) - ord("À")))
        out.append(c)
    return "".join(out)


def json_time(value: Any) -> str:
    """A table DateTime as Json.NET writes a UTC DateTime (seven digits at most, zeros trimmed)."""
    raw = getattr(value, "tables_service_value", None)  # the service's text keeps 100 ns ticks
    if isinstance(raw, str) and raw.endswith("Z"):
        whole, _, fraction = raw[:-1].partition(".")
        fraction = fraction.rstrip("0")
        return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"
    if isinstance(value, datetime):
        return format_time(value if value.tzinfo else value.replace(tzinfo=UTC))
    raise LiveHistoryError(f"expected a DateTime, got {value!r}")


def event_from_row(row: dict[str, Any], blobs: Any = None) -> dict[str, Any]:
    """One history row as the event the extension hands to the Python worker."""
    row = dict(row)
    for member in BLOB_MEMBERS:
        name = row.pop(f"{member}BlobName", None)
        if isinstance(name, str):
            if blobs is None:
                raise LiveHistoryError(f"row {row.get('RowKey')}: {member} is in blob {name}, no container")
            row[member] = gzip.decompress(blobs.download_blob(name).readall()).decode("utf-8")
    kind = row.get("EventType")
    if kind not in EVENT_TYPES:
        raise LiveHistoryError(f"row {row.get('RowKey')}: EventType {kind!r} is not a DurableTask.Core event")
    event: dict[str, Any] = {"EventType": EVENT_TYPES.index(kind)}
    for key, value in row.items():
        if key in _NOT_MEMBERS:
            continue
        if key == TIMESTAMP or isinstance(value, datetime):
            event["Timestamp" if key == TIMESTAMP else key] = json_time(value)
        elif key in JSON_MEMBERS and isinstance(value, str):
            event[key] = json.loads(value) if value else None
        else:
            event[key] = value
    return event


def current_generation(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the current execution, as ``GetHistoryEventsAsync`` takes them: the sentinel's
    ``ExecutionId`` (else the first row's), rows in RowKey order up to the first of another
    generation (a continue-as-new rewrites the rows from 0; a longer old generation leaves its tail)."""
    sentinel = next((r for r in rows if r["RowKey"] == SENTINEL), None)
    events = sorted((r for r in rows if r["RowKey"] != SENTINEL), key=lambda r: r["RowKey"])
    if not events:
        return []
    execution = (sentinel or events[0]).get("ExecutionId")
    ended = next((n for n, row in enumerate(events) if row.get("ExecutionId") != execution), len(events))
    return events[:ended]


@dataclass
class LiveInstance:
    instance_id: str
    status: str
    input: str | None  # the Instances row's: the input, or a large one's blob URL


class TaskHubReader:
    """Reads a task hub's instances and histories with the given table and blob clients' factory
    (``workflow_core.storage_clients``: the same connection settings as the app)."""

    def __init__(self, hub: TaskHub, tables: Any, blobs: Any) -> None:
        self.hub = hub
        self._instances = tables(hub.instances_table)
        self._history = tables(hub.history_table)
        self._blobs = blobs  # container client, built only if a row names a blob

    def close(self) -> None:
        for client in (self._instances, self._history, self.__dict__.get("_container")):
            if client is not None:
                client.close()

    @functools.cached_property
    def _container(self) -> Any:
        return self._blobs(self.hub.large_messages)

    def in_flight(self, created_since: datetime | None = None) -> Iterator[LiveInstance]:
        """Orchestrations that will replay again (entities' ``@...`` rows left out), in table order."""
        parts = [f"({' or '.join(f'RuntimeStatus eq {s!r}' for s in IN_FLIGHT)})", "RowKey eq ''"]
        parameters: dict[str, Any] = {}
        if created_since is not None:
            parts.append("CreatedTime ge @since")
            parameters["since"] = created_since.astimezone(UTC)
        select = ["PartitionKey", "RuntimeStatus", "Input"]
        for row in self._instances.query_entities(" and ".join(parts), parameters=parameters, select=select):
            if not row["PartitionKey"].startswith("@"):
                key = unescape_partition_key(row["PartitionKey"])
                yield LiveInstance(key, str(row.get("RuntimeStatus")), row.get("Input"))

    def history(self, instance_id: str) -> list[dict[str, Any]]:
        """The current execution's events, large payloads resolved from their blobs."""
        pk = {"pk": escape_partition_key(instance_id)}
        rows = list(self._history.query_entities("PartitionKey eq @pk", parameters=pk))
        return [event_from_row(r, self._container) for r in current_generation(rows)]

    def recording(self, instance: LiveInstance) -> Recording | None:
        """The instance's current execution as a recording (None: nothing ran yet)."""
        history = self.history(instance.instance_id)
        started = next((e for e in history if e["EventType"] == 0), None)
        if started is None:
            return None
        generation = started.get("Generation") if (started.get("Generation") or 0) > 1 else None
        data = {"instanceId": instance.instance_id, "history": history, "generation": generation}
        return recording_from(data, "live")


def workflow_of(instance: LiveInstance, recording: Recording | None) -> str | None:
    """The workflow an instance runs: its input's ``workflow`` (every orchestrator's input names it)."""
    for text in (instance.input, recording.input if recording else None):
        try:
            value = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("workflow"), str):
            return value["workflow"]
    return None
