"""Doctor reads back the Service Bus roles infra granted (api/diagnostics_rbac.py), against a stub of the
management plane served on loopback: the App Service managed identity endpoint the platform injects
(``IDENTITY_ENDPOINT``/``IDENTITY_HEADER``) and ARM's role assignment list on the namespace, the storage
account and the component. A role missing from the app (the Manage claim) or from a pool identity (its
queues, its storage, its telemetry) is a failed row naming who, the role and the scope."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from api import diagnostics
from api.diagnostics_rbac import BLOB, OWNER, PUBLISHER, RECEIVER, SENDER, TABLE
from tests.api.test_diagnostics import _clean_env, _failed, _rows  # noqa: F401 - the autouse fixture
from tests.api.test_doctor import served  # noqa: F401 - the app served over HTTP

ROLE_DEFINITIONS = "/subscriptions/sub/providers/Microsoft.Authorization/roleDefinitions"
GROUP = "/subscriptions/sub/resourceGroups/rg/providers"
NAMESPACE = f"{GROUP}/Microsoft.ServiceBus/namespaces/sb-test"
STORAGE = f"{GROUP}/Microsoft.Storage/storageAccounts/sttest"
COMPONENT = f"{GROUP}/Microsoft.Insights/components/appi-test"
MAIL = {  # an external message-only pool that asks: no storage role
    "name": "mail",
    "principalId": "pool-mail",
    "queue": "agent-work-mail",
    "scalesOnQueue": False,
    "messageOnly": True,
    "answerQueues": ["agent-results-answers-mail1"],
}
RUNNER = {  # a containerApp pool: sas-agent records in the ledger itself, KEDA scales it
    "name": "runner",
    "principalId": "pool-runner",
    "queue": "agent-work-runner",
    "scalesOnQueue": True,
    "messageOnly": False,
    "answerQueues": [],
}


class ManagementPlane(ThreadingHTTPServer):
    """Tokens for the identity header, and each principal's role assignments (role guid, scope)."""

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
        resource = url.path.removesuffix("/providers/Microsoft.Authorization/roleAssignments")
        if resource not in (NAMESPACE, STORAGE, COMPONENT):
            return self._json(404, {"error": url.path})
        principal = query["$filter"][0].split("'")[1]
        value = [  # at, above and below the resource, as ARM answers
            {"properties": {"roleDefinitionId": f"{ROLE_DEFINITIONS}/{role}", "scope": scope}}
            for role, scope in sorted(self.server.grants.get(principal, set()))
            if scope.startswith(resource) or resource.startswith(scope)
        ]
        return self._json(200, {"value": value})


