"""Offline checks of the agent pools in ``infra/`` (``agentPools``: a work queue, a dead-letter alert, and,
for a pool served outside the Function App, an identity with least-privilege roles, per pool; the
optional Container Apps module).

Two kinds of check, like ``bicep_checks.py``: structure read from pycep's syntax trees, and values. For
the values, :class:`PoolEvaluator` evaluates main.bicep's pool variables and the module parameters built
from them for a given ``agentPools`` (the default, or the three-pool example of docs/deploy.md), with
the few functions they use (``filter``, ``first``, ``concat``, ``join``, ``empty``, for-expressions, the
conditional and ``??`` operators); anything else fails loudly rather than being guessed.

pycep reads ``a.b == c`` as ``a.(b == c)`` (its property accessor swallows the rest of the expression);
the evaluator re-associates such accessors, and the templates parenthesise comparisons so the other
operators come out right.
"""

from __future__ import annotations

import re
from typing import Any

from tests.infra import bicep_checks as bc

AGENT_POOL = "modules/agent-pool.bicep"
CONTAINER_APPS = "modules/agent-pool-containerapp.bicep"
ROLE_ASSIGNMENTS = "modules/role-assignments.bicep"
ALERTS = "modules/servicebus-alerts.bicep"
SERVICE_BUS = "modules/servicebus.bicep"
LOGIC_APP = bc.LOGIC_APP_POOL
DEFAULT_POOLS = [{"name": "default", "hosting": "app"}]
TOKEN = "a1b2c3d4e5f6g"  # uniqueString(): 13 lower-case letters and digits
POOL_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){0,19}$")  # as workflows/pools.yaml

# An agent pool's own identity: role -> (name, scope type, symbol of the scope in agent-pool.bicep).
POOL_ROLES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # its work queue, and the answer queues its agents read (a messageOnly pool that asks)
    bc.SERVICE_BUS_DATA_RECEIVER: (
        "Azure Service Bus Data Receiver",
        bc.SERVICE_BUS_QUEUE,
        ("poolQueue", "answerQueues"),
    ),
    bc.SERVICE_BUS_DATA_OWNER: ("Azure Service Bus Data Owner", bc.SERVICE_BUS_QUEUE, ("poolQueue",)),
    bc.SERVICE_BUS_DATA_SENDER: ("Azure Service Bus Data Sender", bc.SERVICE_BUS_QUEUE, ("resultQueue",)),
    bc.STORAGE_TABLE_DATA_CONTRIBUTOR: (
        "Storage Table Data Contributor",
        bc.STORAGE_TABLE,
        ("ledgerTable", "deadlineIndexTable", "remoteEffectsTable"),
    ),
    bc.STORAGE_BLOB_DATA_CONTRIBUTOR: (
        "Storage Blob Data Contributor",
        "Microsoft.Storage/storageAccounts/blobServices/containers",
        ("payloadContainer",),
    ),
    bc.MONITORING_METRICS_PUBLISHER: (
        "Monitoring Metrics Publisher",
        "Microsoft.Insights/components",
        ("appInsights",),
    ),
}
STORAGE_ROLES = {bc.STORAGE_TABLE_DATA_CONTRIBUTOR, bc.STORAGE_BLOB_DATA_CONTRIBUTOR}
# Settings the runner reads, identity-based, as the Function App gets them.
RUNNER_SETTINGS = (
    "AzureWebJobsStorage__credential",
    "AzureWebJobsStorage__clientId",
    "AzureWebJobsStorage__blobServiceUri",
    "AzureWebJobsStorage__queueServiceUri",
    "AzureWebJobsStorage__tableServiceUri",
    "ServiceBusConnection__fullyQualifiedNamespace",
    "ServiceBusConnection__credential",
    "ServiceBusConnection__clientId",
    "AZURE_CLIENT_ID",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
    "AGENT_TRANSPORT",
    "LEDGER_TABLE_NAME",
    "DEADLINE_INDEX_TABLE_NAME",
    "WORK_QUEUE_NAME",
    "RESULT_QUEUE_NAME",
    "PAYLOAD_CONTAINER_NAME",
)


