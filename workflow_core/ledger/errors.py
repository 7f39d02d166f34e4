"""Typed ledger errors: callers branch on these, never on HTTP status codes."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any


class LedgerError(Exception):
    """Base class of every error the ledger raises on purpose."""


class InvalidLedgerInput(LedgerError):
    """Bad input; not a ``ValueError``, so pydantic does not fold it into a ValidationError."""


def _illegal_move(subject: str, current: StrEnum, requested: StrEnum, allowed: Iterable[StrEnum]) -> str:
    allowed_text = ", ".join(sorted(s.value for s in allowed)) or "none (terminal status)"
    return f"{subject} cannot move {current} -> {requested}; allowed from {current}: {allowed_text}"


class StepNotFound(LedgerError, LookupError):
    def __init__(self, instance_id: str, step_id: str) -> None:
        super().__init__(f"no step {step_id!r} in workflow instance {instance_id!r}")


class IllegalTransition(LedgerError):
    def __init__(self, record: Any, requested: StrEnum, allowed: Iterable[StrEnum]) -> None:
        subject = f"step {record.step_id!r} of {record.instance_id!r}"
        super().__init__(_illegal_move(subject, record.status, requested, allowed))


class ConcurrencyConflict(LedgerError):
    """Someone else updated the step since it was read (ETag mismatch): re-read and re-decide."""

    def __init__(self, instance_id: str, step_id: str) -> None:
        super().__init__(
            f"step {step_id!r} of {instance_id!r} changed since it was read (ETag mismatch); "
            "re-read it and decide again"
        )


class StepsAlreadyExist(LedgerError):
    """``create_steps`` found the instance's steps already written with different content."""


class InstanceNotFound(LedgerError, LookupError):
    def __init__(self, instance_id: str) -> None:
        super().__init__(f"no workflow instance {instance_id!r} in the ledger")


class InstanceAlreadyExists(LedgerError):
    """``create_instance`` found a record for this id: instance ids are single-use."""

    def __init__(self, instance_id: str, workflow: str) -> None:
        super().__init__(f"workflow instance {instance_id!r} already exists (workflow {workflow!r})")


class IllegalInstanceTransition(LedgerError):
    def __init__(self, record: Any, requested: StrEnum, allowed: Iterable[StrEnum]) -> None:
        subject = f"workflow instance {record.instance_id!r}"
        super().__init__(_illegal_move(subject, record.status, requested, allowed))


class InstanceConflict(ConcurrencyConflict):
    """A subclass, so every ``retry_on_conflict`` loop that re-reads a step re-reads its instance too."""

    def __init__(self, instance_id: str) -> None:
        LedgerError.__init__(
            self, f"workflow instance {instance_id!r} changed since it was read (ETag mismatch); re-read it"
        )
