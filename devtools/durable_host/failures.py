"""Failure shapes: the exact text the extension puts in a failed task's Reason and Details.

Orchestrators branch on these strings (they are all an orchestrator sees of a failure: the SDK
raises ``Exception(f"{Reason} \\n {Details}")``), so the host and the tests' history builder write
them the way the extension does; the extension's sources for each shape: docs/durable-test-host.md,
"Fidelity" (activity and orchestrator failure shapes, terminated child).
"""

from __future__ import annotations

import json
import traceback

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