class PoolEvaluator:
    """main.bicep's variables and module parameters for a given ``agentPools`` and environment name
    (the pool checks, and the resource-name rules in test_resource_names)."""

    def __init__(
        self,
        files: dict[str, bc.BicepFile],
        agent_pools: list[dict[str, Any]] | None = None,
        environment: str = "dev",
    ):
        main = files[bc.MAIN]
        self.variables = main.section("variables")
        self.params = {name: p.get("default") for name, p in main.section("parameters").items()}
        self.params["environmentName"] = environment
        if agent_pools is not None:
            self.params["agentPools"] = agent_pools
        self.modules = bc.modules_of(main)

    def var(self, name: str) -> Any:
        return self.value(name)

    def module_param(self, module_path: str, name: str, item: dict[str, Any] | None = None) -> Any:
        """A parameter main.bicep passes to ``module_path`` (``item``: the loop's pool, if looped)."""
        for path, params, _condition in self.modules.values():
            if path == module_path:
                return self.value(params[name], {"pool": item} if item is not None else {})
        raise KeyError(module_path)

    def module_condition(self, module_path: str) -> Any:
        for path, _params, condition in self.modules.values():
            if path == module_path:
                return True if condition is None else self.value(condition)
        raise KeyError(module_path)

    # -- the evaluator ------------------------------------------------------------------------------------

    def value(self, expr: Any, scope: dict[str, Any] | None = None) -> Any:
        scope = scope or {}
        if expr is None or isinstance(expr, bool | int | float):
            return expr
        if isinstance(expr, list):
            return [self.value(item, scope) for item in expr]
        if isinstance(expr, str):
            return self._name(expr, scope)
        if "loop_type" in expr:
            detail = expr["loop_type"]["detail"]
            items = self.value(detail["array_name"], scope)
            return [self.value(expr["config"], {**scope, detail["item_name"]: item}) for item in items]
        function = bc._node(expr, "function")
        if function is not None:
            return self._function(function, scope)
        op = bc._node(expr, "operator")
        if op is not None:
            return self._operator(op, scope)
        return {key: self.value(item, scope) for key, item in expr.items()}

    def _name(self, name: str, scope: dict[str, Any]) -> Any:
        if name in scope:
            return scope[name]
        if name in self.params:
            return self.params[name]
        if name in self.variables:
            return self.value(self.variables[name]["value"])
        if "${" in name:
            return re.sub(r"\$\{([\w.]+)\}", lambda m: str(self._dotted(m.group(1), scope)), name)
        return name  # a string literal

    def _dotted(self, text: str, scope: dict[str, Any]) -> Any:
        head, *rest = text.split(".")
        current = self._name(head, scope)
        for key in rest:
            current = current[key]
        return current

    def _function(self, function: dict[str, Any], scope: dict[str, Any]) -> Any:
        kind = function.get("type")
        params = function.get("parameters") or {}
        if kind == "filter":
            lam = params["expression"]["detail"]
            items = self.value(params["input_array"], scope)
            return [i for i in items if self.value(lam["expression"], {**scope, lam["var_1"]: i})]
        if kind == "map":  # pycep names map()'s arguments arg_1, arg_2
            lam = params["arg_2"]["detail"]
            items = self.value(params["arg_1"], scope)
            return [self.value(lam["expression"], {**scope, lam["var_1"]: i}) for i in items]
        args = [self.value(arg, scope) for arg in params.values()]
        if kind in _VALIDATION_FUNCTIONS:  # the agentPools checks (agent-pools-validation.bicep)
            return _VALIDATION_FUNCTIONS[kind](*args)
        if kind == "first":
            return args[0][0] if args[0] else None
        if kind == "empty":
            return not args[0]
        if kind == "concat":
            return [item for arg in args for item in arg]
        if kind == "flatten":
            return [item for arg in args[0] for item in arg]
        if kind == "join":
            return args[1].join(args[0])
        if kind == "to_lower":
            return args[0].lower()
        if kind == "replace":
            return args[0].replace(args[1], args[2])
        if kind == "take":
            return args[0][: args[1]]
        if kind == "unique_string":
            return TOKEN
        if kind == "subscription":
            return {"id": "/subscriptions/sub-id", "subscriptionId": "sub-id"}
        if kind == "resource_group":
            return {"id": "/subscriptions/sub-id/resourceGroups/rg", "name": "rg", "location": "westeurope"}
        raise AssertionError(f"the pool evaluator does not know {kind}(): extend it, do not guess")

    def _operator(self, op: dict[str, Any], scope: dict[str, Any], left: Any = ..., **_: Any) -> Any:
        kind = op.get("type")
        operands = op.get("operands") or {}
        if kind == "property_accessor":
            base = self.value(operands["operand_1"], scope) if left is ... else left
            return self._access(base, operands["operand_2"], scope)
        if kind == "conditional":
            chosen = "true_value" if self.value(operands["condition"], scope) else "false_value"
            return self.value(operands[chosen], scope)
        if kind == "not":
            return not self.value(operands["bool_value"], scope)
        first = self.value(operands["operand_1"], scope) if left is ... else left
        second = self.value(operands["operand_2"], scope)
        if kind == "equals":
            return first == second
        if kind == "not_equals":
            return first != second
        if kind == "coalesce":
            return second if first is None else first
        if kind in _VALIDATION_OPERATORS:
            return _VALIDATION_OPERATORS[kind](first, second)
        raise AssertionError(f"the pool evaluator does not know the operator {kind}: extend it")

    def _access(self, base: Any, key: Any, scope: dict[str, Any]) -> Any:
        if isinstance(key, str):
            return base.get(key) if isinstance(base, dict) else None  # ``.?`` on a missing key: null
        op = bc._node(key, "operator")
        assert op is not None, key
        inner = op.get("operands") or {}
        # pycep's ``a.(b <op> c)``: apply the access to the leftmost operand, then the operator.
        head = inner.get("operand_1")
        accessed = self._access(base, head, scope)
        return self._operator(op, scope, left=accessed)


