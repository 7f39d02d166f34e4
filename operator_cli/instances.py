"""The CLI's view of instance records: listing (all pages if asked), one record, and resume.

Kept apart from the commands so the one place that knows the ledger's instance-record calls is small,
and so an unknown instance is a CLI error sentence, never a traceback.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from workflow_core.ledger import InvalidLedgerInput, StepLedger


class InstanceMissing(InvalidLedgerInput):
    """No instance record with that id (an InvalidLedgerInput, so the CLI prints it as a bad request)."""


def list_instances(
    ledger: StepLedger,
    *,
    status: str | None,
    workflow: str | None,
    version: str | None,
    business_key_prefix: str | None,
    started_from: datetime | None,
    started_to: datetime | None,
    needs_attention: bool | None,
    limit: int,
    continuation: str | None,
    all_pages: bool,
) -> tuple[list[Any], str | None]:
    """One page (or every page with ``all_pages``) of instance records, newest first."""
    found: list[Any] = []
    token = continuation
    while True:
        page, token = ledger.list_instances(
            status=status,
            workflow=workflow,
            version=version,
            business_key_prefix=business_key_prefix,
            started_from=started_from,
            started_to=started_to,
            needs_attention=needs_attention,
            limit=limit,
            continuation=token,
        )
        found.extend(page)
        if not all_pages or not token:
            return found, token


def get_instance(ledger: StepLedger, instance_id: str) -> Any:
    from workflow_core.ledger import InstanceNotFound

    try:
        return ledger.get_instance(instance_id)
    except InstanceNotFound:
        raise InstanceMissing(f"no workflow instance {instance_id!r} in the ledger") from None


def resume_instance(ledger: StepLedger, instance_id: str, *, actor: str, reason: str) -> Any:
    from supervisor import operator

    return operator.resume_instance(ledger, instance_id, actor=actor, reason=reason)
