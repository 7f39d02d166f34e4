"""GET /api/diagnostics against Azurite: each seeded fault is named in one failed row."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from api import diagnostics
from api import diagnostics_sections as sections
from tests.api.support import http_request
from workflow_core import clock, liveness, telemetry_instruments
from workflow_core.runtime import Services
from workflow_core.settings import load_settings

CLEAN = (
    "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
    "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",
    "PYTHON_ENABLE_OPENTELEMETRY",
    "WEBSITE_SITE_NAME",
    "WEBSITE_INSTANCE_ID",
    "WEBSITE_AUTH_ENABLED",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(telemetry_instruments, "_configured", False)
    monkeypatch.setattr(telemetry_instruments, "_configured_by", None)


def _rows(body):
    return {r["check"]: r for rows in body["sections"].values() for r in rows}


def _failed(body):
    return {name: r for name, r in _rows(body).items() if r["ok"] is False}


def test_a_healthy_local_app_passes_every_check(services):
    liveness.record_tick(services.ledger.table_client())
    body = diagnostics.collect(services)
    assert _failed(body) == {} and body["ok"] is True and body["failed"] == 0
    rows = _rows(body)
    assert rows[f"table {services.settings.ledger_table}"]["ok"] is True
    assert rows[f"queue {services.settings.work_queue}"]["detail"].startswith("probe sent and deleted; depth")
    assert re.match(
        r"watchdog last ran \d s ago", rows["watchdog last tick"]["detail"]
    )  # a loaded machine: 1 s
    # the probes left nothing behind
    assert (
        list(services.ledger.table_client().query_entities(f"PartitionKey eq '{sections.PROBE_PREFIX}'"))
        == []
    )


def test_no_value_of_any_setting_is_returned(services, monkeypatch):
    monkeypatch.setenv("APPLICATIONINSIGHTS_CONNECTION_STRING", "InstrumentationKey=secret-value-123")
    text = json.dumps(diagnostics.collect(services))
    assert "secret-value-123" not in text and "AccountKey" not in text
    assert "APPLICATIONINSIGHTS_CONNECTION_STRING" in text


def test_a_wrong_backend_in_host_json(services, monkeypatch):
    liveness.record_tick(services.ledger.table_client())
    monkeypatch.setenv("DURABLE_TASK_SCHEDULER_CONNECTION_STRING", "Endpoint=https://x;Authentication=None")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"host.json durable backend"}
    assert "storageProvider.type=AzureStorage" in failed["host.json durable backend"]["detail"]
    assert "DURABLE_BACKEND" in failed["host.json durable backend"]["fix"]


def test_telemetry_configured_twice_and_the_null_propagator(services, monkeypatch):
    liveness.record_tick(services.ledger.table_client())
    monkeypatch.setenv("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "true")
    monkeypatch.setattr(telemetry_instruments, "_configured", True)
    monkeypatch.setattr(telemetry_instruments, "_configured_by", "app")
    assert set(_failed(diagnostics.collect(services))) == {"telemetry configured once"}
    monkeypatch.delenv("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY")
    monkeypatch.setenv("PYTHON_ENABLE_OPENTELEMETRY", "true")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"telemetry propagator"}
    assert "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true" in failed["telemetry propagator"]["fix"]


def test_a_watchdog_that_stopped_ticking(services):
    liveness.record_tick(services.ledger.table_client(), now=clock.utcnow() - timedelta(hours=1))
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"watchdog last tick"}
    assert "watchdog last ran 3600 s ago" in failed["watchdog last tick"]["detail"]


def test_a_watchdog_that_never_ticked(services):
    assert set(_failed(diagnostics.collect(services))) == {"watchdog last tick"}


def test_a_missing_role_fails_the_access_probes(app_env, azurite):
    # Azurite has no RBAC: a wrong account key gets the same 403 a missing data role gets in Azure.
    wrong = azurite.connection_string.replace("AccountKey=", "AccountKey=AAAA")
    services = Services(load_settings({**app_env, "AzureWebJobsStorage": wrong}))
    try:
        failed = _failed(diagnostics.collect(services))
    finally:
        services.close()
    table = f"table {app_env['LEDGER_TABLE_NAME']}"
    assert table in failed and "Storage Table Data Contributor" in failed[table]["fix"]
    assert any(name.startswith("queue ") for name in failed)


def test_providers_plug_in_and_a_failing_one_is_a_row(services):
    liveness.record_tick(services.ledger.table_client())
    installed = dict(sections.PROVIDERS)  # the app's own providers, put back afterwards
    sections.register_provider(
        "canary", lambda _s: [sections.row("canary last verdict", True, "passed 12 s ago")]
    )

    def broken(_services):
        raise RuntimeError("boom")

    sections.register_provider("circuits", broken)
    try:
        rows = _rows(diagnostics.collect(services))
    finally:
        for name in ("canary", "circuits"):
            sections.register_provider(name, installed.get(name))
    assert rows["canary last verdict"]["ok"] is True
    assert rows["circuits"]["ok"] is False and "RuntimeError" in rows["circuits"]["detail"]


def test_the_endpoint_needs_the_operator_role_behind_platform_authentication(run, services, platform_auth):
    response = run(diagnostics.diagnostics(http_request("GET", "/api/diagnostics"), None, services))
    assert response.status_code == 401
    reader = {
        "X-MS-CLIENT-PRINCIPAL-NAME": "r@example",
        "X-MS-CLIENT-PRINCIPAL": _principal("Workflows.Read"),
    }
    response = run(
        diagnostics.diagnostics(http_request("GET", "/api/diagnostics", headers=reader), None, services)
    )
    assert response.status_code == 403


def test_forged_identity_headers_are_refused_without_platform_authentication(run, services):
    forged = {"X-MS-CLIENT-PRINCIPAL-NAME": "admin@example"}
    response = run(
        diagnostics.diagnostics(http_request("GET", "/api/diagnostics", headers=forged), None, services)
    )
    assert response.status_code == 403


def test_locally_the_endpoint_answers_a_loopback_read(run, services):
    liveness.record_tick(services.ledger.table_client())
    response = run(diagnostics.diagnostics(http_request("GET", "/api/diagnostics"), None, services))
    assert response.status_code == 200
    assert json.loads(response.get_body())["ok"] is True


def _principal(role: str) -> str:
    import base64

    claims = {"claims": [{"typ": "roles", "val": role}, {"typ": "name", "val": "r@example"}]}
    return base64.b64encode(json.dumps(claims).encode()).decode()


def test_the_watchdog_records_its_tick_with_an_etag(services):
    table = services.ledger.table_client()
    assert liveness.last_tick(table) is None
    first = clock.utcnow() - timedelta(seconds=30)
    assert liveness.record_tick(table, now=first, overdue=2) is True
    assert liveness.record_tick(table, overdue=1, errors=1) is True
    tick = liveness.last_tick(table)
    assert tick is not None and tick.ticks == 2 and tick.overdue == 1 and tick.errors == 1
    assert tick.age_seconds() < 5