def check_pool_parameter(files: dict[str, bc.BicepFile], infra_dir=bc.INFRA_DIR) -> list[str]:
    """Deploys unchanged unless someone opts in: one default pool hosted by the app, set nowhere else."""
    problems = []
    main = files[bc.MAIN]
    default = (main.section("parameters").get("agentPools") or {}).get("default")
    if default != DEFAULT_POOLS:
        problems.append(f"{bc.MAIN}: param agentPools must default to {DEFAULT_POOLS!r}, is {default!r}")
    for path in [*sorted(infra_dir.glob("main.*.bicepparam")), infra_dir / "main.parameters.json"]:
        if path.is_file() and "agentPools" in path.read_text(encoding="utf-8"):
            problems.append(f"{path.name} sets agentPools: the shipped environments keep the default pool")
    _site, raw = bc.app_settings_of(files)
    if "HOSTED_POOLS" not in raw:
        problems.append("app setting HOSTED_POOLS (the pools the app receives from) is not set")
    if problems:
        return problems
    default = PoolEvaluator(files)
    if default.module_param("modules/function-app.bicep", "hostedPools") != "default":
        problems.append("by default the app must host the default pool (HOSTED_POOLS = 'default')")
    if default.var("remotePools"):
        problems.append("by default no pool is served outside the app (no pool identity)")
    if default.module_condition(CONTAINER_APPS) is not False:
        problems.append(f"{CONTAINER_APPS} must not be deployed unless a pool asks for it")
    return problems


def check_pool_queues(files: dict[str, bc.BicepFile]) -> list[str]:
    """A work queue per pool other than the default one, with exactly the work queue's settings."""
    problems = []
    queues = {q.symbol: q for q in bc.declared(files, bc.SERVICE_BUS_QUEUE) if q.file == SERVICE_BUS}
    work, looped = queues.get("workQueue"), queues.get("poolQueues")
    if work is None or looped is None:
        return [f"{SERVICE_BUS}: no workQueue or no poolQueues (a work queue per agent pool)"]
    raw = files[SERVICE_BUS].section("resources")["poolQueues"]["config"]
    source = ((raw.get("loop_type") or {}).get("detail") or {}).get("array_name")
    if source != "poolQueueNames" or looped.config.get("name") != (raw["loop_type"]["detail"]["item_name"]):
        problems.append(f"{SERVICE_BUS}: poolQueues must loop over poolQueueNames, one queue each")
    for key in sorted(set(work.properties) | set(looped.properties)):
        if work.properties.get(key) != looped.properties.get(key):
            problems.append(
                f"{SERVICE_BUS}: pool queues' {key} is {bc.dotted(looped.properties.get(key))}, the work "
                f"queue's {bc.dotted(work.properties.get(key))}: a pool's queue has the work queue's settings"
            )
    return problems


