"""The checked fields every message is made of: ids, names, times, payloads and error texts.

Each carries the validator the app applies and the rule published in the message schemas
(``docs/schemas/``), so an agent in another language sees what the app checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError

from workflow_core.ledger.errors import InvalidLedgerInput
from workflow_core.ledger.model import (
    AGENT_NAME,
    INSTANCE_ID_PATTERN,
    STEP_ID_PATTERN,
    WORKFLOW_NAME,
    validate_instance_id,
    validate_step_id,
)
from workflow_core.payloads import bounded_payload, message_payload

# A message that breaks these can never be processed: the handlers park it (docs/contracts.md).
MAX_ERROR_CHARS = 8_000  # an error text kept in the ledger (last_error) and in a result message
MAX_ORCHESTRATION_ID = 320  # "<instance>:step:<step>" with the longest instance and step ids
MAX_AGENT_CHARS = 200
MAX_WORKFLOW_CHARS = 100
MAX_REASON_CHARS = 2_000  # the reason text of an answer (``contracts.AttemptStatus``)
MAX_CORRELATION_CHARS = 128
# A queue name both transports accept (Storage Queues: 3-63 lowercase letters, digits and single
# hyphens, a letter or digit at each end; Service Bus accepts these too).
QUEUE_NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
CORRELATION_PATTERN = r"^[A-Za-z0-9._:@/+=-]+$"
_ORCHESTRATION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")


def fit_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text``, or its head and tail around a marker saying how much was cut, in ``limit`` characters."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit  # first guess; the marker's own length is added below
    while True:
        marker = f"\n… [truncated {cut:,} chars] …\n"
        keep = limit - len(marker)
        if keep < 2:
            return text[:limit]
        if len(text) - keep == cut:
            head = keep - keep // 2
            return text[:head] + marker + text[len(text) - keep // 2 :]
        cut = len(text) - keep


def _as_value_error(check: Any, value: Any) -> Any:
    try:
        return check(value)
    except InvalidLedgerInput as exc:  # not a ValueError on purpose; pydantic needs one here
        raise ValueError(str(exc)) from None


def _key_text(kind: str, pattern: re.Pattern[str], limit: int, hint: str) -> Callable[[str], str]:
    """The check of a text that becomes part of a Table Storage key."""

    def check(value: str) -> str:
        bad = sorted({c for c in value if c in "/\\#?" or ord(c) < 32 or 0x7F <= ord(c) <= 0x9F})
        if bad:
            raise ValueError(f"{kind} {value[:80]!r} contains characters Table Storage keys forbid: {bad!r}")
        if not value:
            raise ValueError(f"{kind} must not be empty")
        if len(value) > limit:
            raise ValueError(f"{kind} is {len(value)} characters long; at most {limit} are allowed")
        if not pattern.fullmatch(value):
            raise ValueError(f"{kind} {value[:80]!r} must be {hint}")
        return value

    return check


_orchestration_id = _key_text(
    "orchestration id",
    _ORCHESTRATION_ID,
    MAX_ORCHESTRATION_ID,
    "letters, digits and . _ : @ - (a letter or digit first)",
)
_agent = _key_text("agent", AGENT_NAME, MAX_AGENT_CHARS, "lowercase dotted words such as storage.create")
_workflow = _key_text("workflow", WORKFLOW_NAME, MAX_WORKFLOW_CHARS, "lowercase words joined by '-'")


def _iso_time(value: str) -> str:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"deadline {value[:80]!r} is not an ISO 8601 timestamp") from None
    return value


def _error(value: str | None) -> str | None:
    if value is not None and len(value) > MAX_ERROR_CHARS:
        raise ValueError(f"error text of {len(value)} characters; at most {MAX_ERROR_CHARS} (use fit_text)")
    return value


def _published(**schema: Any) -> Any:
    """What the message schemas say of a checked type."""
    return Field(json_schema_extra=schema)


InstanceId = Annotated[
    str,
    AfterValidator(lambda v: _as_value_error(validate_instance_id, v)),
    _published(pattern=INSTANCE_ID_PATTERN),
]
StepId = Annotated[
    str, AfterValidator(lambda v: _as_value_error(validate_step_id, v)), _published(pattern=STEP_ID_PATTERN)
]
OrchestrationId = Annotated[
    str,
    AfterValidator(_orchestration_id),
    _published(pattern=_ORCHESTRATION_ID.pattern, maxLength=MAX_ORCHESTRATION_ID),
]
AgentName = Annotated[  # empty: a compensation's message names no agent of its own
    str,
    AfterValidator(lambda v: v if v == "" else _agent(v)),
    _published(pattern=f"^$|{AGENT_NAME.pattern}", maxLength=MAX_AGENT_CHARS),
]
WorkflowName = Annotated[
    str, AfterValidator(_workflow), _published(pattern=WORKFLOW_NAME.pattern, maxLength=MAX_WORKFLOW_CHARS)
]
IsoTime = Annotated[str, AfterValidator(_iso_time), _published(format="date-time")]
MessagePayload = Annotated[dict[str, Any], AfterValidator(message_payload)]  # inline-sized or a reference
OptionalPayload = Annotated[dict[str, Any] | None, AfterValidator(bounded_payload)]
QueueName = Annotated[str, Field(min_length=3, max_length=63, pattern=QUEUE_NAME_PATTERN)]
CorrelationId = Annotated[  # opaque to the app: an agent's own id for one question, echoed
    str, Field(min_length=1, max_length=MAX_CORRELATION_CHARS, pattern=CORRELATION_PATTERN)
]
ErrorText = Annotated[str | None, AfterValidator(_error), _published(maxLength=MAX_ERROR_CHARS)]


def explain(exc: ValidationError, limit: int = 2_000) -> str:
    """A pydantic error as one line an operator can read: ``field: problem; field: problem``."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ())) or "message"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return fit_text("; ".join(parts), limit)
