"""Count the HTTP requests the app's storage clients make, at the SDK's transport (tests and benchmarks).

    from tests.helpers.request_counter import RequestCounter, pattern_operation

    with RequestCounter(classify=pattern_operation) as counter:  # before the clients are built
        services = Services(load_settings(env))
        with counter.scope("dispatch"):
            dispatch_step(payload, services)
        print(counter.by_label())

It is a transport hook (docs/capacity.md): only clients built while it is installed are counted. A
retry is a second request, an entity-group transaction one (``op="batch"``, with its size).

Labels: the innermost :meth:`RequestCounter.scope` (a context variable, so it follows
``asyncio.to_thread``), else ``classify()`` called on the requesting thread (e.g.
:func:`pattern_operation`, which names the pattern's operation from the call stack), else ``None``.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from azure.core.pipeline.transport import HttpTransport

from workflow_core.storage_clients import add_transport_hook, remove_transport_hook

_scope: ContextVar[str | None] = ContextVar("request_counter_scope", default=None)

_BATCH_PART = re.compile(rb"^(GET|POST|PUT|PATCH|MERGE|DELETE) (\S+) HTTP/1\.1", re.MULTILINE)
_ENTITY = re.compile(r"^(?P<table>[^(/]+)\((?P<keys>.*)\)$")


@dataclass(frozen=True)
class StorageRequest:
    """One request on the wire."""

    service: str  # "table", "queue" or "blob"
    op: str  # table: read, query, insert, update, delete, batch, create-table, delete-table;
    # queue: send, receive, delete, update, create-queue, delete-queue, clear, other;
    # blob (large payloads): upload, download, touch, create-container, other
    resource: str  # table or queue name ("" if unknown)
    method: str
    status: int | None
    label: str | None = None
    batch_size: int = 0  # operations in an entity-group transaction
    empty: bool | None = None  # a queue receive that returned no message
    seconds: float = 0.0  # from handing the request to the transport to its answer (benchmarks)


def _account_relative_path(url: str) -> list[str]:
    parts = urlsplit(url)
    segments = [unquote(s) for s in PurePosixPath(parts.path or "/").parts[1:]]
    host = parts.hostname or ""
    # Azure: https://<account>.<service>.core.windows.net/<resource>...; emulators put the account
    # in the path: http://127.0.0.1:10002/<account>/<resource>...
    if segments and not re.search(r"\.(table|queue|blob)\.", host):
        segments = segments[1:]
    return segments


def _body(request: Any) -> bytes:
    for name in ("body", "content", "data"):
        value = getattr(request, name, None)
        if isinstance(value, bytes | bytearray):
            return bytes(value)
        if isinstance(value, str):
            return value.encode()
    return b""


def _response_text(response: Any) -> str:
    with contextlib.suppress(Exception):
        return response.text()
    with contextlib.suppress(Exception):
        return response.body().decode("utf-8", errors="replace")
    return ""


def _blob_op(request: Any, method: str) -> str | None:
    """The blob operation a request is (the payload store's: upload, download, create-container),
    told by what only blob requests carry; None for a table or queue request."""
    headers = {k.lower() for k in request.headers}
    if "restype=container" in request.url:
        return "create-container" if method == "PUT" else "other"
    if "x-ms-blob-type" in headers:
        return "upload"
    if "comp=properties" in request.url and "restype=" not in request.url:
        return "touch"  # set the blob's HTTP headers: moves its Last-Modified
    if "x-ms-range" in headers:  # the SDK's download asks for a range, even for a whole blob
        return "download"
    return None


def describe(request: Any, response: Any) -> StorageRequest:
    """What one request was (service, operation, table, queue or blob), from its URL, method, headers
    and body."""
    method = request.method.upper()
    url = request.url.split("?")[0]
    segments = _account_relative_path(url)
    status = getattr(response, "status_code", None)
    first = segments[0] if segments else ""
    blob = _blob_op(request, method)
    if blob is not None:
        return StorageRequest("blob", blob, first, method, status)
    if first in ("$batch", "Tables") or "dataserviceversion" in {k.lower() for k in request.headers}:
        if first == "$batch":
            parts = _BATCH_PART.findall(_body(request))
            tables = {_account_relative_path(u.decode())[0].split("(")[0] for _, u in parts}
            return StorageRequest(
                "table", "batch", ",".join(sorted(tables)), method, status, batch_size=len(parts)
            )
        if first.startswith("Tables"):
            op = {"POST": "create-table", "DELETE": "delete-table"}.get(method, "list-tables")
            name = first[len("Tables") :].strip("()'")
            return StorageRequest("table", op, name, method, status)
        match = _ENTITY.match(first)
        table = match.group("table") if match else first
        keyed = bool(match and match.group("keys"))
        op = {"GET": "read" if keyed else "query", "POST": "insert", "DELETE": "delete"}.get(method, "update")
        return StorageRequest("table", op, table, method, status)
    queue = first
    if len(segments) >= 2 and segments[1] == "messages":
        if len(segments) == 2:
            if method == "GET":
                empty = "<QueueMessage>" not in _response_text(response)
                return StorageRequest("queue", "receive", queue, method, status, empty=empty)
            op = {"POST": "send", "DELETE": "clear"}.get(method, "other")
        else:
            op = {"DELETE": "delete", "PUT": "update"}.get(method, "other")
        return StorageRequest("queue", op, queue, method, status)
    op = {"PUT": "create-queue", "DELETE": "delete-queue"}.get(method, "other")
    return StorageRequest("queue", op, queue, method, status)


class RequestCounter:
    """Records every storage request of the clients built while installed. Thread-safe."""

    def __init__(self, classify: Callable[[], str | None] | None = None) -> None:
        self.classify = classify
        self.paused = False  # True: requests pass uncounted (e.g. while timing)
        self.requests: list[StorageRequest] = []
        self._lock = threading.Lock()
        self._installed = False

    def _wrap(self, transport: HttpTransport) -> HttpTransport:
        """The client's own transport, its ``send`` recording each request once answered (or failed)."""
        send = transport.send

        def counted(request: Any, **kwargs: Any) -> Any:
            if self.paused:
                return send(request, **kwargs)
            label, started, response = self.label(), time.perf_counter(), None
            try:
                response = send(request, **kwargs)
                return response
            finally:
                self.record(describe(request, response), label, time.perf_counter() - started)

        transport.send = counted  # type: ignore[method-assign]
        return transport

    def install(self) -> RequestCounter:
        if not self._installed:
            add_transport_hook(self._wrap)
            self._installed = True
        return self

    def uninstall(self) -> None:
        if self._installed:
            remove_transport_hook(self._wrap)
            self._installed = False

    def __enter__(self) -> RequestCounter:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    @contextlib.contextmanager
    def scope(self, label: str) -> Iterator[None]:
        """Label every request made inside (this thread, and tasks/threads started from this context)."""
        token = _scope.set(label)
        try:
            yield
        finally:
            _scope.reset(token)

    def label(self) -> str | None:
        explicit = _scope.get()
        if explicit is not None:
            return explicit
        return self.classify() if self.classify is not None else None

    def record(self, request: StorageRequest, label: str | None, seconds: float = 0.0) -> None:
        if label is not None or seconds:
            request = StorageRequest(**{**request.__dict__, "label": label, "seconds": seconds})
        with self._lock:
            self.requests.append(request)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()

    @contextlib.contextmanager
    def measure(self) -> Iterator[list[StorageRequest]]:
        """``with counter.measure() as made:`` — ``made`` holds the requests made inside, afterwards."""
        with self._lock:
            start = len(self.requests)
        made: list[StorageRequest] = []
        try:
            yield made
        finally:
            with self._lock:
                made.extend(self.requests[start:])

    def snapshot(self) -> list[StorageRequest]:
        with self._lock:
            return list(self.requests)

    def by_label(self, requests: list[StorageRequest] | None = None) -> Counter[str | None]:
        return Counter(r.label for r in (self.snapshot() if requests is None else requests))


# ---- the pattern's operations, named from the call stack --------------------------------------------

AGENT_EFFECT = "agent effect"
DISPATCH = "dispatch"
WORKER_CLAIM = "worker claim"
WORKER_RECORD = "record result"
WORKER_NOTE = "worker note"
REPLY = "reply"
CREATE_STEPS = "per workflow: create steps"
RESULT_HANDLER = "result handler"
WATCHDOG = "watchdog"
QUEUE_RECEIVE = "queue receive"
QUEUE_DELETE = "queue delete"
HEARTBEAT = "heartbeat"
START = "per workflow: start"
VERIFY_RESULT = "orchestrator verifies result"  # verify_result: only for events the handler did not confirm
SETTLE = "per workflow: settle instance"
HTTP_API = "HTTP API"  # the starter's instance record (and any other API handler's requests)
DEFINITION_STORE = "per version: store definition"  # the first start of a new definition version
HARNESS = "harness observation"  # the test harness's own reads: not the product's

# The worker reads the step inside ``retry_on_conflict(read, decide, what=...)``: named by ``what``.
_WORKER_READS = (("claim", WORKER_CLAIM), ("record", WORKER_RECORD), ("heartbeat", HEARTBEAT))

_FILE_RULES: tuple[tuple[str, str | None, str], ...] = (
    # (path suffix, function name or None for any, label); the innermost matching frame wins
    ("activities/worker/handlers/remote.py", None, AGENT_EFFECT),
    ("activities/worker/delivery.py", "_send", REPLY),
    ("activities/worker/delivery.py", "_claim_unread", WORKER_CLAIM),
    ("activities/worker/delivery_rules.py", "_decide_claim", WORKER_CLAIM),
    ("activities/worker/delivery_rules.py", "_claim_work", WORKER_CLAIM),
    ("activities/worker/delivery_rules.py", "_claim_compensation", WORKER_CLAIM),
    ("activities/worker/delivery_rules.py", "_decide_record", WORKER_RECORD),
    ("activities/worker/delivery.py", "_note", WORKER_NOTE),
    ("activities/worker/delivery.py", "_heartbeat", HEARTBEAT),
    # the old index row's delete, deferred by process() until after the reply
    ("activities/worker/delivery.py", "process", WORKER_RECORD),
    ("activities/scheduler/step_creation.py", "create_workflow_steps", CREATE_STEPS),
    ("workflow_core/starter.py", "ensure_unused", START),
    ("workflow_core/workflows/store.py", "save", DEFINITION_STORE),
    ("workflow_core/starter.py", None, HTTP_API),
    ("api/handlers.py", None, HTTP_API),
    ("activities/scheduler/dispatch.py", "_dispatch", DISPATCH),
    ("activities/replies/results.py", None, RESULT_HANDLER),
    ("activities/verification.py", None, VERIFY_RESULT),
    ("activities/scheduler/instances.py", "settle_instance", SETTLE),
    ("activities/replies/dead_letters.py", None, "dead-letter handler"),
    ("supervisor/watchdog.py", None, WATCHDOG),
    ("supervisor/watchdog_model.py", None, WATCHDOG),
    ("supervisor/step_decisions.py", None, WATCHDOG),
    ("workflow_core/transport/storage_queue.py", "receive", QUEUE_RECEIVE),
    ("workflow_core/transport/storage_queue.py", "complete", QUEUE_DELETE),
)


# where the harness reads the ledger only to observe it
_HARNESS_FILES = ("devtools/harness.py", "devtools/harness_observation.py")


def pattern_operation() -> str | None:
    """Which of the pattern's operations made the current request, from the caller's stack.

    Rules by (file, function): the innermost matching frame wins, so the example agent's own effect
    (``activities/worker/handlers/remote.py``) is told apart from the worker that runs it. The worker's
    reads inside ``retry_on_conflict`` are named by its ``what`` ("claim ...", "record ...",
    "heartbeat ..."); a heartbeat is the agent asking for more time (``provision-tenant``'s first step).
    """
    frame = sys._getframe(1)
    inner = ""
    while frame is not None:
        filename = frame.f_code.co_filename.replace("\\", "/")
        name = frame.f_code.co_name
        qualname = getattr(frame.f_code, "co_qualname", name)
        if filename.endswith(_HARNESS_FILES) and inner == "list_for_instance":
            return HARNESS  # the harness reading the ledger to observe it (e.g. around create_steps)
        if name == "retry_on_conflict" and filename.endswith("activities/common.py"):
            caller = frame.f_back.f_code.co_filename.replace("\\", "/") if frame.f_back else ""
            what = str(frame.f_locals.get("what", ""))
            if caller.endswith("activities/worker/delivery.py"):  # the worker's reads
                for prefix, label in _WORKER_READS:
                    if what.startswith(prefix):
                        return label
        for suffix, function, label in _FILE_RULES:
            if filename.endswith(suffix) and (
                function is None or function == name or qualname.startswith(f"{function}.<locals>")
            ):
                return label
        inner = name
        frame = frame.f_back
    return None