def check_pool_alerts(files: dict[str, bc.BicepFile]) -> list[str]:
    """A dead-letter alert per pool (every pool, the default one too), on that pool's queue."""
    alerts = [a for a in bc.declared(files, "Microsoft.Insights/metricAlerts") if a.file == ALERTS]
    raw = files[ALERTS].section("resources") if ALERTS in files else {}
    for alert in alerts:
        detail = ((raw[alert.symbol]["config"].get("loop_type") or {}).get("detail")) or {}
        item = detail.get("item_name")
        if detail.get("array_name") != "pools":
            continue
        for criterion in (alert.properties.get("criteria") or {}).get("allOf") or []:
            values = [
                bc.dotted(v)
                for d in criterion.get("dimensions") or []
                if d.get("name") == "EntityName" and d.get("operator") == "Include"
                for v in d.get("values") or []
            ]
            if (
                criterion.get("metricName") == "DeadletteredMessages"
                and values == [f"{item}.queue"]
                and criterion.get("operator") == "GreaterThan"
                and criterion.get("threshold") == 0
            ):
                return []
    return [f"{ALERTS}: no DeadletteredMessages alert (GreaterThan 0) per pool on the pool's own queue"]


def check_pool_role_assignments(files: dict[str, bc.BicepFile]) -> list[str]:
    """Each pool identity's roles: only those of POOL_ROLES, each on its own queue / table / container
    (never the namespace or the account); storage roles only unless messageOnly; Data Owner on its queue
    only for a pool KEDA scales on it. The app's roles on the pools' queues: Data Owner where it hosts the
    pool, Data Sender (never receive) where it does not."""
    problems = []
    granted: dict[str, set[str]] = {}
    for assignment in bc.declared(files, "Microsoft.Authorization/roleAssignments"):
        if assignment.file != AGENT_POOL:
            continue
        where = f"{AGENT_POOL}: role assignment {assignment.symbol}"
        function = bc._node(assignment.properties.get("roleDefinitionId"), "function") or {}
        guid = bc.Resolver(files).value(AGENT_POOL, (function.get("parameters") or {}).get("resource_name_1"))
        principal = bc.dotted(assignment.properties.get("principalId"))
        if principal != "poolIdentity.properties.principalId":
            problems.append(f"{where}: principalId must be the pool's identity, is {principal}")
            continue
        if guid not in POOL_ROLES:
            problems.append(f"{where}: role {guid!r} is not one of a pool's least-privilege roles")
            continue
        role_name, scope_type, scopes = POOL_ROLES[guid]
        scope = bc.scope_symbol(assignment)
        target = bc._symbols(files, AGENT_POOL).get(scope or "")
        if target is None or target.type != scope_type or scope not in scopes:
            problems.append(
                f"{where}: {role_name} must be scoped to {' or '.join(scopes)} ({scope_type}), is scoped "
                f"to {scope or 'the resource group'}" + (f" ({target.type})" if target is not None else "")
            )
            continue
        condition = bc.dotted(assignment.condition) if assignment.condition is not None else ""
        if guid in STORAGE_ROLES and "messageOnly" not in condition:
            problems.append(f"{where}: a storage role must be conditional on !messageOnly")
        if guid == bc.SERVICE_BUS_DATA_OWNER and "scalesOnQueue" not in condition:
            problems.append(f"{where}: Data Owner on the pool's queue only when KEDA scales on it")
        granted.setdefault(guid, set()).add(scope)
    for guid, (role_name, _scope_type, scopes) in POOL_ROLES.items():
        missing = set(scopes) - granted.get(guid, set())
        if missing:
            problems.append(f"{AGENT_POOL}: missing {role_name} on {', '.join(sorted(missing))}")
    app_scopes = {
        bc.SERVICE_BUS_DATA_OWNER: {"workQueue", "hostedPoolQueues", "resultQueue"},
        bc.SERVICE_BUS_DATA_SENDER: {"workQueue", "remotePoolQueues", "answerQueues"},
        bc.SERVICE_BUS_DATA_RECEIVER: {"answerQueues"},  # doctor reads its own probe answer back
    }
    for assignment in bc.declared(files, "Microsoft.Authorization/roleAssignments"):
        if assignment.file != ROLE_ASSIGNMENTS or assignment.properties.get("principalId") != "principalId":
            continue
        function = bc._node(assignment.properties.get("roleDefinitionId"), "function") or {}
        guid = bc.Resolver(files).value(
            ROLE_ASSIGNMENTS, (function.get("parameters") or {}).get("resource_name_1")
        )
        scope = bc.scope_symbol(assignment)
        if guid in app_scopes and scope not in app_scopes[guid]:
            problems.append(
                f"{ROLE_ASSIGNMENTS}: role assignment {assignment.symbol}: the app's {guid} on {scope}: "
                f"it may only be on {sorted(app_scopes[guid])}"
            )
    return problems


