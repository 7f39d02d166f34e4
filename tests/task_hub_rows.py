"""Write orchestration histories into Azurite as the Durable Task Framework's Azure Storage provider
writes them, so that ``sas replay-check --live`` is tested against the backend's own row format.

Follows ``AzureTableTrackingStore.UpdateStateAsync`` / ``UploadHistoryBatch`` and
``TableEntityConverter.Serialize`` (Azure/durabletask, src/DurableTask.AzureStorage; the lines are
cited in docs/platform.md, "The Azure Storage provider's history rows"):

- one row per event, ``PartitionKey`` the escaped instance id, ``RowKey`` the event's sequence
  number in the execution as 16 upper-case hex digits, ``ExecutionId`` the generation's;
- every ``[DataMember]`` of the event's class a property (the C# default where the recording has
  none): enums (``EventType``, ``OrchestrationStatus``) as their names, ``string``/``int``/``bool``/
  ``DateTime`` as table types, other members as Json.NET text; ``Timestamp`` stored as ``_Timestamp``;
- a property over 60 KB (as UTF-16) gzip-compressed into ``<taskhub>-largemessages`` as
  ``<pk>/history-<RowKey>-<EventType>-<random 8 hex>-<Property>.json.gz``, the property left empty
  and the blob's name in ``<Property>BlobName``;
- each episode's new events and the ``sentinel`` row (``ExecutionId``, ``IsCheckpointComplete``,
  ``CheckpointCompletedTimestamp``) in one entity-group transaction of upserts (at most 99 events);
- the ``Instances`` row merged with what the episode changed; a continue-as-new starts a new
  ``ExecutionId`` and rewrites the rows from 0, leaving a longer old generation's tail behind.
"""

from __future__ import annotations

import gzip
import json
import random
import uuid
from datetime import UTC, datetime
from typing import Any

from azure.data.tables import TableServiceClient, UpdateMode
from azure.storage.blob import BlobServiceClient

from devtools.durable_host.history import parse_time
from devtools.live_history import (
    EVENT_TYPES,
    SENTINEL,
    TaskHub,
    escape_partition_key,
)

MAX_TABLE_PROPERTY_BYTES = 60 * 1024  # AzureTableTrackingStore.MaxTablePropertySizeInBytes
# VariableSizeEntityProperties, read from the provider again rather than imported from the reader
# (devtools.live_history.BLOB_MEMBERS): a member the reader forgot must fail the round trip.
VARIABLE_SIZE = (
    "Name",
    "Input",
    "Result",
    "Output",
    "Reason",
    "Details",
    "Correlation",
    "FailureDetails",
    "Tags",
)

# The [DataMember]s of each DurableTask.Core.History class below HistoryEvent's own (EventId,
# IsPlayed, Timestamp, EventType), with the type that decides how the converter stores them.
_COMPLETED = {"OrchestrationStatus": "enum", "Result": "str", "FailureDetails": "json"}
_FAILED = {"TaskScheduledId": "int", "Reason": "str", "Details": "str", "FailureDetails": "json"}
MEMBERS: dict[str, dict[str, str]] = {
    "ExecutionStarted": {
        "OrchestrationInstance": "json",
        "ParentInstance": "json",
        "Name": "str",
        "Version": "str",
        "Input": "str",
        "Tags": "json",
        "Correlation": "str",
        "ParentTraceContext": "json",
        "ScheduledStartTime": "datetime?",
        "Generation": "int?",
        "GenerateNewTrace": "bool",
    },
    "ExecutionCompleted": _COMPLETED,
    "ContinueAsNew": _COMPLETED,
    "ExecutionTerminated": {"Input": "str"},
    "TaskScheduled": {
        "Name": "str",
        "Version": "str",
        "Input": "str",
        "ParentTraceContext": "json",
        "Tags": "json",
    },
    "TaskCompleted": {"TaskScheduledId": "int", "Result": "str"},
    "TaskFailed": _FAILED,
    "SubOrchestrationInstanceCreated": {
        "Name": "str",
        "Version": "str",
        "InstanceId": "str",
        "Input": "str",
        "ClientSpanId": "str",
        "Tags": "json",
    },
    "SubOrchestrationInstanceCompleted": {"TaskScheduledId": "int", "Result": "str"},
    "SubOrchestrationInstanceFailed": _FAILED,
    "TimerCreated": {"FireAt": "datetime"},
    "TimerFired": {"TimerId": "int", "FireAt": "datetime"},
    "OrchestratorStarted": {},
    "OrchestratorCompleted": {},
    "EventSent": {"InstanceId": "str", "Name": "str", "Input": "str"},
    "EventRaised": {"Name": "str", "Input": "str", "ParentTraceContext": "json"},
    "GenericEvent": {"Data": "str"},
    "HistoryState": {"State": "json"},
    "ExecutionSuspended": {"Reason": "str"},
    "ExecutionResumed": {"Reason": "str"},
}
_DEFAULTS = {"int": 0, "bool": False}  # a value type the recording leaves out: its C# default


