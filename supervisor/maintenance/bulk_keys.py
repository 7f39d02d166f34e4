"""Idempotency keys for bulk operations: the same rows as single actions' keys
(:mod:`workflow_core.ledger.idempotency`), kept in a partition of their own in the ledger table.

A key is claimed API-wide (its SHA-256 row in the index table's ``~idempotency`` partition names
:data:`KEYS_PARTITION` as its "instance"), so a key already used by a single action is refused for a
bulk request and the other way round. The request a key stands for is :func:`request_of`: the action
and a digest of the whole request (filter, reason), the same from ``POST /api/operations``
and from ``sas bulk``; a repeat with the same key and request gets the first answer (the same
operation), a different request with it is refused. A dry run writes nothing and takes no key.
"""

from __future__ import annotations

import hashlib
import json

from supervisor.maintenance.bulk import BulkFilter
from workflow_core.ledger.families import BULK_KEYS_PARTITION as KEYS_PARTITION

__all__ = ["KEYS_PARTITION", "request_of"]


def request_of(action: str, flt: BulkFilter, reason: str) -> str:
    """What the key stands for, e.g. ``bulk resume 3f2a…`` (a digest: the reason may be long)."""
    canonical = json.dumps(
        {
            "action": action,
            "filter": flt.model_dump(mode="json", exclude_none=True),
            "reason": reason.strip(),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]
    return f"bulk {action} {digest}"
