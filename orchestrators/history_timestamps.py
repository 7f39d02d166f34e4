"""Reads the timestamps of a replay's history events in microseconds instead of dozens of them.

azure-functions-durable parses each event's ``Timestamp`` with dateutil's general parser
(``HistoryEvent.dt_parse``): about 33 µs an event, 27 events a step (``bench/throughput.py``), the
largest cost of a replay after the orchestrator code. The extension writes Json.NET's round-trip UTC
form (``2026-12-03T19:31:54.1234567Z``); ``parse_history_timestamp`` reads exactly that with one
regular expression (six digits, truncated as dateutil does) and hands anything else to dateutil. ``Z``
becomes ``datetime.UTC`` rather than ``tzlocal()``: the same instant, offset and arithmetic.

If an SDK release no longer reads through ``dt_parse``, ``install()`` leaves it alone and logs why,
and ``tests/orchestrators/test_history_timestamps.py`` fails.
"""

from __future__ import annotations

import importlib
import logging
import re
from datetime import UTC, datetime
from typing import Any

from dateutil.parser import parse as dateutil_parse

SDK_MODULE = "azure.durable_functions.models.history.HistoryEvent"

_ROUND_TRIP_UTC = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,7}))?Z\Z", re.ASCII)

_log = logging.getLogger(__name__)


def parse_history_timestamp(text: Any) -> datetime:
    """The instant a history event's ``Timestamp`` names, as dateutil's ``parse`` would read it."""
    match = _ROUND_TRIP_UTC.match(text) if isinstance(text, str) else None
    if match is None:
        return dateutil_parse(text)
    *date_and_time, fraction = match.groups()
    try:
        return datetime(*map(int, date_and_time), int((fraction or "0")[:6].ljust(6, "0")), UTC)
    except ValueError:  # out of range (a 24th hour, a 30th of February): dateutil decides
        return dateutil_parse(text)


def install() -> bool:
    """Make the Durable SDK read history timestamps with ``parse_history_timestamp``; whether it is."""
    module = importlib.import_module(SDK_MODULE)
    current = getattr(module, "dt_parse", None)
    if current is parse_history_timestamp:
        return True
    if current is not dateutil_parse:
        _log.warning(
            "%s.dt_parse is %r, not dateutil's parse: history timestamps are read the SDK's way",
            SDK_MODULE,
            current,
        )
        return False
    module.dt_parse = parse_history_timestamp  # type: ignore[attr-defined]
    return True