def provider_defaults(event: dict[str, Any]) -> dict[str, Any]:
    """What the reader returns for the members a recording leaves out: the C# defaults the provider
    stores for them (``null`` objects as Json.NET's ``null``; a null string or nullable is no property)."""
    kind = EVENT_TYPES[event["EventType"]]
    out: dict[str, Any] = {}
    for member, type_ in MEMBERS[kind].items():
        if member in event:
            continue
        if type_ == "json":
            out[member] = None
        elif type_ in _DEFAULTS:
            out[member] = _DEFAULTS[type_]
    return out


def _json_net(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def entity_of(event: dict[str, Any], partition_key: str, sequence: int, execution_id: str) -> dict[str, Any]:
    """``TableEntityConverter.Serialize(historyEvent)`` plus the keys and ``ExecutionId``."""
    kind = EVENT_TYPES[event["EventType"]]
    row: dict[str, Any] = {
        "PartitionKey": partition_key,
        "RowKey": f"{sequence:016X}",
        "EventId": int(event.get("EventId", -1)),
        "IsPlayed": bool(event.get("IsPlayed", False)),
        "_Timestamp": parse_time(event["Timestamp"]),
        "EventType": kind,
    }
    for member, type_ in MEMBERS[kind].items():
        value = event.get(member)
        if type_ == "json":
            row[member] = _json_net(value)
        elif value is not None:
            row[member] = parse_time(value) if type_.startswith("datetime") else value
        elif type_ in _DEFAULTS:
            row[member] = _DEFAULTS[type_]
    row["ExecutionId"] = execution_id
    return row


def blob_name(row: dict[str, Any], member: str) -> str:
    """``AzureTableTrackingStore.GetBlobName``."""
    return (
        f"{row['PartitionKey']}/history-{row['RowKey']}-{row['EventType']}-"
        f"{random.getrandbits(32):08X}-{member}.json.gz"
    )


def too_large(value: Any) -> bool:
    return isinstance(value, str) and len(value.encode("utf-16-le")) > MAX_TABLE_PROPERTY_BYTES


def episodes(history: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The events as the provider appends them: one batch per episode (from each OrchestratorStarted)."""
    batches: list[list[dict[str, Any]]] = []
    for event in history:
        if event["EventType"] == 12 or not batches:
            batches.append([])
        batches[-1].append(event)
    return batches


def running(history: list[dict[str, Any]], episodes_done: int | None = None) -> list[dict[str, Any]]:
    """A finished history as it stood while the instance ran: its first ``episodes_done`` episodes
    (default: all but the last), without the events that end an execution."""
    batches = episodes(history)
    kept = batches[: (len(batches) - 1 if episodes_done is None else episodes_done)]
    return [e for batch in kept for e in batch if e["EventType"] not in (1, 3, 16)]


_STATUS_OF_END = {1: None, 3: "Terminated", 16: "ContinuedAsNew"}


class TaskHubWriter:
    """Writes instances into one task hub on one storage account, as the provider does."""

    def __init__(self, connection_string: str, hub: TaskHub) -> None:
        self.hub = hub
        self._tables = TableServiceClient.from_connection_string(connection_string)
        self.history = self._tables.create_table_if_not_exists(hub.history_table)
        self.instances = self._tables.create_table_if_not_exists(hub.instances_table)
        blobs = BlobServiceClient.from_connection_string(connection_string)
        self.container = blobs.get_container_client(hub.large_messages)
        if not self.container.exists():
            self.container.create_container()
        self.blobs_written: list[str] = []

    def close(self) -> None:
        self._tables.close()
        self.container.close()

    def _offload(self, row: dict[str, Any]) -> dict[str, Any]:
        """``CompressLargeMessageAsync``: large properties to gzip blobs."""
        for member in VARIABLE_SIZE:
            if too_large(row.get(member)):
                name = blob_name(row, member)
                self.container.upload_blob(name, gzip.compress(row[member].encode("utf-8")), overwrite=True)
                self.blobs_written.append(name)
                row[member] = ""
                row[f"{member}BlobName"] = name
        return row

    def write_instance(self, instance_id: str, generations: list[list[dict[str, Any]]]) -> list[str]:
        """Every generation of one instance in order, episode by episode; their execution ids."""
        pk = escape_partition_key(instance_id)
        executions = []
        for history in generations:
            execution_id = uuid.uuid4().hex
            executions.append(execution_id)
            instance: dict[str, Any] = {"PartitionKey": pk, "RowKey": "", "TaskHubName": self.hub.name}
            sequence = 0
            for batch in episodes(history):
                rows = [
                    self._offload(entity_of(e, pk, sequence + i, execution_id)) for i, e in enumerate(batch)
                ]
                sequence += len(rows)
                for start in range(0, len(rows), 99):
                    part = rows[start : start + 99]
                    sentinel = {
                        "PartitionKey": pk,
                        "RowKey": SENTINEL,
                        "ExecutionId": execution_id,
                        "IsCheckpointComplete": start + 99 >= len(rows),
                        "CheckpointCompletedTimestamp": datetime.now(UTC),
                    }
                    operations = [("upsert", r, {"mode": UpdateMode.REPLACE}) for r in part]
                    self.history.submit_transaction(
                        [*operations, ("upsert", sentinel, {"mode": UpdateMode.MERGE})]
                    )
                instance.update(self._instance_changes(pk, rows, batch))
            self.instances.upsert_entity(instance, mode=UpdateMode.MERGE)
        return executions

    def write_pending(self, instance_id: str, name: str, input_json: str) -> None:
        """``SetNewExecutionAsync``: a started instance no worker has picked up (no history yet)."""
        now = datetime.now(UTC)
        self.instances.create_entity(
            {
                "PartitionKey": escape_partition_key(instance_id),
                "RowKey": "",
                "Input": input_json,
                "CreatedTime": now,
                "Name": name,
                "Version": "",
                "RuntimeStatus": "Pending",
                "LastUpdatedTime": now,
                "TaskHubName": self.hub.name,
                "ExecutionId": uuid.uuid4().hex,
                "Generation": 0,
                "Tags": "null",
            }
        )

    def _instance_changes(self, pk: str, rows: list[dict], batch: list[dict]) -> dict[str, Any]:
        """What ``UpdateStateAsync`` merges into the Instances row for one episode."""
        changes: dict[str, Any] = {
            "CustomStatus": "null",
            "ExecutionId": rows[0]["ExecutionId"],
            "LastUpdatedTime": rows[-1]["_Timestamp"],
        }
        for row, event in zip(rows, batch, strict=True):
            kind = event["EventType"]
            if kind == 0:
                changes.update(
                    Name=event["Name"],
                    Version=event.get("Version") or "",
                    CreatedTime=row["_Timestamp"],
                    RuntimeStatus="Running",
                    Tags=row["Tags"],
                    Generation=int(event.get("Generation") or 0),
                    Input=self._blob_url(row["InputBlobName"]) if "InputBlobName" in row else row["Input"],
                )
            elif kind in _STATUS_OF_END:
                status = _STATUS_OF_END[kind] or event["OrchestrationStatus"]
                changes.update(RuntimeStatus=status, Output=row.get("Result", row.get("Input")))
                if kind != 16:
                    changes["CompletedTime"] = datetime.now(UTC)
        return changes

    def _blob_url(self, name: str) -> str:
        """``MessageManager.GetBlobUrl``: the container's URI and the blob name."""
        return f"{self.container.url}/{name}"
