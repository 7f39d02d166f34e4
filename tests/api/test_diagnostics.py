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
    "PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME",
    "PYTHON_ENABLE_OPENTELEMETRY",
    "WEBSITE_SITE_NAME",
    "WEBSITE_INSTANCE_ID",
    "WEBSITE_AUTH_ENABLED",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(telemetry_instruments, "_configured_by", None)


def _rows(body):
    return {r["check"]: r for rows in body["sections"].values() for r in rows}


def _failed(body):
    return {name: r for name, r in _rows(body).items() if r["ok"] is False}


def test_a_healthy_local_app_passes_every_check(services):
    services.liveness.record_tick()
    body = diagnostics.collect(services)
    assert _failed(body) == {} and body["ok"] is True and body["failed"] == 0
    rows = _rows(body)
    assert rows[f"table {services.settings.ledger_table}"]["ok"] is True
    assert rows[f"queue {services.settings.work_queue}"]["detail"].startswith("probe sent and deleted; depth")
    # recorded just before the probes ran (which take a few seconds on a loaded machine)
    assert re.search(r"watchdog last ran \d s ago", rows["watchdog last tick"]["detail"])
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
    services.liveness.record_tick()
    monkeypatch.setenv("DURABLE_TASK_SCHEDULER_CONNECTION_STRING", "Endpoint=https://x;Authentication=None")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"host.json durable backend"}
    assert "storageProvider.type=AzureStorage" in failed["host.json durable backend"]["detail"]
    assert "DURABLE_BACKEND" in failed["host.json durable backend"]["fix"]


@pytest.fixture
def exporter_on():
    """An OpenTelemetry log handler on a logger, as configure_azure_monitor(logger_name=...) leaves it."""
    import logging

    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler

    added: list[tuple[logging.Logger, logging.Handler]] = []

    def attach(name: str) -> None:
        handler = LoggingHandler(logger_provider=LoggerProvider())
        logging.getLogger(name).addHandler(handler)
        added.append((logging.getLogger(name), handler))

    yield attach
    for logger, handler in added:
        logger.removeHandler(handler)


def test_telemetry_configured_twice_and_the_null_propagator(services, monkeypatch, exporter_on):
    exporter_on("sas")
    monkeypatch.setenv("PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME", "sas")
    services.liveness.record_tick()
    monkeypatch.setenv("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "true")
    monkeypatch.setattr(telemetry_instruments, "_configured_by", "app")
    assert set(_failed(diagnostics.collect(services))) == {"telemetry configured once"}
    monkeypatch.delenv("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY")
    monkeypatch.setenv("PYTHON_ENABLE_OPENTELEMETRY", "true")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"telemetry propagator"}
    assert "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true" in failed["telemetry propagator"]["fix"]


def test_a_watchdog_that_stopped_ticking(services):
    services.liveness.record_tick(now=clock.utcnow() - timedelta(hours=1))
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"watchdog last tick"}
    assert re.match(r"watchdog last ran 360[0-5] s ago", failed["watchdog last tick"]["detail"])


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


def test_providers_plug_in_and_a_failing_one_is_a_row(services, monkeypatch):
    services.liveness.record_tick()
    monkeypatch.setitem(
        diagnostics.PROVIDERS,
        "canary",
        lambda _s: [sections.row("canary last verdict", True, "passed 12 s ago")],
    )

    def broken(_services):
        raise RuntimeError("boom")

    monkeypatch.setitem(diagnostics.PROVIDERS, "circuits", broken)
    rows = _rows(diagnostics.collect(services))
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
    services.liveness.record_tick()
    response = run(diagnostics.diagnostics(http_request("GET", "/api/diagnostics"), None, services))
    assert response.status_code == 200
    assert json.loads(response.get_body())["ok"] is True


def _principal(role: str) -> str:
    import base64

    claims = {"claims": [{"typ": "roles", "val": role}, {"typ": "name", "val": "r@example"}]}
    return base64.b64encode(json.dumps(claims).encode()).decode()


