"""The operator API of per-agent limits (docs/agent-limits.md): read every limited agent's circuit
and slots, open or close a circuit by hand, and the "waiting" marks of the instance view.

Opening or closing is an operator action like any other (the same door, a reason, an
``Idempotency-Key``), audited on the circuit as ``operator:<caller>``. An operator's open holds until
an operator closes it: no probe, no watchdog moves it.
"""

from __future__ import annotations

import logging
from typing import Any

import azure.functions as func

from api.boundary import caller_name
from api.responses import (
    ApiError,
    ServicesSource,
    call_ledger,
    idempotent,
    json_errors,
    json_object_body,
    json_response,
    required_reason,
    resolve_services,
)
from supervisor import operator
from supervisor.watchdog import wake_parked
from workflow_core import clock
from workflow_core.ledger import AuditEntry, StepRecord
from workflow_core.ledger.model import AGENT_NAME
from workflow_core.limits import CircuitStore
from workflow_core.limits.circuits import waiting_steps
from workflow_core.limits.rows import partition_of
from workflow_core.workflows.loader import agent_pools

log = logging.getLogger(__name__)

CIRCUIT_ACTIONS = ("open", "close")
MAX_REASON = 2_000


@json_errors
async def list_circuits(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``GET /api/circuits``: each agent with declared limits, its circuit, slots held and waiters."""
    svc = resolve_services(services)
    views = await call_ledger(svc, lambda _: [v.to_json() for v in svc.circuits.states()])
    return json_response({"circuits": views, "now": clock.utcnow().isoformat().replace("+00:00", "Z")})


@json_errors
async def circuit_action(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``POST /api/circuits/{agent}/{open|close}`` with ``{"reason": "..."}``."""
    agent = req.route_params.get("agent", "")
    action = req.route_params.get("action", "")
    if action not in CIRCUIT_ACTIONS:
        raise ApiError(
            404, f"no circuit action {action[:40]!r}", ["circuit actions: open, close"], code="unknown-action"
        )
    limits = agent_pools().limits_of(agent) if AGENT_NAME.match(agent) and len(agent) <= 200 else None
    if limits is None or limits.circuit is None:
        declared = sorted(a for a, lim in agent_pools().agents.items() if lim.circuit is not None)
        raise ApiError(
            404,
            f"agent {agent[:200]!r} declares no circuit",
            [
                "declare one under agents: in workflows/pools.yaml "
                "(circuit: {failure_threshold, open_seconds})",
                f"agents with a circuit: {', '.join(declared) or 'none'}",
            ],
            code="not-found",
        )
    reason = required_reason(
        json_object_body(req), recorded_in="the circuit's audit trail", max_length=MAX_REASON
    )
    user = caller_name(req)
    actor = operator.actor_for(user)
    svc = resolve_services(services)

    async def move() -> func.HttpResponse:
        def act(_: Any) -> dict[str, Any]:
            svc.circuits.operator_move(
                agent, limits.circuit, open_it=action == "open", actor=actor, reason=reason
            )
            (view,) = svc.circuits.states({agent: limits})
            return view.to_json()

        circuit = await call_ledger(svc, act)
        if action == "close":  # the steps parked behind it go now, not at the end of their park
            await wake_parked(client, svc, agent)
        log.info("operator %s: circuit of %s %s (%s)", user, agent, action, reason)
        return json_response({"action": action, "actor": actor, "circuit": circuit})

    return await idempotent(req, svc, partition_of(agent), f"{action} circuit {agent}", actor, move)


def attention_circuits(ledger: Any) -> list[dict[str, Any]]:
    """The inbox's circuits: every one not closed, with its line ("circuit open for X since ...")."""
    views = CircuitStore(ledger).states()
    return [{**v.to_json(), "text": v.attention_text()} for v in views if v.attention_text()]


def mark_waiting(body: dict[str, Any], steps: list[StepRecord], audit: list[AuditEntry]) -> None:
    """Give each step the dispatch holds back (its next attempt noted ``waiting``, not started) a
    ``waiting`` reason in the instance view."""
    waits = waiting_steps(steps, audit)
    for view in body.get("steps", []):
        if isinstance(view, dict) and view.get("id") in waits:
            view["waiting"] = waits[view["id"]]
