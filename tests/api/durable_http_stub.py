"""A local stand-in for the Durable Functions extension's HTTP API, for the real durable client.

The Python ``DurableOrchestrationClient`` talks to the Functions host over HTTP: the ``client``
binding JSON gives it ``rpcBaseUrl`` (the extension's local RPC listener, ``.../durabletask/``) and
the public ``managementUrls``. This stub serves just the RPC endpoints the client calls, with the
status codes and payload shapes of the extension's ``HttpApiHandler``:

* ``POST orchestrators/{name}[/{instanceId}]`` -> 202 + management payload; 409 when an instance with
  that id is Pending/Running/Suspended (host.json's default ``NonRunningStates`` override rule);
  400 with ``ExceptionMessage`` for an orchestrator the stub was told does not exist.
* ``GET instances/{id}`` -> 202 (Pending/Running/Suspended), 200 (Completed/Failed/Terminated),
  404 with an empty body when unknown.
* ``GET instances/`` -> 200 + list, filtered by ``runtimeStatus`` (comma separated),
  ``instanceIdPrefix``, ``createdTimeFrom``/``createdTimeTo``, ``top``.
* ``POST instances/{id}/raiseEvent/{event}`` -> 202, 404 unknown, 410 finished.
* ``POST instances/{id}/terminate?reason=...`` -> 202 (now Terminated, output the reason), 404 unknown,
  410 finished.

It runs an aiohttp server on a free 127.0.0.1 port in its own thread (its own event loop), records
every request it gets, and lets a test set an instance's status as an orchestrator would.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from devtools.durable_host.client import WEBHOOK_PATH, client_binding

TASK_HUB = "StubTaskHub"
SYSTEM_KEY = "stub-durabletask-extension-key"
ACTIVE = frozenset({"Pending", "Running", "Suspended", "ContinuedAsNew"})
FINISHED = frozenset({"Completed", "Failed", "Terminated", "Canceled"})


def _now_text(at: datetime | None = None) -> str:
    # The extension formats times with .NET's "s" format plus "Z": second precision, UTC.
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: str


@dataclass
class Instance:
    instance_id: str
    name: str
    raw_input: str | None  # the request body as the host stores it (the client sends JSON text as JSON)
    runtime_status: str = "Pending"
    custom_status: Any = None
    output: Any = None
    created: str = field(default_factory=_now_text)
    last_updated: str = field(default_factory=_now_text)
    events: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def input(self) -> Any:
        """The orchestration input as the orchestrator would see it (decoded)."""
        return decode_client_json(self.raw_input)

    def payload(self) -> dict[str, Any]:
        stored = None if self.raw_input is None else json.loads(self.raw_input)
        return {
            "name": self.name,
            "instanceId": self.instance_id,
            "runtimeStatus": self.runtime_status,
            "input": stored,
            "customStatus": self.custom_status,
            "output": self.output,
            "createdTime": self.created,
            "lastUpdatedTime": self.last_updated,
        }


def decode_client_json(raw: str | None) -> Any:
    """The Python client JSON-encodes an already JSON-encoded string; undo both layers."""
    if raw is None or raw == "":
        return None
    value = json.loads(raw)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class DurableHttpStub:
    """The Durable extension's RPC endpoints, in memory, on ``http://127.0.0.1:<port>/durabletask/``."""

    def __init__(self, known_orchestrators: set[str] | None = None) -> None:
        self.known_orchestrators = known_orchestrators  # None: accept any name
        self.instances: dict[str, Instance] = {}
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.status_failure: int | None = None  # a backend the extension cannot reach: every status query

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> DurableHttpStub:
        started = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # surfaced to start()
                errors.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())  # type: ignore[union-attr]
            loop.close()

        self._thread = threading.Thread(target=serve, name="durable-http-stub", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise TimeoutError("the durable HTTP stub did not start within 10s")
        if errors:
            raise errors[0]
        return self

    async def _start_site(self) -> None:
        app = web.Application(client_max_size=8 * 1024 * 1024)  # the host takes far more than aiohttp's 1 MiB
        app.router.add_post("/durabletask/orchestrators/{name}", self._start_instance)
        app.router.add_post("/durabletask/orchestrators/{name}/{instance_id}", self._start_instance)
        app.router.add_get("/durabletask/instances", self._list_instances)
        app.router.add_get("/durabletask/instances/", self._list_instances)
        app.router.add_get("/durabletask/instances/{instance_id}", self._get_instance)
        app.router.add_post("/durabletask/instances/{instance_id}/raiseEvent/{event}", self._raise_event)
        app.router.add_post("/durabletask/instances/{instance_id}/terminate", self._terminate)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> DurableHttpStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what a client binding needs -------------------------------------------------------------

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def rpc_base_url(self) -> str:
        return f"{self.origin}/durabletask/"

    def binding_json(self) -> str:
        """The ``client`` binding JSON the Functions host gives a durable client function."""
        binding = client_binding(
            origin=self.origin,
            task_hub=TASK_HUB,
            query=f"taskHub={TASK_HUB}&connection=Storage&code={SYSTEM_KEY}",
            rpc_base_url=self.rpc_base_url,
        )
        binding.update(
            {
                "baseUrl": f"{self.origin}{WEBHOOK_PATH}",
                "requiredQueryStringParameters": f"code={SYSTEM_KEY}",
                "httpBaseUrl": "",
                "maxGrpcMessageSizeInBytes": 0,
                "grpcHttpClientTimeout": "00:01:40",
            }
        )
        return json.dumps(binding)

    def management_payload(self, instance_id: str) -> dict[str, str]:
        urls = json.loads(self.binding_json())["managementUrls"]
        return {k: v.replace("INSTANCEID", instance_id) for k, v in urls.items()}

    # ---- test controls ---------------------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self.instances.clear()
            self.requests.clear()
            self.status_failure = None

    def add_instance(
        self,
        instance_id: str,
        *,
        name: str = "workflow_orchestrator",
        input: Any = None,
        runtime_status: str = "Running",
        custom_status: Any = None,
        output: Any = None,
        created: datetime | None = None,
    ) -> Instance:
        """Seed an instance as if a client had started it (input encoded the way the client sends it)."""
        raw = None if input is None else json.dumps(json.dumps(input))
        created_text = _now_text(created)
        instance = Instance(
            instance_id,
            name,
            raw,
            runtime_status=runtime_status,
            custom_status=custom_status,
            output=output,
            created=created_text,
            last_updated=created_text,
        )
        with self._lock:
            self.instances[instance_id] = instance
        return instance

    def set_status(self, instance_id: str, runtime_status: str, **changes: Any) -> None:
        with self._lock:
            instance = self.instances[instance_id]
            instance.runtime_status = runtime_status
            for key, value in changes.items():
                setattr(instance, key, value)
            instance.last_updated = _now_text()

    def requests_to(self, method: str, path_part: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == method and path_part in r.path]

    # ---- handlers --------------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> str:
        body = await request.text()
        with self._lock:
            self.requests.append(RecordedRequest(request.method, request.path, dict(request.query), body))
        return body

    @staticmethod
    def _error(status: int, message: str, exception_message: str | None = None) -> web.Response:
        body: dict[str, Any] = {"Message": message}
        if exception_message is not None:
            body["ExceptionMessage"] = exception_message
        return web.json_response(body, status=status)

    async def _start_instance(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        name = request.match_info["name"]
        instance_id = request.match_info.get("instance_id") or ""
        if self.known_orchestrators is not None and name not in self.known_orchestrators:
            return self._error(
                400,
                "One or more of the arguments submitted is incorrect",
                f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function.",
            )
        try:
            raw = body if body.strip() else None
            if raw is not None:
                json.loads(raw)
        except ValueError:
            return self._error(400, "Invalid JSON content")
        instance_id = instance_id or _new_id()
        with self._lock:
            existing = self.instances.get(instance_id)
            if existing is not None and existing.runtime_status in ACTIVE:
                status = existing.runtime_status
                return self._error(409, f"An Orchestration instance with the status {status} already exists.")
            self.instances[instance_id] = Instance(instance_id, name, raw)
        payload = self.management_payload(instance_id)
        return web.json_response(
            payload,
            status=202,
            headers={"Location": payload["statusQueryGetUri"], "Retry-After": "10"},
        )

    async def _get_instance(self, request: web.Request) -> web.Response:
        await self._record(request)
        if self.status_failure is not None:  # what the host answers when the extension's call throws
            return web.Response(status=self.status_failure, text="the backend refused the request")
        with self._lock:
            instance = self.instances.get(request.match_info["instance_id"])
            payload = None if instance is None else instance.payload()
        if payload is None:
            return web.Response(status=404)
        status = 202 if payload["runtimeStatus"] in ACTIVE else 200
        headers = {"Retry-After": "5", "Location": str(request.url)} if status == 202 else {}
        return web.json_response(payload, status=status, headers=headers)

    async def _list_instances(self, request: web.Request) -> web.Response:
        await self._record(request)
        query = request.query
        wanted = {s for part in query.getall("runtimeStatus", []) for s in part.split(",") if s}
        prefix = query.get("instanceIdPrefix")
        created_from = _parse_time(query.get("createdTimeFrom"))
        created_to = _parse_time(query.get("createdTimeTo"))
        with self._lock:
            payloads = [i.payload() for i in self.instances.values()]
        result = []
        for p in payloads:
            created = _parse_time(p["createdTime"])
            if wanted and p["runtimeStatus"] not in wanted:
                continue
            if prefix and not p["instanceId"].startswith(prefix):
                continue
            if created_from and created and created < created_from:
                continue
            if created_to and created and created > created_to:
                continue
            result.append(p)
        top = query.get("top")
        if top and top.isdigit():
            result = result[: int(top)]
        return web.json_response(result, headers={"x-ms-continuation-token": "null"})

    async def _raise_event(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        with self._lock:
            instance = self.instances.get(request.match_info["instance_id"])
            if instance is None:
                return web.Response(status=404)
            if instance.runtime_status in FINISHED:
                return web.Response(status=410)
            instance.events.append((request.match_info["event"], decode_client_json(body)))
        return web.Response(status=202)

    async def _terminate(self, request: web.Request) -> web.Response:
        await self._record(request)
        with self._lock:
            instance = self.instances.get(request.match_info["instance_id"])
            if instance is None:
                return web.Response(status=404)
            if instance.runtime_status in FINISHED:
                return web.Response(status=410)
            instance.runtime_status = "Terminated"
            instance.output = request.query.get("reason", "")
            instance.last_updated = _now_text()
        return web.Response(status=202)


def _new_id() -> str:
    return uuid.uuid4().hex


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
