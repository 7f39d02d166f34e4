"""An app's settings on the session's Azurite with tables and queues of a test's own, the ``sas``
options that point at them, and draining a queue."""

from __future__ import annotations

from typing import Any

from devtools.azurite import env_for

GRACE_SECONDS = 30  # WATCHDOG_GRACE_SECONDS of settings_env


def settings_env(azurite, unique_name, **overrides: str) -> dict[str, str]:
    """App settings for ``azurite`` naming tables and queues of their own (the dead-letter queue as the
    Functions host names it: the work queue's name + ``-poison``)."""
    work_queue = unique_name("work")
    env = {
        **env_for(azurite),
        "LEDGER_TABLE_NAME": unique_name("steps"),
        "DEADLINE_INDEX_TABLE_NAME": unique_name("idx"),
        "WORK_QUEUE_NAME": work_queue,
        "RESULT_QUEUE_NAME": unique_name("results"),
        "DEAD_LETTER_QUEUE_NAME": f"{work_queue}-poison",
        "WATCHDOG_GRACE_SECONDS": str(GRACE_SECONDS),
        "WATCHDOG_BATCH_SIZE": "100",
    }
    env.update(overrides)
    return env


def drain(transport, queue: str) -> list[Any]:
    """Every message now in ``queue`` (received and completed)."""
    messages = []
    while True:
        batch = transport.receive(queue, max_messages=32, lock_seconds=30)
        if not batch:
            return messages
        for m in batch:
            transport.complete(m)
        messages.extend(batch)


def connection_args(env: dict[str, str], ledger_table: str | None = None, index_table: str | None = None):
    """``sas``'s global options pointing at ``env``'s storage and tables (or the ones named)."""
    return [
        "--connection-string",
        env["AzureWebJobsStorage"],
        "--ledger-table",
        ledger_table or env["LEDGER_TABLE_NAME"],
        "--index-table",
        index_table or env["DEADLINE_INDEX_TABLE_NAME"],
    ]
