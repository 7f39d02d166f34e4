"""Deadline-index partition keys: minute buckets, sharded, in time order.

Shared by the step rows (``store``) and the instance rows (``instance_store``, which prefix ``i``).
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime

INDEX_SHARDS = 16  # deadline-index partitions per minute bucket
SHARD_SEPARATOR = "-"


def minute_bucket(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d%H%M")


def index_partition(moment: datetime, *ids: str, shards: int = INDEX_SHARDS) -> str:
    """The deadline-index partition of a row due at ``moment``: its minute bucket plus a shard.

    Without the shard every row due in one minute lands in one partition, and one partition takes
    about 2,000 entity writes a second: the first limit a busy deployment would hit. The shard is a
    stable hash of the ids, so a step's rows spread evenly over ``shards`` partitions per minute.
    ``-`` sorts before every digit, so ``<bucket>-<shard>`` keeps the buckets in time order, and the
    overdue query's upper bound ``<bucket(now)>-~`` covers every shard of every bucket up to now.
    """
    shard = zlib.crc32("|".join(ids).encode()) % shards if shards > 1 else 0
    return f"{minute_bucket(moment)}{SHARD_SEPARATOR}{shard:02d}"


def overdue_upper_partition(now: datetime) -> str:
    """The highest index partition ``overdue(now)`` reads: every shard of ``now``'s minute bucket."""
    return f"{minute_bucket(now)}{SHARD_SEPARATOR}~"
