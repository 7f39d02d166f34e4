"""Each optional feature's settings (canary, retention, bulk operations; docs/operations.md, "Settings"),
read per feature and not at start: a bad value disables its feature with an error naming the setting
(logged, and a failing row in ``/api/diagnostics``), never the whole app."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from workflow_core.schedules import Schedule
from workflow_core.settings import SettingsError, _bool, _get, _number, _value


def _schedule(env: Mapping[str, str] | None, name: str) -> Schedule:
    try:
        return Schedule.parse(_value(env, name))
    except ValueError as exc:
        raise SettingsError(f"{name}: {exc}") from None


@dataclass(frozen=True)
class CanarySettings:
    enabled: bool
    schedule: Schedule
    period: timedelta  # the schedule's: the scenario rotation's and the staleness unit


@dataclass(frozen=True)
class RetentionSettings:
    days: int
    schedule: Schedule
    batch_size: int
    archive_container: str | None


@dataclass(frozen=True)
class BulkSettings:
    schedule: Schedule
    rate_per_second: int


def canary_settings(env: Mapping[str, str] | None = None) -> CanarySettings:
    schedule = _schedule(env, "CANARY_SCHEDULE")
    try:
        period = schedule.period()
    except ValueError as exc:  # the rotation and the stale alert count periods: one must exist
        raise SettingsError(f"CANARY_SCHEDULE: {exc}; the canary needs a period") from None
    return CanarySettings(enabled=_bool(env, "CANARY_ENABLED"), schedule=schedule, period=period)


def retention_settings(env: Mapping[str, str] | None = None) -> RetentionSettings:
    days = _number(env, "RETENTION_DAYS")
    if days > 36_500:
        raise SettingsError(f"RETENTION_DAYS is {days}; at most 36500 (100 years)")
    return RetentionSettings(
        days=days,
        schedule=_schedule(env, "RETENTION_SCHEDULE"),
        batch_size=_number(env, "RETENTION_BATCH_SIZE"),
        archive_container=_get(env, "AUDIT_ARCHIVE_CONTAINER"),
    )


def bulk_settings(env: Mapping[str, str] | None = None) -> BulkSettings:
    return BulkSettings(
        schedule=_schedule(env, "BULK_SCHEDULE"), rate_per_second=_number(env, "BULK_RATE_PER_SECOND")
    )


FEATURE_LOADERS = {"canary": canary_settings, "retention": retention_settings, "bulk": bulk_settings}


def feature_errors(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each feature whose settings do not load, with the one-line error that names the setting."""
    errors = {}
    for feature, load in FEATURE_LOADERS.items():
        try:
            load(env)
        except SettingsError as exc:
            errors[feature] = str(exc)
    return errors
