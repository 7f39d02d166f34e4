"""What every HTTP body shares: services that fail as a readable 503, Durable and ledger calls whose
failures become problem+json (502 / 503), instance-id checks and the app's URLs.

Split from the bodies themselves (``api.handlers``, ``api.start``, ``api.operator_api``) so each of
those stays about one route family.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from azure.core.exceptions import AzureError
from azure.durable_functions import OrchestrationRuntimeStatus

from api.responses import ApiError
from workflow_core.contracts import compensation_instance_id, step_instance_id
from workflow_core.ledger import (
    InvalidLedgerInput,
    StepLedger,
)
from workflow_core.ledger.model import validate_instance_id, validate_step_id
from workflow_core.runtime import Services
from workflow_core.settings import SettingsError
from workflow_core.workflows.model import WORKFLOW_NAME

log = logging.getLogger(__name__)

ServicesSource = Services | Callable[[], Services]
T = TypeVar("T")

INSTANCE_ID_FIELD = "instance_id"
COMPENSATION_SUFFIX = compensation_instance_id("")  # ":compensation"
STEP_INFIX = step_instance_id("", "")  # ":step:", the ids of a parallel group's step orchestrations
DEFAULT_TOP = 50
MAX_TOP = 500
# Runtime statuses in which an orchestration still holds its instance id.
ACTIVE_STATUSES = frozenset(
    {
        OrchestrationRuntimeStatus.Pending,
        OrchestrationRuntimeStatus.Running,
        OrchestrationRuntimeStatus.Suspended,
        OrchestrationRuntimeStatus.ContinuedAsNew,
    }
)


# ---- shared helpers -------------------------------------------------------------------------------


def resolve_services(source: ServicesSource) -> Services:
    """The services to use; settings that do not load become a 503 naming the bad setting."""
    try:
        return source if isinstance(source, Services) else source()
    except SettingsError as exc:
        raise ApiError(503, "the app settings are invalid", [str(exc)], code="settings-invalid") from None


async def call_durable(awaitable: Awaitable[T], what: str) -> T:
    """Await a Durable client call; a failing or unreachable Durable host becomes a readable 502."""
    try:
        return await awaitable
    except ApiError:
        raise
    except Exception as exc:
        log.warning("Durable Functions client call failed (%s): %r", what, exc)
        raise ApiError(
            502,
            f"could not {what}: the Durable Functions host call failed",
            [describe_error(exc)],
            code="durable-unavailable",
        ) from None


async def call_ledger(services: Services, operation: Callable[[StepLedger], T]) -> T:
    """Run a (blocking) ledger call off the event loop; storage failures become a readable 503."""

    def run() -> T:
        return operation(services.ledger)

    try:
        return await asyncio.to_thread(run)
    except InvalidLedgerInput as exc:
        raise ApiError(400, "invalid request", [str(exc)], code="invalid-request") from None
    except AzureError as exc:
        log.warning("step ledger call failed: %r", exc)
        raise ApiError(
            503,
            "the step ledger (Table Storage) is unavailable",
            [describe_error(exc).splitlines()[0]],
            code="ledger-unavailable",
        ) from None


def no_instance(instance_id: str, why: str) -> ApiError:
    return ApiError(404, f"no workflow instance {instance_id!r}", [why], code="instance-not-found")


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_instance_id(value: object, source: str) -> str:
    """Validate an instance id the way the ledger does; a bad one is a readable 400."""
    try:
        instance_id = validate_instance_id(value)
    except InvalidLedgerInput as exc:
        raise ApiError(
            400, f"invalid instance id in {source}", [str(exc)], code="invalid-instance-id"
        ) from None
    return instance_id


def check_step_id(value: object, source: str) -> str:
    """Validate a step id the way the ledger does (a full match: no trailing newline); a bad one is
    a 400 before any lookup, so a client never retries what can never succeed."""
    try:
        return validate_step_id(value)
    except InvalidLedgerInput as exc:
        raise ApiError(400, f"invalid step id in {source}", [str(exc)], code="invalid-step-id") from None


def check_workflow_name(value: object, source: str) -> str:
    """A workflow name as definitions spell it (a full match of ``WORKFLOW_NAME``), else a 400."""
    if not isinstance(value, str) or len(value) > 100 or not WORKFLOW_NAME.fullmatch(value):
        raise ApiError(
            400,
            f"invalid workflow name in {source}",
            [
                f"a workflow name is lower-case words joined by '-' ({WORKFLOW_NAME.pattern}), "
                f"got {str(value)[:80]!r}"
            ],
            code="invalid-workflow-name",
        )
    return value


def status_url(base: str, instance_id: str) -> str:
    return f"{base}/workflows/{instance_id}"


def steps_url(base: str, instance_id: str) -> str:
    return f"{base}/workflows/{instance_id}/steps"
