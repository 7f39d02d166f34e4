"""A stand-in at the Durable client boundary for decision-level tests (``get_status``, ``raise_event``,
``start_new``, ``terminate``); end-to-end tests use the durable test host instead."""

from __future__ import annotations

import json
import threading
from typing import Any

from azure.durable_functions import DurableOrchestrationClient
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus


class RecordingClient:
    """The Durable client's calls the watchdog makes, recorded; thread-safe.

    ``statuses`` maps an orchestration id to its runtime status ("Running", "Failed"...); an id not
    in it answers like the real client for an unknown instance (no runtime status).
    """

    def __init__(self, statuses: dict[str, str] | None = None) -> None:
        self.statuses: dict[str, str] = dict(statuses or {})
        self.events: list[tuple[str, str, Any]] = []
        self.starts: list[tuple[str, str, Any]] = []
        self.terminations: list[tuple[str, str]] = []
        self.status_calls: list[str] = []
        self.fail_status_for: set[str] = set()
        self._lock = threading.Lock()

    async def get_status(self, instance_id: str, *args: Any, **kwargs: Any) -> DurableOrchestrationStatus:
        with self._lock:
            self.status_calls.append(instance_id)
            if instance_id in self.fail_status_for:
                raise RuntimeError(f"status endpoint failed for {instance_id}")
            status = self.statuses.get(instance_id)
        if status is None:  # what the SDK builds from a 404 body
            return DurableOrchestrationStatus.from_json(f"instance {instance_id} not found")
        return DurableOrchestrationStatus(
            instanceId=instance_id, runtimeStatus=status, createdTime="2030-06-01T11:00:00Z"
        )

    async def raise_event(
        self, instance_id: str, event_name: str, event_data: Any = None, **kwargs: Any
    ) -> None:
        with self._lock:
            self.events.append((instance_id, event_name, event_data))

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any = None
    ) -> str:
        with self._lock:
            self.starts.append((orchestration_function_name, instance_id, client_input))
            self.statuses[instance_id] = "Pending"
        return instance_id

    async def terminate(self, instance_id: str, reason: str) -> None:
        with self._lock:
            self.terminations.append((instance_id, reason))
            self.statuses[instance_id] = "Terminated"


_CLIENT_BINDING = json.dumps(
    {
        "taskHubName": "TestHub",
        "creationUrls": {},
        "managementUrls": {},
        "rpcBaseUrl": "http://127.0.0.1:17071/durabletask/",
    }
)


async def sdk_raise_event_answering(status: int, instance_id: str, event_name: str, event_data: Any) -> None:
    """Run the SDK's real ``raise_event`` against a host that answers ``status``."""

    async def post(url: str, data: Any = None, **kwargs: Any) -> list[Any]:
        return [status, None]

    sdk_client = DurableOrchestrationClient(_CLIENT_BINDING)
    sdk_client._post_async_request = post
    await sdk_client.raise_event(instance_id, event_name, event_data)
