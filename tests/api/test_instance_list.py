"""GET /api/instances: the ledger's instance records, newest first, filters that combine, and paging
that returns every instance exactly once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api.operator_api import list_instances
from tests.api.support import http_request, json_of
from workflow_core import clock
from workflow_core.ledger import InstanceStatus
from workflow_core.workflows import get_workflow, version_of

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def get(params):
    return http_request("GET", "/api/instances", params=params)


@pytest.fixture
def populated(ledger):
    """250 instances started a minute apart (some at the same minute), of two workflows."""
    ids = []
    for n in range(250):
        started = T0 + timedelta(minutes=n // 2)  # pairs share a start time: the id breaks the tie
        with clock.use_clock(lambda started=started: started):
            record = ledger.create_instance(
                f"inst-{n:03d}",
                "order-fulfilment" if n % 2 else "provision-tenant",
                actor="test",
                input_json="{}",
                scheduler_deadline=started + timedelta(minutes=5),
                business_key=f"cust-{n % 5}-{n}",
                version=version_of(get_workflow("order-fulfilment" if n % 2 else "provision-tenant")),
            )
            if n % 10 == 0:
                ledger.transition_instance(record, InstanceStatus.FAILED, actor="test", needs_attention=True)
        ids.append(record.instance_id)
    return ids


def test_paging_over_250_instances_returns_each_exactly_once_newest_first(run, client, services, populated):
    seen, token, pages = [], None, 0
    while True:
        params = {"limit": "37", **({"continuation": token} if token else {})}
        body = json_of(run(list_instances(get(params), client, services)))
        seen += [i["instanceId"] for i in body["instances"]]
        pages += 1
        token = body["continuation"]
        if token is None:
            break
    assert pages == 7 and len(seen) == 250 and set(seen) == set(populated)
    # newest first; instances started at the same moment in instance-id order (a stable tie-break)
    assert seen[:2] == ["inst-248", "inst-249"] and seen[-2:] == ["inst-000", "inst-001"]


def test_filters_combine(run, client, services, populated):
    params = {
        "workflow": "provision-tenant",
        "status": "Failed",
        "businessKey": "cust-0",
        "startedFrom": (T0 + timedelta(minutes=10)).isoformat(),
        "startedTo": (T0 + timedelta(minutes=100)).isoformat(),
        "needsAttention": "true",
    }
    body = json_of(run(list_instances(get(params), client, services)))
    got = [i["instanceId"] for i in body["instances"]]
    expected = [
        i for n, i in enumerate(populated) if n % 2 == 0 and n % 10 == 0 and n % 5 == 0 and 20 <= n < 200
    ]
    assert sorted(got) == sorted(expected) and got, got
    assert all(i["status"] == "Failed" and i["needsAttention"] for i in body["instances"])


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"limit": "0"}, "invalid-filter"),
        ({"startedFrom": "yesterday"}, "invalid-filter"),
        ({"needsAttention": "maybe"}, "invalid-filter"),
        ({"status": "Runing"}, "invalid-request"),
        ({"continuation": "garbage!"}, "invalid-continuation"),
    ],
)
def test_bad_filters_are_problems(run, client, services, params, code):
    response = run(list_instances(get(params), client, services))
    assert response.status_code == 400 and json_of(response)["code"] == code
