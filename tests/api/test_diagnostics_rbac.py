"""Doctor reads back the Service Bus roles infra granted (api/diagnostics_rbac.py), against a stub of the
management plane served on loopback: the App Service managed identity endpoint the platform injects
(``IDENTITY_ENDPOINT``/``IDENTITY_HEADER``) and ARM's role assignment list. A role missing from the app
(the Manage claim) or from a pool identity is a failed row naming it."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from api import diagnostics
from api.diagnostics_rbac import OWNER, RECEIVER, SENDER
from tests.api.test_diagnostics import _clean_env, _failed, _rows  # noqa: F401 - the autouse fixture

ROLE_DEFINITIONS = "/subscriptions/sub/providers/Microsoft.Authorization/roleDefinitions"
NAMESPACE = "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.ServiceBus/namespaces/sb-test"
MAIL = {
    "name": "mail",
    "principalId": "pool-mail",
    "queue": "agent-work-mail",
    "scalesOnQueue": False,
    "answerQueues": ["agent-results-answers-mail1"],
}


class ManagementPlane(ThreadingHTTPServer):
    """Tokens for the identity header, and each principal's role assignments (role guid, queue)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.grants: dict[str, set[tuple[str, str]]] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: ManagementPlane

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/msi/token":
            if self.headers.get("X-IDENTITY-HEADER") != "platform-secret":
                return self._json(401, {"error": "no identity header"})
            expires = str(int(time.time()) + 3600)
            return self._json(
                200,
                {
                    "access_token": "t0k3n",
                    "expires_on": expires,
                    "resource": query["resource"][0],
                    "token_type": "Bearer",
                },
            )
        if self.headers.get("Authorization") != "Bearer t0k3n":
            return self._json(401, {"error": "no token"})
        if url.path != f"{NAMESPACE}/providers/Microsoft.Authorization/roleAssignments":
            return self._json(404, {"error": url.path})
        principal = query["$filter"][0].split("'")[1]
        value = [
            {
                "properties": {
                    "roleDefinitionId": f"{ROLE_DEFINITIONS}/{role}",
                    "scope": f"{NAMESPACE}/queues/{queue}",
                    "principalId": principal,
                }
            }
            for role, queue in sorted(self.server.grants.get(principal, set()))
        ]
        return self._json(200, {"value": value})


@pytest.fixture
def plane(monkeypatch, services):
    server = ManagementPlane()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    s = services.settings
    server.grants = {
        "app-id": {(OWNER, s.work_queue), (OWNER, s.result_queue)},
        "pool-mail": {
            (RECEIVER, MAIL["queue"]),
            (SENDER, s.result_queue),
            (RECEIVER, MAIL["answerQueues"][0]),
        },
    }
    for name, value in {
        "IDENTITY_ENDPOINT": f"{server.url}/msi/token",
        "IDENTITY_HEADER": "platform-secret",
        "AZURE_RESOURCE_MANAGER_ENDPOINT": server.url,
        "SERVICE_BUS_NAMESPACE_ID": NAMESPACE,
        "APP_PRINCIPAL_ID": "app-id",
        "AGENT_POOL_IDENTITIES": json.dumps([MAIL]),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AZURE_CLIENT_ID", raising=False)
    services.liveness.record_tick()
    yield server
    server.shutdown()


def test_every_role_infra_granted_is_read_back(services, plane):
    rows = {name: r for name, r in _rows(diagnostics.collect(services)).items() if name.startswith("role")}
    s = services.settings
    assert set(rows) == {
        f"role the app: Data Owner on {s.work_queue}",
        f"role the app: Data Owner on {s.result_queue}",
        "role pool mail: Data Receiver on agent-work-mail",
        f"role pool mail: Data Sender on {s.result_queue}",
        "role pool mail: Data Receiver on agent-results-answers-mail1",
    }
    assert all(r["ok"] is True for r in rows.values()), rows


def test_the_apps_manage_claim_and_a_pools_answer_queue_right_are_each_a_failed_row(services, plane):
    s = services.settings
    plane.grants["app-id"] = {(OWNER, s.work_queue), (SENDER, s.result_queue), (RECEIVER, s.result_queue)}
    plane.grants["pool-mail"].discard((RECEIVER, MAIL["answerQueues"][0]))
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {
        f"role the app: Data Owner on {s.result_queue}",  # Send and Listen pass every probe; not Manage
        "role pool mail: Data Receiver on agent-results-answers-mail1",
    }


def test_roles_the_app_cannot_read_are_one_failed_row(services, plane, monkeypatch):
    monkeypatch.setenv("IDENTITY_HEADER", "wrong")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"role assignments"} and "Reader" in failed["role assignments"]["fix"]