def check_container_apps(files: dict[str, bc.BicepFile]) -> list[str]:
    """The runner's container apps: no secret, no ingress, its pool's identity, scale to zero, the KEDA
    Service Bus rule on the pool's queue authenticated by that identity, `sas-agent --pool <name>`."""
    problems = []
    apps = [a for a in bc.declared(files, "Microsoft.App/containerApps") if a.file == CONTAINER_APPS]
    if len(apps) != 1:
        return [f"{CONTAINER_APPS}: expected one looped container app, found {len(apps)}"]
    (app,) = apps
    loop = files[CONTAINER_APPS].section("resources")[app.symbol]["config"]["loop_type"]
    item = loop["detail"]["item_name"]
    configuration = app.properties.get("configuration") or {}
    for key in ("secrets", "ingress"):
        if key in configuration:
            problems.append(f"container app: configuration.{key} must not be set (no secrets, no ingress)")
    identity = app.config.get("identity") or {}
    users = identity.get("userAssignedIdentities") or {}
    if identity.get("type") != "UserAssigned" or [u.strip("'") for u in users] != ["${poolIdentities[i].id}"]:
        problems.append("container app: must run as its pool's user-assigned identity only")
    template = app.properties.get("template") or {}
    containers = template.get("containers") or []
    for container in containers:
        command = [bc.dotted(c) for c in container.get("command") or []]
        if command != ["sas-agent", "--pool", f"{item}.name"]:
            problems.append(f"container app: command must be sas-agent --pool <pool>, is {command}")
        env = {e.get("name"): e for e in container.get("env") or []}
        for entry in env.values():
            if "secretRef" in entry:
                problems.append(f"container app: env {entry.get('name')} reads a secret")
        for name in RUNNER_SETTINGS:
            if name not in env:
                problems.append(f"container app: the runner's setting {name} is not set")
        client = bc.dotted((env.get("AZURE_CLIENT_ID") or {}).get("value"))
        if client != "poolIdentities[i].properties.clientId":
            problems.append(
                f"container app: AZURE_CLIENT_ID must be the pool identity's clientId, is {client}"
            )
    scale = template.get("scale") or {}
    if scale.get("minReplicas") != 0 or bc.dotted(scale.get("maxReplicas")) != f"{item}.maxReplicas":
        problems.append("container app: scale from minReplicas 0 to the pool's maxReplicas")
    rules = [r.get("custom") or {} for r in scale.get("rules") or []]
    keda = [r for r in rules if r.get("type") == "azure-servicebus"]
    if len(keda) != 1:
        problems.append("container app: one custom azure-servicebus scale rule")
    for rule in keda:
        if "auth" in rule or bc.dotted(rule.get("identity")) != "poolIdentities[i].id":
            problems.append("container app: the scale rule authenticates with the pool identity, no auth")
        if bc.dotted((rule.get("metadata") or {}).get("queueName")) != f"{item}.queue":
            problems.append("container app: the scale rule reads the pool's own queue")
    for environment in bc.declared(files, "Microsoft.App/managedEnvironments"):
        logs = environment.properties.get("appLogsConfiguration") or {}
        if logs.get("destination") != "azure-monitor" or "logAnalyticsConfiguration" in logs:
            problems.append("managed environment: logs go to azure-monitor (no workspace shared key)")
    return problems


# A logicApp pool: (whose principal, role) -> the symbols of agent-pool-logicapp.bicep it is scoped to.
LOGIC_APP_ROLES: dict[tuple[str, str], set[str]] = {
    ("logicApp.identity.principalId", bc.SERVICE_BUS_DATA_RECEIVER): {"poolQueue", "answerQueue"},
    ("logicApp.identity.principalId", bc.SERVICE_BUS_DATA_SENDER): {"resultQueue"},
    ("logicApp.identity.principalId", bc.STORAGE_BLOB_DATA_OWNER): {"runtimeStorage"},
    ("logicApp.identity.principalId", bc.STORAGE_QUEUE_DATA_CONTRIBUTOR): {"runtimeStorage"},
    ("logicApp.identity.principalId", bc.STORAGE_TABLE_DATA_CONTRIBUTOR): {"runtimeStorage"},
    ("logicApp.identity.principalId", bc.MONITORING_METRICS_PUBLISHER): {"appInsights"},
    ("appPrincipalId", bc.SERVICE_BUS_DATA_SENDER): {"answerQueue"},  # the app answers there
}


