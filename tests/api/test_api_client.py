"""The operator CLI's one client of the app's API (operator_cli/api_client.py), against a real HTTP
server answering what the app answers: a problem+json refusal is one line naming its details and exits
2; a refused credential, a missing route or a server error exits 7 with what to do."""

from __future__ import annotations

import io
import json

import azure.functions as func
import pytest

from api.problems import ApiError as Problem
from devtools.http_server import AppHttpServer, Route, _compile
from operator_cli.cli import main
from tests.helpers.bare_host import BareHost


@pytest.fixture
def app():
    """``POST /api/canary/runs`` answering whatever the test puts in ``answers``, recording the calls."""
    answers: list[func.HttpResponse] = []
    calls: list[tuple[dict, dict]] = []

    def runs(req: func.HttpRequest) -> func.HttpResponse:
        calls.append((dict(req.headers), req.get_json()))
        return answers.pop(0)

    route = Route("runs", frozenset({"POST"}), _compile("/api/canary/runs"), "/api/canary/runs", False, runs)
    server = AppHttpServer(BareHost(), [route]).start()
    server.answers, server.calls = answers, calls
    yield server
    server.close()


def sas(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), stdout=out, stderr=err), out.getvalue(), err.getvalue()


def test_a_started_run_sends_the_key_and_client_header_and_prints_the_instance(app, monkeypatch):
    monkeypatch.setenv("SAS_FUNCTION_KEY", "k3y")
    monkeypatch.setenv("SAS_API_URL", app.url)
    body = {"instanceId": "sas-canary-1", "scenario": "retry", "pool": "default", "workflow": "sas-canary"}
    app.answers.append(func.HttpResponse(json.dumps(body), status_code=202))
    code, out, err = sas("canary", "run", "--scenario", "retry", "--pool", "default")
    assert code == 0, err
    assert "started sas-canary-1 (retry, sas-canary in pool default)" in out
    ((headers, sent),) = app.calls
    headers = {k.lower(): v for k, v in headers.items()}
    assert sent == {"scenario": "retry", "pool": "default"}
    assert headers["x-functions-key"] == "k3y" and headers["x-sas-client"] == "sas-cli"


def test_a_problem_answer_is_one_line_with_its_details_and_exit_2(app):
    problem = Problem(
        400, "invalid canary run", ["pool must be one of the canary pools: default"], code="invalid-input"
    )
    app.answers.append(problem.to_response())
    code, _, err = sas("canary", "run", "--scenario", "retry", "--pool", "nope", "--url", app.url)
    assert code == 2 and err.count("\n") == 1, err
    assert "HTTP 400" in err and "invalid canary run" in err and "pool must be one of the canary pools" in err


@pytest.mark.parametrize(
    ("status", "says"),
    [(401, "SAS_FUNCTION_KEY"), (403, "Workflows.Operate"), (404, "no such route"), (503, "app's logs")],
)
def test_credentials_routes_and_server_errors_exit_7_with_what_to_do(app, status, says):
    app.answers.append(func.HttpResponse("nope", status_code=status))
    code, _, err = sas("canary", "run", "--scenario", "retry", "--url", app.url, "--timeout", "5")
    assert code == 7 and f"HTTP {status}" in err and says in err, err
