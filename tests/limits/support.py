"""A one-step workflow on a limited agent, and a ledger-event sampler of how many of its steps are
in flight at once."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from devtools.harness_observation import LedgerEvent
from workflow_core import clock
from workflow_core.ledger import NewStep

AGENT = "storage.create"
STEP = "create_storage"
IN_FLIGHT = {"Dispatched", "Running"}


def one_step(name: str = "limited", deadline: float = 60, attempts: int = 3) -> dict[str, Any]:
    return {
        "name": name,
        "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
        "steps": [
            {
                "id": "create_storage",
                "agent": AGENT,
                "input": {"tenant_id": "$input.tenant_id", "region": "westeurope", "sku": "Standard_LRS"},
                "deadline_seconds": deadline,
                "retry": {"max_attempts": attempts, "initial_interval_seconds": 1, "backoff_coefficient": 1},
                "compensation": {"agent": "storage.delete", "deadline_seconds": 60},
            }
        ],
    }


def pools(max_in_flight: int | None = None, threshold: int | None = None, open_seconds: float = 20) -> str:
    lines = ["agents:", f"  {AGENT}:", "    wait_poll_seconds: 2"]
    if max_in_flight is not None:
        lines.append(f"    max_in_flight: {max_in_flight}")
    if threshold is not None:
        lines.append(f"    circuit: {{failure_threshold: {threshold}, open_seconds: {open_seconds}}}")
    return "\n".join(lines) + "\n"


class InFlightSampler:
    """Steps of ``AGENT`` Dispatched or Running, after every committed ledger write: the most ever."""

    def __init__(self) -> None:
        self.status: dict[tuple[str, str], str] = {}
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, event: LedgerEvent) -> None:
        if event.record is None or event.record.agent != AGENT:
            return
        with self.lock:
            self.status[(event.instance_id, event.step_id)] = event.record.status.value
            self.most = max(self.most, sum(1 for s in self.status.values() if s in IN_FLIGHT))


def pending(services: Any, *instance_ids: str, promise: timedelta = timedelta(hours=1)) -> None:
    """Instances with one Pending step on the agent; ``promise``: their scheduler's, from now."""
    for instance_id in instance_ids:
        services.ledger.create_instance_with_steps(
            instance_id,
            "provision-tenant",
            actor="test",
            input_json="{}",
            scheduler_deadline=clock.utcnow() + promise,
            version="v1",
            steps=[NewStep(step_id=STEP, step_name=STEP, agent=AGENT, max_attempts=3)],
        )
