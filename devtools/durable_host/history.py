"""History events, actions, the context's schema fields and failure texts as the Durable Functions
extension exchanges them with the Python SDK; shared by the host's episodes and the replay check,
which must hand the orchestrator the same context shape (docs/durable-test-host.md, "History").

Orchestrators branch on the failure texts (they are all an orchestrator sees of a failure: the SDK
raises ``Exception(f"{Reason} \\n {Details}")``), so the host and the tests' history builder write
them the way the extension does; its sources: docs/durable-test-host.md, "Fidelity".
"""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from azure.durable_functions.constants import DATETIME_STRING_FORMAT
from azure.durable_functions.models.actions.ActionType import ActionType
from azure.durable_functions.models.history.HistoryEventType import HistoryEventType
from azure.functions._durable_functions import OrchestrationContext
from dateutil.parser import isoparse


def format_time(when: datetime) -> str:
    """A timestamp as the extension writes history times (docs/durable-test-host.md, "History")."""
    text = when.astimezone(UTC).strftime(DATETIME_STRING_FORMAT)  # ...:05.250000Z
    whole, fraction = text[:-1].split(".")
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"


def parse_time(text: str) -> datetime:
    return isoparse(text).astimezone(UTC)  # the SDK and the extension write every time with its Z


def json_value(text: Any) -> Any:
    """A serialised input or output as a JSON value (text that is not JSON stays text)."""
    with contextlib.suppress(ValueError):
        return json.loads(text) if isinstance(text, str) else text
    return text


def make_event(event_type: HistoryEventType, when: datetime, event_id: int = -1, **fields: Any) -> dict:
    event = {
        "EventType": int(event_type),
        "EventId": event_id,
        "IsPlayed": False,
        "Timestamp": format_time(when),
    }
    return {**event, **fields}


def flatten_actions(actions: list) -> Iterator[dict]:
    """Actions in the order the extension invokes (and numbers) them: V1's nested lists and the
    ``WhenAny``/``WhenAll`` compound actions flattened."""
    for entry in actions or []:
        if isinstance(entry, list):
            yield from flatten_actions(entry)
        elif entry.get("actionType") in (ActionType.WHEN_ANY, ActionType.WHEN_ALL):
            yield from flatten_actions(entry.get("compoundActions") or [])
        else:
            yield entry


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def event_label(event: dict) -> str:
    """A short human description of a history event, for timelines."""
    kind = HistoryEventType(event["EventType"])
    name = kind.name.title().replace("_", "")
    if kind in (HistoryEventType.TASK_COMPLETED, HistoryEventType.SUB_ORCHESTRATION_INSTANCE_COMPLETED):
        return f"{name}(#{event['TaskScheduledId']}, {_short(event.get('Result'))})"
    if kind in (HistoryEventType.TASK_FAILED, HistoryEventType.SUB_ORCHESTRATION_INSTANCE_FAILED):
        return f"{name}(#{event['TaskScheduledId']}, {_short(event.get('Reason'))})"
    if kind == HistoryEventType.TIMER_FIRED:
        return f"{name}(#{event['TimerId']})"
    if kind == HistoryEventType.EVENT_RAISED:
        return f"{name}({event['Name']!r}, {_short(event.get('Input'))})"
    if kind == HistoryEventType.EXECUTION_STARTED:
        return f"{name}({event['Name']!r}, input={_short(event.get('Input'))})"
    return name


def action_label(kind: Any) -> str:
    """An action type's name, for messages (``CALL_HTTP``; ``action type 99`` when unknown)."""
    try:
        return ActionType(kind).name
    except ValueError:
        return f"action type {kind}"


def unknown_function(name: str, role: str) -> str:
    """The extension's answer to a call of an activity or orchestrator ``role`` the app does not have."""
    return f"The function '{name}' doesn't exist, is disabled, or is not an {role} function."


def schema_fields(schema_version: int) -> dict:
    """The schema part of the context JSON (docs/durable-test-host.md, "Schema version")."""
    if schema_version < 2:
        return {"upperSchemaVersion": schema_version}
    return {
        "upperSchemaVersion": 1,
        "upperSchemaVersionNew": 2,
        # the Azure Storage provider's long-timer defaults, as Newtonsoft writes a .NET ``TimeSpan``
        "longRunningTimerIntervalDuration": "3.00:00:00",
        "maximumShortTimerDuration": "6.00:00:00",
        "defaultHttpAsyncRequestSleepTimeMillseconds": 30000,
    }


def replay(handler: Callable[[Any], Any], context: dict) -> dict:
    """One call of an orchestrator handler, as the worker makes it: context JSON in, state out."""
    raw = handler(OrchestrationContext(json.dumps(context)))
    return json.loads(raw) if isinstance(raw, str) else raw


_OUT_OF_PROC_MARKER = "$OutOfProcData$:"
_RPC_EXCEPTION = "Microsoft.Azure.WebJobs.Script.Workers.Rpc.RpcException"


def activity_failure(name: str, exc: BaseException) -> tuple[str, str]:
    """(Reason, Details) of the TaskFailed for activity ``name`` that raised ``exc``.

    Details is ``Utils.SerializeCause``: the .NET exception as Newtonsoft JSON with type names. The
    outer exception carries the friendly message; its inner exception is the worker's RPC exception,
    whose message holds the Python type, message and stack.
    """
    # ``OutOfProcExceptionHelpers`` keeps everything after "\nException:" of the worker's text,
    # leading space included: hence the two spaces after "failed:".
    friendly = f" {type(exc).__name__}: {exc}"
    stack = "".join(traceback.format_tb(exc.__traceback__))
    rpc_message = f"Result: Failure\nException:{friendly}\nStack: {stack}"
    details = json.dumps(
        {
            "$type": "System.Exception, System.Private.CoreLib",
            "ClassName": "System.Exception",
            "Message": friendly,
            "Data": None,
            "InnerException": {
                "$type": f"{_RPC_EXCEPTION}, Microsoft.Azure.WebJobs.Script",
                "ClassName": _RPC_EXCEPTION,
                "Message": rpc_message,
                "Data": None,
                "InnerException": None,
                "RemoteStackTraceString": stack,
                "HResult": -2146233088,
            },
            "HelpURL": None,
            "StackTraceString": None,
            "RemoteStackTraceString": None,
            "HResult": -2146233088,
            "Source": None,
        }
    )
    return f"Activity function '{name}' failed: {friendly}", details


def orchestrator_failure(name: str, error: str, stack: str) -> tuple[str, str]:
    """(Reason, Details) of an orchestrator that raised: its output and what its parent hears."""
    return f"Orchestrator function '{name}' failed: {error}", f"Message: {error}, StackTrace: {stack}"


def parse_failure(exc: Exception) -> tuple[dict, str, str]:
    """Split the SDK's failure form ``<message>\\n\\n$OutOfProcData$:<state JSON>`` into
    (state, error, stack); ``error`` is the state's ``error`` field, which the extension reports."""
    message = str(exc)
    cause = exc.__cause__ or exc
    details = "".join(traceback.format_exception(cause))
    marker = message.find(_OUT_OF_PROC_MARKER)
    if marker < 0:
        return {}, message or type(exc).__name__, details
    try:
        state = json.loads(message[marker + len(_OUT_OF_PROC_MARKER) :])
    except ValueError:
        state = {}
    error = state.get("error") or message[:marker].strip() or type(exc).__name__
    return state, error, details
