"""The role rows of ``GET /api/diagnostics``: the Service Bus rights infra granted, read back from the
management plane.

The app cannot exercise another identity's rights, nor tell from a send whether it also holds the Manage
claim, so it reads the role assignments themselves: ``GET {arm}/{namespace}/providers/
Microsoft.Authorization/roleAssignments?$filter=principalId eq '{id}'`` answers every assignment of that
principal at, above and below the namespace (Azure RBAC REST, "Role Assignments - List For Scope"),
with the app's identity, which infra makes Reader on the namespace. Expected, per
``infra/modules/role-assignments.bicep`` and ``agent-pool.bicep``:

* the app: Azure Service Bus Data Owner on each queue it receives from (the Manage claim the scale
  controller's target-based scaling needs; Send and Listen alone pass every probe);
* each pool served elsewhere: Data Receiver on its work queue (Data Owner when KEDA scales on it), Data
  Sender on the result queue, Data Receiver on each of its answer queues.

Infra names the identities (``APP_PRINCIPAL_ID``, ``AGENT_POOL_IDENTITIES``) and the namespace
(``SERVICE_BUS_NAMESPACE_ID``) in app settings; without them (locally) the rows do not apply.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from typing import Any

from api.diagnostics_sections import Row, row

ARM_ENDPOINT = "https://management.azure.com"  # AZURE_RESOURCE_MANAGER_ENDPOINT overrides (other clouds)
RECEIVER, SENDER, OWNER = (
    "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
    "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
    "090c5cfd-751d-490a-894a-3ce6f1109419",
)
ROLE_NAMES = {RECEIVER: "Data Receiver", SENDER: "Data Sender", OWNER: "Data Owner"}


def _arm() -> str:
    return (os.environ.get("AZURE_RESOURCE_MANAGER_ENDPOINT") or ARM_ENDPOINT).rstrip("/")


def _assignments(namespace: str, principal: str, token: str) -> set[tuple[str, str]]:
    """(role guid, lower-case scope) of every assignment of ``principal`` around ``namespace``."""
    query = urllib.parse.urlencode(
        {"api-version": "2022-04-01", "$filter": f"principalId eq '{principal}'"},
        quote_via=urllib.parse.quote,
    )
    url = f"{_arm()}{namespace}/providers/Microsoft.Authorization/roleAssignments?{query}"
    found: set[tuple[str, str]] = set()
    while url:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            page = json.loads(response.read(2_000_000))
        for item in page.get("value") or []:
            props = item.get("properties") or {}
            role = str(props.get("roleDefinitionId") or "").rsplit("/", 1)[-1].lower()
            found.add((role, str(props.get("scope") or "").lower()))
        url = page.get("nextLink")
    return found


def expected(settings: Any, pools: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(who, principal id, role guid, queue) of every Service Bus grant doctor reads back."""
    from workflow_core.workflows.pools import pool_queue

    app = os.environ.get("APP_PRINCIPAL_ID") or ""

    rows = [("the app", app, OWNER, pool_queue(settings.work_queue, p)) for p in settings.hosted_pools]
    rows.append(("the app", app, OWNER, settings.result_queue))
    for pool in pools:
        who, principal = f"pool {pool['name']}", str(pool["principalId"])
        rows.append((who, principal, OWNER if pool.get("scalesOnQueue") else RECEIVER, pool["queue"]))
        rows.append((who, principal, SENDER, settings.result_queue))
        rows.extend((who, principal, RECEIVER, queue) for queue in pool.get("answerQueues") or [])
    return [r for r in rows if r[1]]


def roles(services: Any) -> list[Row]:
    namespace = (os.environ.get("SERVICE_BUS_NAMESPACE_ID") or "").rstrip("/")
    if not namespace:
        return [row("role", None, "SERVICE_BUS_NAMESPACE_ID is not set (local: not applicable)")]
    pools = json.loads(os.environ.get("AGENT_POOL_IDENTITIES") or "[]")
    wanted = expected(services.settings, pools)
    fix = "grant it in infra (role-assignments.bicep, agent-pool.bicep) and deploy"
    try:
        from azure.identity import ManagedIdentityCredential

        credential = ManagedIdentityCredential(client_id=os.environ.get("AZURE_CLIENT_ID") or None)
        token = credential.get_token(f"{_arm()}/.default").token
        held = {p: _assignments(namespace, p, token) for p in {r[1] for r in wanted}}
    except Exception as exc:  # no Reader, no identity: the rights cannot be read
        detail = f"cannot read role assignments: {type(exc).__name__}: {str(exc)[:300]}"
        return [row("role assignments", False, detail, f"grant the app's identity Reader on {namespace}")]
    out = []
    for who, principal, role, queue in wanted:
        scope = f"{namespace}/queues/{queue}".lower()
        ok = (role, scope) in held[principal] or (role, namespace.lower()) in held[principal]
        detail = f"{principal} {'holds' if ok else 'lacks'} it"
        out.append(row(f"role {who}: {ROLE_NAMES[role]} on {queue}", ok, detail, fix))
    return out
