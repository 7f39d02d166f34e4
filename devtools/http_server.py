"""The app's HTTP functions on a real socket, without Core Tools: a stand-in for the Functions host's
HTTP front end, for the console demo and the browser tests.

Routes come from the registered functions themselves, under host.json's ``routePrefix``; each
request reaches its body as a real ``azure.functions.HttpRequest`` with the durable test host's
client. The durable host is single-threaded: a request runs while holding its lock, between steps.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import azure.functions as func

ROOT = Path(__file__).resolve().parents[1]


def route_prefix() -> str:
    host = json.loads((ROOT / "host.json").read_text(encoding="utf-8"))
    prefix = host.get("extensions", {}).get("http", {}).get("routePrefix", "api")
    return f"/{prefix}" if prefix else ""


@dataclass(frozen=True)
class Route:
    name: str
    methods: frozenset[str]
    pattern: re.Pattern[str]
    template: str
    needs_client: bool
    function: Any

    def match(self, method: str, path: str) -> dict[str, str] | None:
        found = self.pattern.fullmatch(path) if method in self.methods else None
        return None if found is None else {k: unquote(v or "") for k, v in found.groupdict().items()}


def _compile(template: str) -> re.Pattern[str]:
    """A Functions route template (``a/{x}/b/{*rest}``) as a regular expression with named groups."""
    parts = []
    for segment in template.strip("/").split("/"):
        if found := re.fullmatch(r"\{\*(\w+)\}", segment):
            parts.append(f"(?:/(?P<{found.group(1)}>.*))?")
        elif found := re.fullmatch(r"\{(\w+)(?::[^}]*)?\}", segment):
            parts.append(f"/(?P<{found.group(1)}>[^/]+)")
        else:
            parts.append("/" + re.escape(segment))
    return re.compile("".join(parts) + "/?")


def http_routes(functions: list[Any]) -> list[Route]:
    """The HTTP-triggered functions of an app, most specific (most literal segments) first."""
    prefix = route_prefix()
    routes = []
    for function in functions:
        trigger = function.get_trigger()
        if trigger.type != "httpTrigger":
            continue
        template = f"{prefix}/{trigger.route}"
        methods = frozenset(m.value for m in trigger.methods or [])
        needs_client = any(b.type == "durableClient" for b in function.get_bindings())
        routes.append(
            Route(function.get_function_name(), methods, _compile(template), template, needs_client, function)
        )
    literal = lambda r: sum(1 for s in r.template.split("/") if s and not s.startswith("{"))  # noqa: E731
    return sorted(routes, key=lambda r: (-literal(r), r.template))


_FORWARDING = ("forwarded", "x-forwarded-", "x-real-ip", "x-client-ip", "x-original-", "x-arr-")


def _forwarding(name: str) -> bool:
    """A header a proxy would set about the client (its address, host, scheme): never trusted here."""
    lower = name.lower()
    return any(lower == f or (f.endswith("-") and lower.startswith(f)) for f in _FORWARDING)


class _QuietOnHangUp(ThreadingHTTPServer):
    """A client that hangs up (mid-request or mid-answer: a closed tab, a reload) is not an error worth
    a traceback; the action it asked for, if any, ran or was refused as usual."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)


class AppHttpServer:
    """Serves ``routes`` on ``127.0.0.1:port`` (0: a free port), calling each body through ``host``."""

    def __init__(self, host: Any, routes: list[Route], port: int = 0) -> None:
        self.host = host
        self.routes = routes
        self.lock = host._lock  # the durable host's loop lock: a request never runs mid-step
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: the demo prints what matters
                return

            def _serve(self) -> None:
                server.handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        self.httpd = _QuietOnHangUp(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> AppHttpServer:
        threading.Thread(target=self.httpd.serve_forever, name="app-http", daemon=True).start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        if parts.path in ("", "/"):
            return self._send(request, 302, b"", {"Location": f"{route_prefix()}/console/"})
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        # nothing that widens trust is handed on: this server listens on loopback only, and the app
        # judges "local caller" by Host alone (``api.boundary.from_loopback``), so a client's
        # forwarding headers are dropped and none is added
        headers = {k: v for k, v in request.headers.items() if not _forwarding(k)}
        for route in self.routes:
            params = route.match(request.command, parts.path)
            if params is None:
                continue
            req = func.HttpRequest(
                request.command,
                f"{self.url}{request.path}",
                headers=headers,
                params=dict(parse_qsl(parts.query, keep_blank_values=True)),
                route_params=params,
                body=body,
            )
            client = {"client": self.host.client} if route.needs_client else {}
            with self.lock:
                response = self.host.call(route.function, req, **client)
            answer = dict(response.headers)
            answer.setdefault("Content-Type", response.mimetype or "application/octet-stream")
            return self._send(request, response.status_code, response.get_body() or b"", answer)
        detail = f"no function serves {request.command} {parts.path}"
        problem = {"type": "about:blank", "title": "Not Found", "status": 404, "detail": detail}
        self._send(request, 404, json.dumps(problem).encode(), {"Content-Type": "application/problem+json"})
        return None

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
        request.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding"):
                request.send_header(name, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
