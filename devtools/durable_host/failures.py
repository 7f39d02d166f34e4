"""Failure shapes: how the extension reports a failed activity or orchestration."""

from __future__ import annotations

import json
import traceback

_OUT_OF_PROC_MARKER = "$OutOfProcData$:"


def parse_failure(exc: Exception) -> tuple[dict, str, str]:
    """Split the SDK's failure form: ``<message>\\n\\n$OutOfProcData$:<state JSON>``."""
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
