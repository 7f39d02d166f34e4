"""Every partition and row-key family of the ledger's two tables, who writes it and how it goes.

The one owner of the layout: a module that adds rows declares their family here, with its purge
rule, and takes its keys from here; ``tests/ledger/test_families.py`` fails on a ``~`` key declared
anywhere else or a family without a rule, and ``purge.py`` deletes an instance by this list.
Instance ids cannot start with ``~`` (``model.py``), so no ``~`` partition is ever an instance's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

MAX_BATCH = 100  # Table Storage's limit per entity-group transaction


class Purge(StrEnum):
    """How rows of a family leave the tables."""

    PARTITION = "with the instance's partition"  # ledger.purge_instance deletes the whole partition
    POINTED = "by the pointer the instance's rows hold"  # purge_instance deletes what its rows name
    NAMED = "by a query for the instance's id"  # purge_instance finds the rows that name it
    OPERATION = "with its bulk operation"  # bulk retention, after RETENTION_DAYS
    BOUNDED = "never: one row per app, agent or version, overwritten in place"


@dataclass(frozen=True)
class Family:
    name: str
    table: str  # "ledger" (StepLedger) or "index" (StepDeadlines)
    partition: str  # the partition key, or its prefix when it ends in "~" or "*"
    rows: str  # the row keys
    writer: str
    purge: Purge
    rule: str  # why that purge is right, in a sentence

    def __post_init__(self) -> None:
        if not isinstance(self.purge, Purge) or not self.rule.strip():
            raise ValueError(f"ledger family {self.name!r} needs a purge rule (families.Purge) and why")


# ---- keys (modules import these; a "~" key declared elsewhere fails tests/ledger/test_families.py) ---
INSTANCE_ROW = "~instance"  # '~' after every step id, 'i' after '~audit~': outside both ranges
STEPS_MARKER_ROW = "~steps"  # 's' after 'a' and 'i': outside the audit range, not the instance record's key
AUDIT_PREFIX = "~audit~"
CLAIM_KEY_PREFIX = "~claim~"
BASIS_KEY_PREFIX = "~basis~"
IDEMPOTENCY_PREFIX = "~idem~"
DEFINITIONS_PREFIX = "~definitions~"
LIVENESS_PARTITION = "~liveness"
BULK_PARTITION = "~bulk"
BULK_OUTCOMES_PREFIX = "~bulk~"
BULK_KEYS_PARTITION = "~bulk-keys"
LIMITS_PREFIX = "~limits~"  # the limits stores' (workflow_core/limits/rows.py)
LIST_PARTITION = "list"
KEY_PARTITION = "~keys"
KEY_INDEX_PARTITION = "~idempotency"
ATTENTION_PARTITION = "attention"
PARKED_PARTITION = "parked"

L, X = "ledger", "index"
# fmt: off
FAMILIES: tuple[Family, ...] = (
    Family("instance record", L, "<instance id>", INSTANCE_ROW, "the starter, scheduler, watchdog, operators",
           Purge.PARTITION, "deleted last, ETag-guarded on its Purging version"),
    Family("steps", L, "<instance id>", "<step id>", "scheduler, worker, watchdog, operators",
           Purge.PARTITION, "an instance's steps are nobody else's"),
    Family("steps marker", L, "<instance id>", STEPS_MARKER_ROW, "scheduler (step creation)",
           Purge.PARTITION, "says the steps were written; nothing without them"),
    Family("audit trail", L, "<instance id>", AUDIT_PREFIX + "<time>~<seq>~<nonce>", "every writer, "
           "in the transaction of its move; canary verdicts (a 'canary-verdict' row)",
           Purge.PARTITION, "archived first when AUDIT_ARCHIVE_CONTAINER is set"),
    Family("claim keys", L, "<instance id>", CLAIM_KEY_PREFIX + "<step>~<digest>", "worker",
           Purge.PARTITION, "answered claims of the instance's attempts"),
    Family("basis rows", L, "<instance id>", BASIS_KEY_PREFIX + "<step>~<digest>", "scheduler",
           Purge.PARTITION, "the instance's own decisions"),
    Family("idempotency keys", L, "<instance id>", IDEMPOTENCY_PREFIX + "<key>", "api (operator actions)",
           Purge.PARTITION, "an unanswered one is an action in flight: the instance is not purged"),
    Family("deadline index", X, "<YYYYMMDDHHMM>-<shard>", "<deadline>~<nonce>", "ledger writes",
           Purge.POINTED, "each step row names its row (IndexKey)"),
    Family("instance index", X, "i<YYYYMMDDHHMM>-<shard>", "<deadline>~<nonce>", "ledger writes",
           Purge.POINTED, "the instance record names its row (IndexKey)"),
    Family("attention index", X, ATTENTION_PARTITION, "<instance>~<step>~<nonce>", "ledger writes",
           Purge.POINTED, "the CompensationFailed step names its row (IndexKey)"),
    Family("listing", X, LIST_PARTITION, "<inverted start>~<instance id>", "ledger instance writes",
           Purge.POINTED, "its key follows from the record; deleted after it"),
    Family("key index", X, KEY_INDEX_PARTITION, "<sha256 of key>", "api, sas (idempotency keys)",
           Purge.POINTED, "each ~idem~ row of the instance (or of ~bulk-keys) names its row"),
    Family("parked messages", X, PARKED_PARTITION, "<time>~<nonce>", "worker, result handlers",
           Purge.NAMED, "a parked message naming the instance (InstanceId) goes with it"),
    Family("limits slots and waiters", L, LIMITS_PREFIX + "<agent>", "slot~NNN, wait~<since>~<hash>",
           "limits gate, settle, slot sweep", Purge.NAMED,
           "a slot the instance still holds is freed, a place it still waits in is deleted"),
    Family("limits circuit", L, LIMITS_PREFIX + "<agent>", "circuit, " + AUDIT_PREFIX + "<version>",
           "limits gate, operators", Purge.BOUNDED, "one breaker per agent and its changes, no instance's"),
    Family("definitions", L, DEFINITIONS_PREFIX + "<workflow>", "<digest>[~<chunk>]", "the starter",
           Purge.BOUNDED, "one per deployed version; an old instance may still read it"),
    Family("watchdog liveness", L, LIVENESS_PARTITION, "watchdog", "watchdog timer",
           Purge.BOUNDED, "one row, overwritten each tick"),
    Family("list token key", X, KEY_PARTITION, "list-token", "first instance listing",
           Purge.BOUNDED, "one row, the app's signing key"),
    Family("bulk operations", L, BULK_PARTITION, "<operation id>", "api, sas bulk, maintenance timer",
           Purge.OPERATION, "finished operations older than RETENTION_DAYS (retention.py)"),
    Family("bulk snapshot and outcomes", L, BULK_OUTCOMES_PREFIX + "<operation id>", "<instance id>",
           "bulk runners", Purge.NAMED, "an instance's row goes with it; the rest with the operation"),
    Family("bulk idempotency keys", L, BULK_KEYS_PARTITION, IDEMPOTENCY_PREFIX + "<key>", "api, sas bulk",
           Purge.OPERATION, "the keys whose answer names a deleted operation"),
)
# fmt: on
