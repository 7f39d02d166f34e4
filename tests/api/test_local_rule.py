"""Locally, "from this machine" is decided by ``Host`` alone (a loopback name on the served port):
a forged ``X-Forwarded-For`` or a DNS-rebinding name is refused through the Functions entry points,
for views as for actions, and the step is untouched."""

from __future__ import annotations

import pytest

from api.boundary import from_loopback
from api.operator_api import list_instances, step_action
from tests.api.support import http_request, json_of
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus

URL = "http://localhost:7071/api/instances"


@pytest.fixture(autouse=True)
def _local(monkeypatch):
    for name in ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME", "WEBSITE_AUTH_ENABLED"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("host", ["localhost:7071", "127.0.0.1:7071", "[::1]:7071", "LOCALHOST:7071"])
def test_loopback_names_on_the_served_port_are_local(host):
    assert from_loopback({"Host": host}, URL)


@pytest.mark.parametrize(
    "host",
    [
        "rebind.example:7071",  # a name resolving to 127.0.0.1: DNS rebinding
        "127.0.0.1.nip.io:7071",
        "localhost:8080",  # another port than the one served
        "localhost",  # no port: 80
        "localhost.:7071",
        "127.0.0.2:7071",
        "user@localhost:7071",
        "localhost:7071/x",
        "",
    ],
)
def test_other_hosts_are_not_local_whatever_the_forwarding_headers_say(host):
    forged = {"Host": host, "X-Forwarded-For": "127.0.0.1", "Forwarded": "for=127.0.0.1"}
    assert not from_loopback(forged, URL)


def test_through_the_entry_points_a_forged_forwarded_for_with_a_rebinding_host_is_403(
    run, client, services, ledger
):
    make_step(ledger, "rebind", StepStatus.FAILED)
    forged = {"Host": "rebind.example:7071", "X-Forwarded-For": "127.0.0.1"}
    action = http_request(
        "POST",
        "/api/instances/rebind/steps/create_storage/skip",
        body={"reason": "attack"},
        route_params={"instance_id": "rebind", "step_id": "create_storage", "action": "skip"},
        headers={**forged, "Origin": "http://rebind.example:7071", "Sec-Fetch-Site": "same-origin"},
    )
    view = http_request("GET", "/api/instances", headers=forged)

    for response in (run(step_action(action, client, services)), run(list_instances(view, client, services))):
        assert (response.status_code, json_of(response)["code"]) == (403, "not-loopback")
    assert ledger.get("rebind", "create_storage").status is StepStatus.FAILED
