"""Reads the timestamps of a replay's history events in microseconds instead of dozens of them.

Every episode of an orchestration replays its whole history, and azure-functions-durable builds a
``HistoryEvent`` for each event, parsing its ``Timestamp`` with dateutil's general-purpose parser
(``HistoryEvent.py``: ``from dateutil.parser import parse as dt_parse``). That parser tokenises the
text and guesses its shape: about 33 microseconds per event on these machines, 27 events per step
in ``bench/throughput.py`` (a replay re-reads every earlier event), which made it the largest single
cost of a replay after the orchestrator code itself.

The extension serialises history with Json.NET, whose default date format is
``yyyy'-'MM'-'dd'T'HH':'mm':'ss.FFFFFFFK``: for the UTC times the Durable Task Framework records,
``2026-12-03T19:31:54.1234567Z``, 0 to 7 fractional digits (trailing zeros dropped), ``Z``.
``parse_history_timestamp`` reads exactly that form with one regular expression and ``datetime``;
anything else (no zone, an offset) goes to dateutil unchanged, so no input is read differently. Like
dateutil it keeps the first six fractional digits (truncated, not rounded). The one visible
difference: dateutil gives ``Z`` the machine's local zone object when that zone is UTC
(``tzlocal()``), this gives ``datetime.UTC``: the same instant, offset and arithmetic.

``install()`` swaps the SDK module's ``dt_parse`` for it; the scheduler's blueprint calls it on
import. If a new SDK release no longer reads timestamps through that name, ``install()`` leaves the
SDK alone and logs why, and ``tests/orchestrators/test_history_timestamps.py`` fails, so the pin
cannot move on without this being looked at again.
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
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        return datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int(fraction[:6].ljust(6, "0")) if fraction else 0,
            UTC,
        )
    except ValueError:  # out of range (a 24th hour, a 30th of February): dateutil decides
        return dateutil_parse(text)


def install() -> bool:
    """Make the Durable SDK read history timestamps with ``parse_history_timestamp``.

    Returns whether it is in place. Idempotent.
    """
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