@pytest.fixture
def plane(monkeypatch, services):
    server = ManagementPlane()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    s = services.settings
    server.grants = {
        "app-id": {_queue(OWNER, s.work_queue), _queue(OWNER, s.result_queue)},
        "pool-mail": {
            _queue(RECEIVER, MAIL["queue"]),
            _queue(SENDER, s.result_queue),
            _queue(RECEIVER, MAIL["answerQueues"][0]),
            (PUBLISHER, COMPONENT),
        },
        "pool-runner": {
            _queue(OWNER, RUNNER["queue"]),
            _queue(SENDER, s.result_queue),
            (PUBLISHER, COMPONENT),
            *[(TABLE, _table(name)) for name in (s.ledger_table, s.deadline_index_table, "RemoteEffects")],
            (BLOB, f"{STORAGE}/blobServices/default/containers/{s.payload_container}"),
        },
    }
    for name, value in {
        "IDENTITY_ENDPOINT": f"{server.url}/msi/token",
        "IDENTITY_HEADER": "platform-secret",
        "AZURE_RESOURCE_MANAGER_ENDPOINT": server.url,
        "SERVICE_BUS_NAMESPACE_ID": NAMESPACE,
        "STORAGE_ACCOUNT_ID": STORAGE,
        "APPLICATION_INSIGHTS_ID": COMPONENT,
        "APP_PRINCIPAL_ID": "app-id",
        "AGENT_POOL_IDENTITIES": json.dumps([MAIL, RUNNER]),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AZURE_CLIENT_ID", raising=False)
    services.liveness.record_tick()
    yield server
    server.shutdown()


def _queue(role: str, name: str) -> tuple[str, str]:
    return role, f"{NAMESPACE}/queues/{name}"


def _table(name: str) -> str:
    return f"{STORAGE}/tableServices/default/tables/{name}"


def test_every_role_infra_granted_is_read_back(services, plane):
    rows = {name: r for name, r in _rows(diagnostics.collect(services)).items() if name.startswith("role")}
    s = services.settings
    assert set(rows) == {
        f"role the app: Data Owner on {s.work_queue}",
        f"role the app: Data Owner on {s.result_queue}",
        "role pool mail: Data Receiver on agent-work-mail",
        f"role pool mail: Data Sender on {s.result_queue}",
        "role pool mail: Data Receiver on agent-results-answers-mail1",
        "role pool mail: Monitoring Metrics Publisher on appi-test",
        "role pool runner: Data Owner on agent-work-runner",
        f"role pool runner: Data Sender on {s.result_queue}",
        "role pool runner: Monitoring Metrics Publisher on appi-test",
        f"role pool runner: Storage Table Data Contributor on {s.ledger_table}",
        f"role pool runner: Storage Table Data Contributor on {s.deadline_index_table}",
        "role pool runner: Storage Table Data Contributor on RemoteEffects",
        f"role pool runner: Storage Blob Data Contributor on {s.payload_container}",
    }
    assert all(r["ok"] is True for r in rows.values()), rows


def _lost_grants(s) -> dict[str, tuple[str, tuple[str, str], str]]:
    """Each pool grant doctor reads back: (pool, the assignment, the row that names it)."""
    blob = f"{STORAGE}/blobServices/default/containers/{s.payload_container}"
    return {
        "work queue receiver": ("mail", _queue(RECEIVER, MAIL["queue"]), "Data Receiver on agent-work-mail"),
        "scaler's Manage": ("runner", _queue(OWNER, RUNNER["queue"]), "Data Owner on agent-work-runner"),
        "results sender": ("runner", _queue(SENDER, s.result_queue), f"Data Sender on {s.result_queue}"),
        "publisher": ("mail", (PUBLISHER, COMPONENT), "Monitoring Metrics Publisher on appi-test"),
        "ledger table": (
            "runner",
            (TABLE, _table(s.ledger_table)),
            f"Storage Table Data Contributor on {s.ledger_table}",
        ),
        "deadline table": (
            "runner",
            (TABLE, _table(s.deadline_index_table)),
            f"Storage Table Data Contributor on {s.deadline_index_table}",
        ),
        "effects table": (
            "runner",
            (TABLE, _table("RemoteEffects")),
            "Storage Table Data Contributor on RemoteEffects",
        ),
        "payload container": (
            "runner",
            (BLOB, blob),
            f"Storage Blob Data Contributor on {s.payload_container}",
        ),
    }


@pytest.mark.parametrize(
    "lost",
    [
        "work queue receiver",
        "scaler's Manage",
        "results sender",
        "publisher",
        "ledger table",
        "deadline table",
        "effects table",
        "payload container",
    ],
)
def test_each_missing_role_of_a_pool_is_a_failed_row_naming_pool_role_and_scope(services, plane, lost):
    """A pool's queue, storage and telemetry roles; a grant on the whole account covers a table."""
    pool, grant, name = _lost_grants(services.settings)[lost]
    plane.grants[f"pool-{pool}"].discard(grant)
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {f"role pool {pool}: {name}"}
    assert failed[f"role pool {pool}: {name}"]["detail"] == f"pool-{pool} lacks it on {grant[1]}"
    if grant[0] == TABLE:
        plane.grants[f"pool-{pool}"].add((TABLE, STORAGE))  # account-wide: wider, and enough
        assert _failed(diagnostics.collect(services)) == {}


def test_the_apps_manage_claim_and_a_pools_answer_queue_right_are_each_a_failed_row(services, plane):
    s = services.settings
    plane.grants["app-id"] = {
        _queue(OWNER, s.work_queue),
        _queue(SENDER, s.result_queue),
        _queue(RECEIVER, s.result_queue),
    }
    plane.grants["pool-mail"].discard(_queue(RECEIVER, MAIL["answerQueues"][0]))
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {
        f"role the app: Data Owner on {s.result_queue}",  # Send and Listen pass every probe; not Manage
        "role pool mail: Data Receiver on agent-results-answers-mail1",
    }


def test_roles_the_app_cannot_read_are_one_failed_row(services, plane, monkeypatch):
    monkeypatch.setenv("IDENTITY_HEADER", "wrong")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"role assignments"} and "Reader" in failed["role assignments"]["fix"]


def test_a_resource_infra_did_not_name_is_one_failed_row(services, plane, monkeypatch):
    monkeypatch.delenv("STORAGE_ACCOUNT_ID")
    failed = _failed(diagnostics.collect(services))
    assert (
        set(failed) == {"role assignments"} and "STORAGE_ACCOUNT_ID" in failed["role assignments"]["detail"]
    )


def test_sas_doctor_prints_the_missing_pool_role_as_one_line(served, services, plane):  # noqa: F811
    from tests.api.test_doctor import _doctor

    plane.grants["pool-runner"].discard((PUBLISHER, COMPONENT))
    code, out, _ = _doctor("--url", served.url)
    failed = [line for line in out.splitlines() if line.lstrip().startswith("FAIL")]
    assert code == 6 and len(failed) == 1, out
    assert "role pool runner: Monitoring Metrics Publisher on appi-test" in failed[0]