def check_logic_app_pool(files: dict[str, bc.BicepFile]) -> list[str]:
    """A logicApp pool's Logic App: kind functionapp,workflowapp on its system identity with the workflows
    extension bundle and no account key anywhere; its runtime storage without shared keys; exactly the
    roles of LOGIC_APP_ROLES (its work and answer queues, the result queue, its own runtime storage), and
    the app's Data Sender on its answer queue."""
    problems = []
    resolver = bc.Resolver(files)
    sites = [s for s in bc.declared(files, "Microsoft.Web/sites") if s.file == LOGIC_APP]
    if len(sites) != 1:
        return [f"{LOGIC_APP}: expected one Logic App, found {len(sites)}"]
    (site,) = sites
    if site.config.get("kind") != "functionapp,workflowapp":
        problems.append(f"{LOGIC_APP}: kind must be functionapp,workflowapp, is {site.config.get('kind')!r}")
    if (site.config.get("identity") or {}).get("type") != "SystemAssigned":
        problems.append(f"{LOGIC_APP}: the Logic App runs as its system-assigned identity")
    settings = {
        e.get("name"): e.get("value")
        for e in ((site.properties.get("siteConfig") or {}).get("appSettings") or [])
        if isinstance(e, dict)
    }
    bundle = settings.get("AzureFunctionsJobHost__extensionBundle__id")
    if bundle != "Microsoft.Azure.Functions.ExtensionBundle.Workflows":
        problems.append(f"{LOGIC_APP}: the workflows extension bundle must be set, is {bundle!r}")
    text = files[LOGIC_APP].text
    for secret in ("listKeys", "AccountKey", "connectionString"):
        if secret in text:
            problems.append(f"{LOGIC_APP}: {secret} appears: the Logic App holds no secret")
    for storage in bc.declared(files, "Microsoft.Storage/storageAccounts"):
        shared = resolver.value(storage.file, storage.properties.get("allowSharedKeyAccess"))
        if storage.file == LOGIC_APP and shared is not False:
            problems.append(f"{LOGIC_APP}: runtime storage must set allowSharedKeyAccess false")
    granted: dict[tuple[str, str], set[str]] = {}
    for assignment in bc.declared(files, "Microsoft.Authorization/roleAssignments"):
        if assignment.file != LOGIC_APP:
            continue
        function = bc._node(assignment.properties.get("roleDefinitionId"), "function") or {}
        guid = resolver.value(LOGIC_APP, (function.get("parameters") or {}).get("resource_name_1"))
        key = (bc.dotted(assignment.properties.get("principalId")), guid)
        scope = bc.scope_symbol(assignment) or "the resource group"
        if scope not in LOGIC_APP_ROLES.get(key, set()):
            problems.append(f"{LOGIC_APP}: role assignment {assignment.symbol}: {key} on {scope} is refused")
            continue
        granted.setdefault(key, set()).add(scope)
    for key, scopes in LOGIC_APP_ROLES.items():
        if granted.get(key, set()) != scopes:
            problems.append(f"{LOGIC_APP}: {key} must be granted on {sorted(scopes)}")
    return problems


POOL_CHECKS = (
    check_pool_parameter,
    check_pool_queues,
    check_pool_alerts,
    check_pool_role_assignments,
    check_container_apps,
    check_logic_app_pool,
)


def _split(text: str, delimiters: Any) -> list[str]:
    parts = [text]
    for delimiter in [delimiters] if isinstance(delimiters, str) else delimiters:
        parts = [piece for part in parts for piece in part.split(delimiter)]
    return parts


def _union(*arrays: list[Any]) -> list[Any]:
    return list(dict.fromkeys(item for array in arrays for item in array))


_VALIDATION_FUNCTIONS: dict[str, Any] = {
    "contains": lambda container, item: item in container,
    "length": len,
    "split": _split,
    "union": _union,
    "string": str,
    "starts_with": lambda text, prefix: text.startswith(prefix),
    "ends_with": lambda text, suffix: text.endswith(suffix),
}
_VALIDATION_OPERATORS: dict[str, Any] = {
    "or": lambda a, b: a or b,
    "and": lambda a, b: a and b,
    "greater_than": lambda a, b: a > b,
    "less_than": lambda a, b: a < b,
}
