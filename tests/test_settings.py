"""The optional features' settings (``workflow_core.settings``): documented with their defaults, read per
feature with a one-line error naming the bad setting, the canary's period derived from its schedule
(or refused), and the NCRONTAB schedules the maintenance timer reads (pure: no Azurite)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflow_core.schedules import Schedule
from workflow_core.settings import (
    FEATURE_SETTINGS,
    SettingsError,
    bulk_settings,
    canary_settings,
    feature_errors,
    retention_settings,
)

ROOT = Path(__file__).resolve().parents[1]


def test_operations_md_documents_every_feature_setting_with_its_default():
    text = (ROOT / "docs" / "operations.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| (.+?) \|", text, flags=re.M))
    documented = {name: default for group in FEATURE_SETTINGS.values() for name, default in group.items()}
    assert rows == {name: f"`{d}`" if d else "(unset)" for name, d in documented.items()}
    assert retention_settings({}).days == 30 and retention_settings({}).batch_size == 50
    assert bulk_settings({}).rate_per_second == 20
    assert canary_settings({}).enabled is False and canary_settings({}).period == timedelta(hours=1)
    assert feature_errors({}) == {}


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"RETENTION_DAYS": "thirty"}, "RETENTION_DAYS must be an integer, got 'thirty'"),
        ({"RETENTION_DAYS": "0"}, "RETENTION_DAYS must be >= 1, got 0"),
        ({"RETENTION_DAYS": "99999"}, "RETENTION_DAYS is 99999; at most 36500 (100 years)"),
        ({"RETENTION_SCHEDULE": "hourly"}, "RETENTION_SCHEDULE: 'hourly' is not a six-field NCRONTAB"),
        ({"BULK_RATE_PER_SECOND": "-1"}, "BULK_RATE_PER_SECOND must be >= 1, got -1"),
        ({"BULK_SCHEDULE": "*/30 * * * * MON"}, "BULK_SCHEDULE: '*/30 * * * * MON': 'MON'"),
        ({"CANARY_ENABLED": "maybe"}, "CANARY_ENABLED must be one of true, yes, on, 1, false, no, off, 0"),
        ({"CANARY_SCHEDULE": "0 0 9 * * 1"}, "CANARY_SCHEDULE: '0 0 9 * * 1' does not repeat every day"),
        ({"CANARY_SCHEDULE": "0 0,10 * * * *"}, "does not repeat at even gaps (600 s and 3000 s)"),
        ({"CANARY_SCHEDULE": "0 70 * * * *"}, "CANARY_SCHEDULE: '0 70 * * * *': '70' is outside 0-59"),
    ],
)
def test_a_bad_value_disables_its_feature_alone_with_one_line_naming_it(env, error):
    errors = feature_errors(env)
    (feature,) = errors
    assert error in errors[feature] and "\n" not in errors[feature]
    assert env.keys() <= FEATURE_SETTINGS[feature].keys()
    with pytest.raises(SettingsError, match=re.escape(error)):
        {"canary": canary_settings, "retention": retention_settings, "bulk": bulk_settings}[feature](env)


@pytest.mark.parametrize(
    ("schedule", "period"),
    [("0 0 * * * *", 3600), ("0 */15 * * * *", 900), ("0 0 */2 * * *", 7200), ("0 30 9 * * *", 86_400)],
)
def test_the_canary_period_is_derived_from_its_schedule(schedule, period):
    assert canary_settings({"CANARY_SCHEDULE": schedule}).period == timedelta(seconds=period)


def test_a_schedule_is_due_when_an_occurrence_falls_in_the_window():
    noon = datetime(2030, 1, 7, 12, 0, tzinfo=UTC)  # a Monday
    hourly = Schedule.parse("0 0 * * * *")
    assert hourly.due(noon - timedelta(seconds=30), noon)
    assert not hourly.due(noon, noon + timedelta(seconds=30))  # the start is not in the window
    weekly = Schedule.parse("0 0 12 * * 1")
    assert weekly.due(noon - timedelta(seconds=1), noon)
    assert not weekly.due(noon + timedelta(days=1) - timedelta(seconds=1), noon + timedelta(days=1))
    assert Schedule.parse("*/30 * * * * *").due(noon, noon + timedelta(seconds=30))


def _every_occurrence_gap(schedule: Schedule) -> int | None:
    """The longest gap by listing every occurrence in two years (what ``longest_gap`` must equal)."""
    second, minute, hour, days, months, weekdays = schedule.fields
    times = sorted(h * 3600 + m * 60 + s for h in hour for m in minute for s in second)
    start = date(2024, 1, 1)
    occurrences = [
        n * 86_400 + t
        for n in range(2 * 366)
        if (d := start + timedelta(days=n)).day in days
        and d.month in months
        and d.isoweekday() % 7 in weekdays
        for t in times
    ]
    return max((b - a for a, b in pairwise(occurrences)), default=None)


def _field_text(values: list[int]) -> str:
    return ",".join(str(v) for v in sorted(set(values)))


@settings(max_examples=60, deadline=None)
@given(
    seconds=st.lists(st.integers(0, 59), min_size=1, max_size=3),
    minutes=st.lists(st.integers(0, 59), min_size=1, max_size=3),
    hours=st.lists(st.integers(0, 23), min_size=1, max_size=4),
    days=st.one_of(st.just("*"), st.lists(st.integers(1, 31), min_size=1, max_size=3).map(_field_text)),
    months=st.one_of(st.just("*"), st.lists(st.integers(1, 12), min_size=1, max_size=3).map(_field_text)),
    weekdays=st.one_of(st.just("*"), st.lists(st.integers(0, 6), min_size=1, max_size=3).map(_field_text)),
)
def test_the_longest_gap_is_the_longest_between_listed_occurrences(
    seconds, minutes, hours, days, months, weekdays
):
    text = f"{_field_text(seconds)} {_field_text(minutes)} {_field_text(hours)} {days} {months} {weekdays}"
    schedule = Schedule.parse(text)
    expected = _every_occurrence_gap(schedule)
    if expected is None:
        with pytest.raises(ValueError, match="fires at most once"):
            schedule.longest_gap()
    else:
        assert schedule.longest_gap() == timedelta(seconds=expected)
