"""The client facade (the SDK's own DurableOrchestrationClient, served in process) and app loading."""

from __future__ import annotations

import json
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func
import pytest

from devtools.durable_host import DurableTestClient, DurableTestHost

Status = df.OrchestrationRuntimeStatus


def approval(ctx):
    event = ctx.wait_for_external_event("approved")
    timeout = ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=5))
    winner = yield ctx.task_any([event, timeout])
    if winner == event:
        timeout.cancel()
        return {"approved_by": event.result}
    return {"approved_by": None}


def request(url: str = "https://myapp.example.net/api/approvals", body: bytes = b"") -> func.HttpRequest:
    return func.HttpRequest(method="POST", url=url, body=body)


@pytest.fixture
def host():
    with DurableTestHost(orchestrators={"approval": approval}) as h:
        yield h


def test_client_is_the_sdk_client_with_the_same_async_api(host):
    client = host.client
    assert isinstance(client, df.DurableOrchestrationClient)
    assert isinstance(client, DurableTestClient)
    for name in ("start_new", "get_status", "raise_event", "terminate", "get_status_all", "get_status_by"):
        assert callable(getattr(client, name))


def test_http_starter_body_runs_with_the_client_and_gets_a_real_check_status_response(host):
    async def http_start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        instance_id = await client.start_new("approval", None, {"ticket": 7})
        return client.create_check_status_response(req, instance_id)

    response = host.call(http_start, request(), client=host.client)

    assert response.status_code == 202
    body = json.loads(response.get_body())
    instance_id = body["id"]
    assert response.headers["Location"] == body["statusQueryGetUri"]
    assert body["statusQueryGetUri"].startswith(
        "https://myapp.example.net/runtime/webhooks/durabletask/instances/"
    )
    assert instance_id in body["sendEventPostUri"] and "{eventName}" in body["sendEventPostUri"]
    assert {"terminatePostUri", "purgeHistoryDeleteUri"} <= body.keys()
    assert host.get_status(instance_id).input_ == {"ticket": 7}


def test_status_events_and_errors_through_the_client_from_an_async_body(host):
    async def scenario(client: df.DurableOrchestrationClient) -> dict:
        instance_id = await client.start_new("approval", "ticket-1")
        pending = await client.get_status(instance_id)
        duplicate = None
        try:
            await client.start_new("approval", "ticket-1")
        except Exception as exc:
            duplicate = exc
        missing = await client.get_status("no-such-instance")
        try:
            await client.raise_event("no-such-instance", "approved", "x")
        except Exception as exc:
            unknown_event = str(exc)
        return {
            "id": instance_id,
            "pending": pending,
            "duplicate": duplicate,
            "missing": missing,
            "unknown_event": unknown_event,
        }

    seen = host.call(scenario, host.client)
    assert seen["id"] == "ticket-1"
    assert seen["pending"].runtime_status == Status.Pending
    assert seen["pending"].name == "approval"
    assert seen["pending"].created_time is not None
    assert "already exists" in str(seen["duplicate"])
    assert not seen["missing"]  # the SDK's falsy status for a 404
    assert seen["missing"].runtime_status is None
    assert seen["unknown_event"] == "No instance with ID no-such-instance found."

    host.run_until_idle()
    running = host.run_async(host.client.get_status("ticket-1"))
    assert running.runtime_status == Status.Running

    host.run_async(host.client.raise_event("ticket-1", "approved", "alice"))
    status = host.run_until_complete("ticket-1")
    assert status.output == {"approved_by": "alice"}

    done = host.run_async(host.client.get_status("ticket-1"))
    assert done.runtime_status == Status.Completed
    assert done.output == {"approved_by": "alice"}
    assert done.last_updated_time >= done.created_time
    with pytest.raises(Exception, match="is gone"):
        host.run_async(host.client.raise_event("ticket-1", "approved", "bob"))


def test_terminate_and_queries_through_the_client(host):
    first = host.start_new("approval", "q-1")
    second = host.start_new("approval", "q-2")
    host.start_new("approval", "other-3")
    host.run_until_idle()
    host.raise_event(first, "approved", "carol")
    host.run_until_complete(first)

    host.run_async(host.client.terminate(second, "no longer needed"))
    host.run_async(host.client.terminate(second, "twice is fine (410)"))
    with pytest.raises(Exception, match="No instance"):
        host.run_async(host.client.terminate("nope", "x"))

    everything = host.run_async(host.client.get_status_all())
    assert sorted(s.instance_id for s in everything) == ["other-3", "q-1", "q-2"]
    finished = host.run_async(host.client.get_status_by(runtime_status=[Status.Completed, Status.Terminated]))
    assert {s.instance_id: s.runtime_status for s in finished} == {
        "q-1": Status.Completed,
        "q-2": Status.Terminated,
    }
    terminated = host.run_async(host.client.get_status(second))
    assert terminated.output == "no longer needed"


# -- loading a DFApp -------------------------------------------------------------------------------


def build_app() -> df.DFApp:
    bp = df.Blueprint()

    @bp.orchestration_trigger(context_name="context")
    def greet_all(context: df.DurableOrchestrationContext):
        names = context.get_input()
        greetings = yield context.task_all([context.call_activity("say_hello", n) for n in names])
        return greetings

    @bp.activity_trigger(input_name="person")
    def say_hello(person: str) -> str:
        return f"Hello {person}"

    @bp.route(route="greet", methods=["POST"])
    @bp.durable_client_input(client_name="client")
    async def http_greet(req: func.HttpRequest, client) -> func.HttpResponse:
        instance_id = await client.start_new("greet_all", client_input=req.get_json())
        return client.create_check_status_response(req, instance_id)

    app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
    app.register_blueprint(bp)
    return app


def test_a_dfapp_with_a_blueprint_is_loaded_through_a_single_get_functions_call():
    app = build_app()
    calls = []
    original = app.get_functions
    app.get_functions = lambda: calls.append(1) or original()

    host = DurableTestHost(app)

    assert calls == [1]
    assert set(host.functions.orchestrators) == {"greet_all"}
    assert set(host.functions.activities) == {"say_hello"}
    assert host.functions.activities["say_hello"].parameter == "person"
    assert "http_greet" in host.functions.others

    response = host.call("http_greet", request(body=b'["Ada", "Grace"]'), client=host.client)
    instance_id = json.loads(response.get_body())["id"]
    status = host.run_until_complete(instance_id)
    assert status.output == ["Hello Ada", "Hello Grace"]


def test_a_blueprint_and_explicit_maps_can_be_combined():
    bp = df.Blueprint()

    @bp.activity_trigger(input_name="value")
    def triple(value: int) -> int:
        return value * 3

    def uses_both(ctx):
        tripled = yield ctx.call_activity("triple", ctx.get_input())
        return (yield ctx.call_activity("negate", tripled))

    host = DurableTestHost(bp, {"uses_both": uses_both, "negate": lambda v: -v})
    assert host.run_until_complete(host.start_new("uses_both", input=5)).output == -15
