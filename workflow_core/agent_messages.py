"""What an agent that holds no storage rights sends: heartbeats, and replies carrying a reply token.

Such an agent (any language; ``examples/node-agent``) only reads its pool's work queue and writes the
result queue; the result handler records its claim, heartbeats and outcome in the ledger for it
(``activities.replies.agent_reports``). What proves a report belongs to the attempt the ledger holds is
the work message's ``reply_token``: the SHA-256 of ``"reply:"`` and the step row's attempt token.
The attempt token never leaves the ledger (it proves an event came from a ledger read), and the
hash cannot be turned back into it, so the app recomputes the reply token from the row to check a
report, and a report for an earlier attempt, another step or a guessed token changes nothing.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field

from workflow_core.contracts import StepKind, _Model
from workflow_core.message_fields import InstanceId, OrchestrationId, StepId


def reply_token(attempt_token: str | None) -> str | None:
    """The reply token of the attempt whose ledger row holds ``attempt_token`` (None without one)."""
    if not attempt_token:
        return None
    return hashlib.sha256(f"reply:{attempt_token}".encode()).hexdigest()


class Heartbeat(_Model):
    """A message-only agent's "attempt ``attempt`` of this step is still running: move its deadline
    to ``seconds`` (default: the step's ``heartbeat_timeout_seconds``) from now", now being the
    ledger's clock. The first one also claims a Dispatched step for the agent."""

    type: Literal["heartbeat"]
    kind: StepKind
    instance_id: InstanceId
    orchestration_id: OrchestrationId
    step_id: StepId
    attempt: int = Field(ge=1)
    reply_token: str = Field(pattern=r"^[0-9a-f]{64}$")
    seconds: float | None = Field(default=None, gt=0, le=86400)
