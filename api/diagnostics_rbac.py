"""The role rows of ``GET /api/diagnostics``: the rights infra granted the app and each pool identity,
read back from the management plane.

The app cannot exercise another identity's rights, nor tell from a send whether it also holds the Manage
claim, so it lists the role assignments of each principal around each resource (Azure RBAC REST, "Role
Assignments - List For Scope", ``$filter=principalId eq '{id}'``), as the Reader infra makes it on the
three resources of :data:`RESOURCES`. What it expects (:func:`expected`) is what
``infra/modules/role-assignments.bicep`` and ``agent-pool.bicep`` grant (docs/deploy.md, "Roles"); a
grant at a wider scope (the namespace, the account) covers the narrower one. Infra names the identities
(``APP_PRINCIPAL_ID``, ``AGENT_POOL_IDENTITIES``) and resources in app settings; without them (locally)
the rows do not apply.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from typing import Any

from api.diagnostics_sections import Row, row

ARM_ENDPOINT = "https://management.azure.com"  # AZURE_RESOURCE_MANAGER_ENDPOINT overrides (other clouds)
RECEIVER = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0"
SENDER = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39"
OWNER = "090c5cfd-751d-490a-894a-3ce6f1109419"
TABLE = "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3"
BLOB = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
ROLE_NAMES = {
    RECEIVER: "Data Receiver",
    SENDER: "Data Sender",
    OWNER: "Data Owner",
    TABLE: "Storage Table Data Contributor",
    BLOB: "Storage Blob Data Contributor",
    PUBLISHER: "Monitoring Metrics Publisher",
}
# The resources whose role assignments are read: the app setting naming each resource id.
RESOURCES = ("SERVICE_BUS_NAMESPACE_ID", "STORAGE_ACCOUNT_ID", "APPLICATION_INSIGHTS_ID")
REMOTE_EFFECTS_TABLE = "RemoteEffects"  # the example agents' idempotency table (storage.bicep)


def _arm() -> str:
    return (os.environ.get("AZURE_RESOURCE_MANAGER_ENDPOINT") or ARM_ENDPOINT).rstrip("/")


def _assignments(resource: str, principal: str, token: str) -> set[tuple[str, str]]:
    """(role guid, lower-case scope) of every assignment of ``principal`` around ``resource``."""
    query = urllib.parse.urlencode(
        {"api-version": "2022-04-01", "$filter": f"principalId eq '{principal}'"},
        quote_via=urllib.parse.quote,
    )
    url = f"{_arm()}{resource}/providers/Microsoft.Authorization/roleAssignments?{query}"
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


def expected(settings: Any, pools: list[dict[str, Any]], ids: dict[str, str]) -> list[tuple[str, ...]]:
    """(who, principal id, role guid, resource id, scope) of every grant doctor reads back; ``ids`` maps
    each of :data:`RESOURCES` to its resource id."""
    from workflow_core.workflows.pools import pool_queue

    bus, storage, component = (ids[name] for name in RESOURCES)
    tables = (settings.ledger_table, settings.deadline_index_table, REMOTE_EFFECTS_TABLE)
    storage_scopes = [f"{storage}/tableServices/default/tables/{t}" for t in tables]
    blob = f"{storage}/blobServices/default/containers/{settings.payload_container}"
    app = os.environ.get("APP_PRINCIPAL_ID") or ""
    app_queues = [pool_queue(settings.work_queue, p) for p in settings.hosted_pools] + [settings.result_queue]
    rows = [("the app", app, OWNER, bus, f"{bus}/queues/{q}") for q in app_queues]
    for pool in pools:
        who, principal = f"pool {pool['name']}", str(pool["principalId"])
        grants = [(OWNER if pool.get("scalesOnQueue") else RECEIVER, bus, f"{bus}/queues/{pool['queue']}")]
        grants.append((SENDER, bus, f"{bus}/queues/{settings.result_queue}"))
        grants += [(RECEIVER, bus, f"{bus}/queues/{q}") for q in pool.get("answerQueues") or []]
        grants.append((PUBLISHER, component, component))
        if not pool.get("messageOnly"):
            grants += [(TABLE, storage, scope) for scope in storage_scopes] + [(BLOB, storage, blob)]
        rows += [(who, principal, *grant) for grant in grants]
    return [r for r in rows if r[1]]


def roles(services: Any) -> list[Row]:
    ids = {name: (os.environ.get(name) or "").rstrip("/") for name in RESOURCES}
    if not ids["SERVICE_BUS_NAMESPACE_ID"]:
        return [row("role", None, "SERVICE_BUS_NAMESPACE_ID is not set (local: not applicable)")]
    unset = [name for name, value in ids.items() if not value]
    if unset:
        fix = "deploy infra/main.bicep, which sets them (infra/modules/function-app.bicep)"
        return [row("role assignments", False, f"{', '.join(unset)} not set", fix)]
    wanted = expected(services.settings, json.loads(os.environ.get("AGENT_POOL_IDENTITIES") or "[]"), ids)
    try:
        from azure.identity import ManagedIdentityCredential

        credential = ManagedIdentityCredential(client_id=os.environ.get("AZURE_CLIENT_ID") or None)
        token = credential.get_token(f"{_arm()}/.default").token
        held = {key: _assignments(*key, token) for key in {(r[3], r[1]) for r in wanted}}
    except Exception as exc:  # no Reader, no identity: the rights cannot be read
        detail = f"cannot read role assignments: {type(exc).__name__}: {str(exc)[:300]}"
        fix = f"grant the app's identity Reader on {', '.join(ids.values())}"
        return [row("role assignments", False, detail, fix)]
    fix = "grant it in infra (role-assignments.bicep, agent-pool.bicep) and deploy"
    out = []
    for who, principal, role, resource, scope in wanted:
        target = scope.lower()  # a grant at a wider scope (the namespace, the account) covers it
        ok = any(
            r == role and s and (target + "/").startswith(s + "/") for r, s in held[(resource, principal)]
        )
        detail = f"{principal} {'holds' if ok else 'lacks'} it on {scope}"
        out.append(row(f"role {who}: {ROLE_NAMES[role]} on {scope.rsplit('/', 1)[-1]}", ok, detail, fix))
    return out