def test_the_watchdog_records_its_tick_with_an_etag(services):
    table = services.ledger.table_client()
    assert liveness.Liveness(table).last_tick() is None
    first = clock.utcnow() - timedelta(seconds=30)
    assert liveness.Liveness(table).record_tick(now=first, overdue=2) is True
    assert liveness.Liveness(table).record_tick(overdue=1, errors=1) is True
    tick = liveness.Liveness(table).last_tick()
    assert tick is not None and tick.ticks == 2 and tick.overdue == 1 and tick.errors == 1
    assert tick.age_seconds() < 5


@pytest.mark.parametrize(
    ("change", "check"),
    [
        (
            lambda h: h["extensions"]["durableTask"]["storageProvider"].pop("maxQueuePollingInterval"),
            "polling",
        ),
        (
            lambda h: h["extensions"]["durableTask"]["storageProvider"].update(
                maxQueuePollingInterval="00:00:30"
            ),
            "polling",
        ),
        (lambda h: h["extensionBundle"].update(version="[3.*, 4.0.0)"), "extension bundle"),
        (lambda h: h["extensionBundle"].update(version="[4.*, 6.0.0)"), "extension bundle"),
    ],
)
def test_a_packaged_host_json_off_the_platforms_rules_fails_its_row(services, tmp_path, change, check):
    """The running app reads the host.json it was packaged with (the one the host and the scale
    controller read): a polling interval over 10 s or another bundle range is a failed row."""
    host = json.loads((sections.APP_ROOT / "host.json").read_text(encoding="utf-8"))
    assert {r["check"]: r["ok"] for r in sections.host_json(services, root=sections.APP_ROOT)} == {
        "host.json durable backend": True,
        "host.json task hub": True,
        "host.json telemetryMode": True,
        "host.json extension bundle": True,
        "host.json polling interval": True,
    }
    change(host)
    (tmp_path / "host.json").write_text(json.dumps(host), encoding="utf-8")
    failed = [r["check"] for r in sections.host_json(services, root=tmp_path) if r["ok"] is False]
    assert failed == [f"host.json {'polling interval' if check == 'polling' else check}"]


def test_an_exporter_the_worker_did_not_start_or_started_on_another_logger(
    services, monkeypatch, exporter_on
):
    """The worker owns telemetry: its configure_azure_monitor failing (a missing package, a bad
    connection string) leaves no handler, and a logger name other than ``sas`` misses the app's
    records; either is the failed row "telemetry exporter"."""
    services.liveness.record_tick()
    monkeypatch.setenv("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "true")
    monkeypatch.setenv("PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME", "sas")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"telemetry exporter"} and "did not start" in failed["telemetry exporter"]["fix"]

    exporter_on("myapp")
    monkeypatch.setenv("PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME", "myapp")
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"telemetry exporter"}
    assert "started by the worker on logger 'myapp'" in failed["telemetry exporter"]["detail"]

    exporter_on("sas")
    monkeypatch.setenv("PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME", "sas")
    rows = _rows(diagnostics.collect(services))
    assert rows["telemetry exporter"]["ok"] is True


def test_the_durable_backend_is_asked_through_the_apps_client(run, services, client, stub):
    """A status query through the Durable client binding: "no such instance" is a backend that answered;
    a refused call (a missing Durable Task Data Contributor, a wrong scheduler endpoint or hub) or an
    extension that does not answer is the failed row "durable backend round trip"."""
    from azure.durable_functions import DurableOrchestrationClient

    services.liveness.record_tick()
    req = http_request("GET", "/api/diagnostics")

    body = json.loads(run(diagnostics.diagnostics(req, client, services)).get_body())
    assert body["ok"] is True and _rows(body)["durable backend round trip"]["ok"] is True
    assert stub.requests_to("GET", "/instances/sas-doctor-probe")

    stub.status_failure = 500
    failed = _failed(json.loads(run(diagnostics.diagnostics(req, client, services)).get_body()))
    assert (
        set(failed) == {"durable backend round trip"}
        and "HTTP 500" in failed["durable backend round trip"]["detail"]
    )

    gone = DurableOrchestrationClient(stub.binding_json().replace(f":{stub.port}/", ":9/"))
    failed = _failed(json.loads(run(diagnostics.diagnostics(req, gone, services)).get_body()))
    assert set(failed) == {"durable backend round trip"}
