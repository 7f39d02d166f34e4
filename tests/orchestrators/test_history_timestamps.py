"""The scheduler reads history timestamps as dateutil would, without dateutil's cost per event."""

from __future__ import annotations

import importlib
import logging
from datetime import UTC, datetime, timedelta

import pytest
from azure.durable_functions.models.DurableOrchestrationContext import DurableOrchestrationContext
from dateutil.parser import parse as dateutil_parse
from hypothesis import given
from hypothesis import strategies as st

import orchestrators  # noqa: F401  (installs the parser, as the app's import does)
from orchestrators import history_timestamps
from orchestrators.history_timestamps import SDK_MODULE, parse_history_timestamp
from tests.durable_history import HistoryBuilder


def json_net_utc(when: datetime, extra_digit: int) -> str:
    """``when`` as Json.NET writes a UTC DateTime: seconds, then 7 fractional digits (100 ns ticks)
    with trailing zeros dropped (``FFFFFFF``; no dot at all when they are all zero), then ``Z``."""
    fraction = f"{when.microsecond:06d}{extra_digit}".rstrip("0")
    return when.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


@given(
    when=st.datetimes(min_value=datetime(1601, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
    extra_digit=st.integers(0, 9),
)
def test_every_timestamp_the_extension_writes_reads_as_the_same_instant_as_dateutil_reads_it(
    when: datetime, extra_digit: int
) -> None:
    text = json_net_utc(when, extra_digit)
    fast, slow = parse_history_timestamp(text), dateutil_parse(text)
    assert fast == slow
    assert fast.microsecond == slow.microsecond  # the seventh digit truncated, as dateutil does
    assert fast.utcoffset() == slow.utcoffset() == timedelta(0)
    assert fast.replace(tzinfo=None) == when.replace(tzinfo=None)


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-03T19:31:54.1234567+02:00",  # an offset
        "2026-12-03T19:31:54.12",  # no zone: naive, as dateutil reads it
        "2026-12-03 19:31:54Z",  # a space
        "20261203T193154Z",  # basic format
        "2026-12-03T19:31:54.12345678Z",  # eight digits
        "2026-12-03t19:31:54z",  # lower case
        "\uff12\uff10\uff12\uff16-12-03T19:31:54Z",  # digits other than ASCII's (full width)
    ],
)
def test_any_other_form_is_left_to_dateutil(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = parse_history_timestamp(text), dateutil_parse(text)
    assert fast == slow
    assert (fast.tzinfo is None) == (slow.tzinfo is None)
    assert fast.utcoffset() == slow.utcoffset()

    asked: list[str] = []
    monkeypatch.setattr(history_timestamps, "dateutil_parse", lambda t: asked.append(t) or slow)
    assert parse_history_timestamp(text) is slow
    assert asked == [text]


@pytest.mark.parametrize("text", ["2026-02-30T00:00:00Z", "2026-12-03T24:00:00Z", "2026-13-01T00:00:00Z"])
def test_an_impossible_date_is_refused_as_dateutil_refuses_it(text: str) -> None:
    with pytest.raises(ValueError) as slow:
        dateutil_parse(text)
    with pytest.raises(type(slow.value)):
        parse_history_timestamp(text)


def test_the_sdk_reads_a_replays_history_with_it() -> None:
    assert importlib.import_module(SDK_MODULE).dt_parse is parse_history_timestamp
    history = HistoryBuilder().orchestrator_started(datetime(2026, 12, 3, 19, 31, 54, tzinfo=UTC))
    history.execution_started("o", None)
    # as the extension writes them: seven fractional digits, and none at all
    history.events[0]["Timestamp"] = "2026-12-03T19:31:54.1234567Z"
    history.events[1]["Timestamp"] = "2026-12-03T19:31:55Z"
    context = DurableOrchestrationContext.from_json(history.context_json("i", None))
    assert context.current_utc_datetime == datetime(2026, 12, 3, 19, 31, 54, 123456, UTC)
    assert context.current_utc_datetime.tzinfo is UTC
    assert [e.timestamp for e in context.histories][1] == datetime(2026, 12, 3, 19, 31, 55, tzinfo=UTC)


def test_install_leaves_a_changed_sdk_alone_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    module = importlib.import_module(SDK_MODULE)

    def someone_elses(text: str) -> datetime:
        return datetime(2000, 1, 1, tzinfo=UTC)

    monkeypatch.setattr(module, "dt_parse", someone_elses)
    with caplog.at_level(logging.WARNING, logger=history_timestamps.__name__):
        assert history_timestamps.install() is False
    assert module.dt_parse is someone_elses
    assert "not dateutil's parse" in caplog.text

    monkeypatch.setattr(module, "dt_parse", dateutil_parse)
    assert history_timestamps.install() is True
    assert history_timestamps.install() is True  # idempotent
    assert module.dt_parse is parse_history_timestamp
