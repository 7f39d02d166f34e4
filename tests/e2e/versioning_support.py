"""Two versions of one workflow and the agents they use, for the versioning acceptance tests.

v2 differs from v1 in every way the issue names: a step added (``portal``), one removed (``audit``),
two reordered (``dns`` now before ``storage``), a deadline changed (``storage`` 60 s -> 120 s, its
compensation 30 s -> 90 s), an agent renamed (``mail``: ``vt.mail`` -> ``vt.mail2``) and a
compensator renamed (``dns``: ``vt.dns_undo`` -> ``vt.dns_undo2``). The agents record every call,
and fail a work step when the input's ``fail_at`` names it, so a test can drive either outcome per
instance.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import azure.functions as func

from activities.worker.handlers.base import agent
from devtools.harness import PatternHarness
from workflow_core.workflows import clear_workflow_cache, loader

WORKFLOW = "versioned"


def _step(step_id: str, agent_name: str, deadline: int, undo: str | None = None, undo_deadline: int = 30):
    step: dict[str, Any] = {
        "id": step_id,
        "agent": agent_name,
        "deadline_seconds": deadline,
        "retry": {"max_attempts": 1},
        "input": {"fail_at": "$input.fail_at", "tenant_id": "$input.tenant_id"},
    }
    if undo:
        step["compensation"] = {
            "agent": undo,
            "deadline_seconds": undo_deadline,
            "retry": {"max_attempts": 1},
        }
    return step


def _definition(label: str, steps: list[dict[str, Any]], checkpoint_every: int = 25) -> dict[str, Any]:
    return {
        "name": WORKFLOW,
        "version": label,
        "history_checkpoint_every": checkpoint_every,
        "input": {
            "required": ["tenant_id"],
            "properties": {"tenant_id": {"type": "string"}, "fail_at": {"type": "string", "default": "none"}},
        },
        "steps": steps,
    }


def v1(checkpoint_every: int = 25) -> dict[str, Any]:
    return _definition(
        "1",
        [
            _step("storage", "vt.storage", 60, "vt.storage_undo", 30),
            _step("dns", "vt.dns", 60, "vt.dns_undo", 30),
            _step("audit", "vt.audit", 45),
            _step("mail", "vt.mail", 60),
        ],
        checkpoint_every,
    )


def v2(checkpoint_every: int = 25) -> dict[str, Any]:
    return _definition(
        "2",
        [
            _step("dns", "vt.dns", 60, "vt.dns_undo2", 40),
            _step("storage", "vt.storage", 120, "vt.storage_undo", 90),
            _step("portal", "vt.portal", 60, "vt.portal_undo", 30),
            _step("mail", "vt.mail2", 60),
        ],
        checkpoint_every,
    )


@dataclass(frozen=True)
class Expected:
    """What a run on one version must look like: steps in order with (agent, deadline), and the
    compensations of a run that fails at ``mail``, in undo order with (compensator, deadline)."""

    steps: tuple[tuple[str, str, int], ...]
    undo: tuple[tuple[str, str, int], ...]


V1 = Expected(
    steps=(
        ("storage", "vt.storage", 60),
        ("dns", "vt.dns", 60),
        ("audit", "vt.audit", 45),
        ("mail", "vt.mail", 60),
    ),
    undo=(("dns", "vt.dns_undo", 30), ("storage", "vt.storage_undo", 30)),
)
V2 = Expected(
    steps=(
        ("dns", "vt.dns", 60),
        ("storage", "vt.storage", 120),
        ("portal", "vt.portal", 60),
        ("mail", "vt.mail2", 60),
    ),
    undo=(("portal", "vt.portal_undo", 30), ("storage", "vt.storage_undo", 90), ("dns", "vt.dns_undo2", 40)),
)

# (instance, step, agent, kind) of every agent call, in call order
CALLS: list[tuple[str, str, str, str]] = []
_calls_lock = threading.Lock()


def _make_agent(name: str) -> None:
    def handler(ctx: Any) -> dict[str, Any]:
        with _calls_lock:
            CALLS.append((ctx.instance_id, ctx.step_id, name, ctx.kind))
        if ctx.kind == "work" and ctx.input.get("fail_at") == ctx.step_id:
            raise RuntimeError(f"asked to fail at {ctx.step_id}")
        return {"done": ctx.step_id, "agent": name}

    agent(name)(handler)


for _name in (
    "vt.storage",
    "vt.storage_undo",
    "vt.dns",
    "vt.dns_undo",
    "vt.dns_undo2",
    "vt.audit",
    "vt.mail",
    "vt.mail2",
    "vt.portal",
    "vt.portal_undo",
):
    _make_agent(_name)


def deploy(definition: dict[str, Any] | None) -> None:
    """Deploy a new definition of the workflow (None: delete its file), then reload definitions,
    as a new deployment of the app would."""
    path = Path(loader.DEFAULT_DIRECTORY) / f"{WORKFLOW}.yaml"
    if definition is None:
        path.unlink()
    else:
        path.write_text(json.dumps(definition, indent=1), encoding="utf-8")  # JSON is YAML
    clear_workflow_cache()


def start(
    h: PatternHarness, tenant: str, *, fail_at: str = "none", version: str | None = None
) -> tuple[int, dict]:
    """POST /api/workflows/versioned/instances through the real starter: (status code, body)."""
    params = {"instance_id": tenant}
    if version is not None:
        params["version"] = version
    request = func.HttpRequest(
        "POST",
        f"{h.host.base_url}/api/workflows/{WORKFLOW}/instances",
        headers={"Content-Type": "application/json", "X-SAS-Client": "tests"},
        params=params,
        route_params={"name": WORKFLOW},
        body=json.dumps({"tenant_id": tenant, "fail_at": fail_at}).encode(),
    )
    response = h.host.call("http_start_workflow", request, client=h.host.client)
    return response.status_code, json.loads(response.get_body() or b"{}")


def started(h: PatternHarness, tenant: str, **kwargs: Any) -> str:
    code, body = start(h, tenant, **kwargs)
    assert code == 202, body
    return body["version"]


def work_calls(iid: str) -> list[tuple[str, str]]:
    return [(step, name) for i, step, name, kind in CALLS if i == iid and kind == "work"]


def undo_calls(iid: str) -> list[tuple[str, str]]:
    return [(step, name) for i, step, name, kind in CALLS if i == iid and kind == "compensate"]


def deadlines(h: PatternHarness, iid: str, to_status: str) -> dict[str, int]:
    """Seconds between the write that moved each step to ``to_status`` first and the deadline it set."""
    found: dict[str, int] = {}
    for e in h.events_for(iid):
        if e.to_status == to_status and e.step_id not in found and e.record is not None and e.record.deadline:
            found[e.step_id] = round((e.record.deadline - e.at).total_seconds())
    return found


def assert_followed(h: PatternHarness, iid: str, version: str, expected: Expected, *, failed: bool) -> None:
    """The instance ran exactly on ``expected``: ledger rows, agents called, deadlines, compensators."""
    rows = sorted(h.ledger.list_for_instance(iid), key=lambda r: r.sequence)
    assert [(r.step_id, r.agent) for r in rows] == [(s, a) for s, a, _ in expected.steps]
    assert {r.workflow_version for r in rows} == {version}
    assert h.ledger.get_instance(iid).version == version
    # a failing run fails at mail, the last step: every step ran either way
    assert work_calls(iid) == [(s, a) for s, a, _ in expected.steps]
    assert deadlines(h, iid, "Dispatched") == {s: d for s, _, d in expected.steps}
    if failed:
        assert undo_calls(iid) == [(s, a) for s, a, _ in expected.undo]
        assert deadlines(h, iid, "Compensating") == {s: d for s, _, d in expected.undo}
        assert h.ledger.get_instance(iid).status.value == "Compensated"
    else:
        assert undo_calls(iid) == []
        assert h.ledger.get_instance(iid).status.value == "Succeeded"


def settle_all(h: PatternHarness, ids: list[str]) -> None:
    done = {"Succeeded", "Compensated", "CompensationFailed", "Failed", "Cancelled"}
    h.run_until(
        lambda: all(h.ledger.get_instance(i).status.value in done for i in ids), timeout=timedelta(hours=6)
    )
