"""Settings of retention (purging finished instances) and bulk operations, read like every other
setting (:mod:`workflow_core.settings`): once, with an error naming a malformed one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from workflow_core.settings import SettingsError, parse_int

# name -> (default, description): the README's configuration table.
OPERATIONS_SETTINGS: dict[str, tuple[str | None, str]] = {
    "RETENTION_DAYS": (
        "30",
        "Days a finished (Succeeded/Compensated/Cancelled) instance is kept.",
    ),
    "RETENTION_SCHEDULE": ("0 17 * * * *", "NCRONTAB schedule of the retention timer (hourly at :17)."),
    "RETENTION_BATCH_SIZE": ("50", "Instances purged per retention tick (the rest wait a tick)."),
    "AUDIT_ARCHIVE_CONTAINER": (
        None,
        "Blob container that archives each purged instance's rows first.",
    ),
    "BULK_SCHEDULE": ("*/30 * * * * *", "NCRONTAB schedule of the timer that carries bulk operations on."),
    "BULK_RATE_PER_SECOND": ("20", "Instances a bulk operation acts on per second, at most."),
}


@dataclass(frozen=True)
class OperationsSettings:
    retention_days: int = 30
    retention_schedule: str = "0 17 * * * *"
    retention_batch_size: int = 50
    audit_archive_container: str | None = None
    bulk_schedule: str = "*/30 * * * * *"
    bulk_rate_per_second: int = 20


def _text(env: Mapping[str, str], name: str) -> str | None:
    return (env.get(name) or "").strip() or OPERATIONS_SETTINGS[name][0]


def _int(env: Mapping[str, str], name: str) -> int:
    return parse_int(_text(env, name) or "", name)


def load_operations_settings(env: Mapping[str, str] | None = None) -> OperationsSettings:
    env = os.environ if env is None else env
    days = _int(env, "RETENTION_DAYS")
    if days > 36_500:
        raise SettingsError(f"RETENTION_DAYS is {days}; at most 36500 (100 years)")
    return OperationsSettings(
        retention_days=days,
        retention_schedule=_text(env, "RETENTION_SCHEDULE") or "",
        retention_batch_size=_int(env, "RETENTION_BATCH_SIZE"),
        audit_archive_container=_text(env, "AUDIT_ARCHIVE_CONTAINER"),
        bulk_schedule=_text(env, "BULK_SCHEDULE") or "",
        bulk_rate_per_second=_int(env, "BULK_RATE_PER_SECOND"),
    )
