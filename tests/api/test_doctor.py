"""``sas doctor`` against the app's diagnostics served over real HTTP (the demo's front end,
devtools/http_server.py) with Azurite behind it: each seeded fault in one line, exit 6; an app that
cannot be asked, exit 7; ``-o json`` for scripts."""

from __future__ import annotations

import asyncio
import io
import json
import re
from datetime import timedelta

import azure.functions as func
import pytest

from api import diagnostics
from devtools.http_server import AppHttpServer, Route, _compile
from operator_cli.cli import main
from tests.helpers.bare_host import BareHost
from workflow_core import clock, telemetry_instruments


@pytest.fixture
def served(services, monkeypatch, client):
    for name in (
        "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
        "PYTHON_ENABLE_OPENTELEMETRY",
        "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",
        "WEBSITE_AUTH_ENABLED",
        "ANSWER_QUEUES",
        "SERVICE_BUS_NAMESPACE_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(telemetry_instruments, "_configured_by", None)

    def answer(req: func.HttpRequest) -> func.HttpResponse:
        return asyncio.run(diagnostics.diagnostics(req, client, services))

    route = Route(
        "http_diagnostics",
        frozenset({"GET"}),
        _compile("/api/diagnostics"),
        "/api/diagnostics",
        False,
        answer,
    )
    server = AppHttpServer(BareHost(), [route]).start()
    yield server
    server.close()


def _doctor(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["doctor", *args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_healthy_app_exits_0(served, services):
    services.liveness.record_tick()
    code, out, _ = _doctor("--url", served.url)
    assert code == 0, out
    assert "FAIL" not in out and "watchdog last ran" in out


def test_a_stopped_watchdog_is_one_failed_line_and_exit_6(served, services):
    services.liveness.record_tick(now=clock.utcnow() - timedelta(minutes=30))
    code, out, _ = _doctor("--url", served.url)
    assert code == 6
    failed = [line for line in out.splitlines() if line.lstrip().startswith("FAIL")]
    assert len(failed) == 1 and "watchdog last tick" in failed[0], out
    assert re.search(r"watchdog last ran 180[0-5] s ago", out)


def test_a_wrong_backend_and_json_output(served, services, monkeypatch):
    services.liveness.record_tick()
    monkeypatch.setenv("DURABLE_TASK_SCHEDULER_CONNECTION_STRING", "Endpoint=https://x;Authentication=None")
    code, out, _ = _doctor("--url", served.url, "-o", "json")
    assert code == 6
    body = json.loads(out)
    assert body["ok"] is False and body["failed"] == 1
    (row,) = [r for r in body["checks"] if r["ok"] is False]
    assert row["check"] == "host.json durable backend" and "host.json" in row["assumption"]


def test_an_unreachable_app_exits_7():
    code, out, err = _doctor("--url", "http://127.0.0.1:9", "--timeout", "2")
    assert code == 7 and not out and err.startswith("error: cannot reach") and err.count("\n") == 1
    code, out, _ = _doctor("--url", "http://127.0.0.1:9", "--timeout", "2", "-o", "json")
    assert code == 7 and json.loads(out)["reachable"] is False and "cannot reach" in json.loads(out)["error"]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://x", "not a url"])
def test_a_url_that_is_not_http_is_refused(url):
    code, _, err = _doctor("--url", url)
    assert code == 7 and "http(s)" in err


def test_the_url_comes_from_sas_api_url_and_the_key_from_sas_function_key(served, services, monkeypatch):
    """One set of settings for every command that asks the app (operator_cli/api_client.py)."""
    services.liveness.record_tick()
    seen = []
    monkeypatch.setattr(diagnostics, "diagnostics", _recording(diagnostics.diagnostics, seen))
    monkeypatch.setenv("SAS_API_URL", served.url)
    monkeypatch.setenv("SAS_FUNCTION_KEY", "k3y")
    code, out, _ = _doctor()
    assert code == 0, out
    assert seen == [("k3y", "sas-cli")]


def _recording(answer, seen):
    async def recorded(req, client, services):
        seen.append((req.headers.get("x-functions-key"), req.headers.get("x-sas-client")))
        return await answer(req, client, services)

    return recorded


def test_a_refusal_exits_7_with_what_to_pass(served, monkeypatch):
    monkeypatch.setenv("WEBSITE_INSTANCE_ID", "x")
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "True")
    code, _, err = _doctor("--url", served.url)
    assert code == 7 and "HTTP 401" in err and "--token" in err and "SAS_FUNCTION_KEY" in err


def test_an_answer_that_is_not_a_report_exits_7():
    def junk(req):
        return func.HttpResponse(json.dumps({"sections": "nope"}), status_code=200)

    route = Route("x", frozenset({"GET"}), _compile("/api/diagnostics"), "/api/diagnostics", False, junk)
    server = AppHttpServer(BareHost(), [route]).start()
    try:
        code, _, err = _doctor("--url", server.url)
    finally:
        server.close()
    assert code == 7 and "not a diagnostics report" in err


def test_doctor_help_documents_the_exit_codes(capsys):
    code, _, _ = _doctor("--help")
    out = capsys.readouterr().out
    assert code == 0 and "6 a check failed" in out and "7 the app could not be asked" in out


def _stale_timer(services, _monkeypatch, _stub) -> None:
    services.liveness.record_tick(
        timer="maintenance",
        schedule="0 */5 * * * *",
        now=clock.utcnow() - timedelta(hours=1),
    )


FAULTS = {
    "durable backend round trip": lambda services, monkeypatch, stub: setattr(stub, "status_failure", 500),
    "maintenance last tick": _stale_timer,
    "telemetry exporter": lambda s, monkeypatch, stub: monkeypatch.setenv(
        "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "true"
    ),
    "-answers-gone": lambda s, monkeypatch, stub: monkeypatch.setenv(  # the line names the queue
        "ANSWER_QUEUES", f"{s.settings.result_queue}-answers-gone"
    ),
}


@pytest.mark.parametrize("check", list(FAULTS))
def test_each_running_system_fault_is_one_named_failed_line(served, services, monkeypatch, stub, check):
    """What doctor asks the running system (not its settings): a Durable backend that does not answer,
    a timer that stopped, an exporter the worker did not start, an answer queue the app cannot send to."""
    services.liveness.record_tick()
    FAULTS[check](services, monkeypatch, stub)
    code, out, _ = _doctor("--url", served.url)
    assert code == 6, out
    failed = [line for line in out.splitlines() if line.lstrip().startswith("FAIL")]
    assert len(failed) == 1 and check in failed[0], out
