"""Deadline-index partition keys: minute buckets, sharded, in time order (instance rows prefix ``i``)."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime

INDEX_SHARDS = 16  # deadline-index partitions per minute bucket
SHARD_SEPARATOR = "-"


def minute_bucket(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d%H%M")


def index_partition(moment: datetime, *ids: str) -> str:
    """The minute bucket of ``moment`` plus a shard (a stable hash of the ids): one partition takes
    about 2,000 writes a second, the first limit a busy deployment would hit. ``-`` sorts before
    every digit, so ``<bucket>-<shard>`` keeps buckets in time order and ``<bucket(now)>-~`` bounds
    every shard up to now."""
    shard = zlib.crc32("|".join(ids).encode()) % INDEX_SHARDS
    return f"{minute_bucket(moment)}{SHARD_SEPARATOR}{shard:02d}"


def overdue_upper_partition(now: datetime) -> str:
    return f"{minute_bucket(now)}{SHARD_SEPARATOR}~"
