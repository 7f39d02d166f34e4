"""Offline structure checks of the Bicep in ``infra/``, built on ``pycep-parser``.

There is no Bicep compiler in the test environment, so these checks read the parsed syntax tree that
``pycep.BicepParser`` returns (parameters / variables / resources / modules / outputs) and follow
parameters through module calls to their defaults in ``main.bicep``. Every check is a small function
that returns a list of human-readable problems (empty = fine), so the tests can also prove that a check
*fails* on a deliberately broken copy of the templates.

What pycep gives back, briefly: literals as Python values; identifiers (parameter / variable / resource
symbols) as bare strings; ``a.b.c`` as nested ``{"operator": {"type": "property_accessor", ...}}``;
function calls as ``{"function": {"type": <snake_case name>, "parameters": {...}}}``; a resource as
``{"type", "api_version", "existing", "config"}`` where ``config`` wraps ``{"condition", "config"}`` for
``if (...)`` resources and ``{"loop_type", "config"}`` for loops; a nested child resource as a separate
``<parent>__<child>`` entry.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pycep import BicepParser

from workflow_core import settings as app_settings
from workflow_core.telemetry_instruments import COMPENSATION_FAILED_COUNTER as COMPENSATION_FAILURES
from workflow_core.telemetry_instruments import RECOVERY_COUNTER as RECOVERIES

INFRA_DIR = Path(__file__).resolve().parents[2] / "infra"
MAIN = "main.bicep"
HOST_JSON = INFRA_DIR.parent / "host.json"

# Built-in Azure role definition ids (identical in every tenant) -> (role name, resource type it must be
# scoped to). The least-privilege set for the Function App's identity: nothing else may be granted.
STORAGE_BLOB_DATA_OWNER = "b7e6dc6d-f1e8-4753-8033-0f276bb0955b"
STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
STORAGE_QUEUE_DATA_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"
STORAGE_TABLE_DATA_CONTRIBUTOR = "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3"
SERVICE_BUS_DATA_OWNER = "090c5cfd-751d-490a-894a-3ce6f1109419"
SERVICE_BUS_DATA_RECEIVER = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0"
SERVICE_BUS_DATA_SENDER = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39"
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
DURABLE_TASK_DATA_CONTRIBUTOR = "0ad04412-c4d5-4796-b79c-f76d14c8d402"
READER = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
DURABLE_TASK_DATA_READER = "d6a5505f-6ebb-45a4-896e-ac8274cfc0ac"

SERVICE_BUS_QUEUE = "Microsoft.ServiceBus/namespaces/queues"
STORAGE_TABLE = "Microsoft.Storage/storageAccounts/tableServices/tables"

REQUIRED_ROLES: dict[str, tuple[str, str | tuple[str, ...]]] = {
    STORAGE_BLOB_DATA_OWNER: ("Storage Blob Data Owner", "Microsoft.Storage/storageAccounts"),
    STORAGE_QUEUE_DATA_CONTRIBUTOR: ("Storage Queue Data Contributor", "Microsoft.Storage/storageAccounts"),
    STORAGE_TABLE_DATA_CONTRIBUTOR: ("Storage Table Data Contributor", "Microsoft.Storage/storageAccounts"),
    # The app's large payloads (workflow_core/payloads.py), on their container only.
    STORAGE_BLOB_DATA_CONTRIBUTOR: (
        "Storage Blob Data Contributor",
        "Microsoft.Storage/storageAccounts/blobServices/containers",
    ),
    # On each agent queue (not the namespace): send, receive, and the Manage claim target-based scaling of
    # the Service Bus triggers needs (the Functions docs' Service Bus trigger role table).
    SERVICE_BUS_DATA_OWNER: ("Azure Service Bus Data Owner", SERVICE_BUS_QUEUE),
    MONITORING_METRICS_PUBLISHER: ("Monitoring Metrics Publisher", "Microsoft.Insights/components"),
    # Control-plane reads on each of these three (one assignment each): `sas doctor` reads the role
    # assignments of the app and the pools back there (api/diagnostics_rbac.py).
    READER: (
        "Reader",
        (
            "Microsoft.ServiceBus/namespaces",
            "Microsoft.Storage/storageAccounts",
            "Microsoft.Insights/components",
        ),
    ),
}
# Granted to the app's identity only where the resource exists (the Durable Task Scheduler backend).
OPTIONAL_ROLES: dict[str, tuple[str, str]] = {
    # On the work queue of an agent pool served elsewhere: dispatch only (pool_checks.py says where).
    SERVICE_BUS_DATA_SENDER: ("Azure Service Bus Data Sender", SERVICE_BUS_QUEUE),
    # On each answer queue only: doctor reads its own probe answer back (pool_checks.py says where).
    SERVICE_BUS_DATA_RECEIVER: ("Azure Service Bus Data Receiver", SERVICE_BUS_QUEUE),
    DURABLE_TASK_DATA_CONTRIBUTOR: ("Durable Task Data Contributor", "Microsoft.DurableTask/schedulers"),
}
# The deployer/operator (main.bicep's principalId): what the operator CLI needs.
OPERATOR_ROLES: dict[str, tuple[str, str]] = {
    STORAGE_TABLE_DATA_CONTRIBUTOR: ("Storage Table Data Contributor", STORAGE_TABLE),
    SERVICE_BUS_DATA_RECEIVER: ("Azure Service Bus Data Receiver", SERVICE_BUS_QUEUE),
}
# Granted to the operator only where the resource exists: the scheduler's dashboard, read only (actions
# go through the app's audited operator API).
OPTIONAL_OPERATOR_ROLES: dict[str, tuple[str, str]] = {
    DURABLE_TASK_DATA_READER: ("Durable Task Data Reader", "Microsoft.DurableTask/schedulers"),
}
# Which named resources a role on a sub-resource scope must cover: role -> setting names of the resources.
ROLE_TARGETS: dict[tuple[str, str], tuple[str, ...]] = {
    ("app", SERVICE_BUS_DATA_OWNER): ("WORK_QUEUE_NAME", "RESULT_QUEUE_NAME"),
    ("app", STORAGE_BLOB_DATA_CONTRIBUTOR): ("PAYLOAD_CONTAINER_NAME",),
    ("operator", STORAGE_TABLE_DATA_CONTRIBUTOR): ("LEDGER_TABLE_NAME", "DEADLINE_INDEX_TABLE_NAME"),
    ("operator", SERVICE_BUS_DATA_RECEIVER): ("WORK_QUEUE_NAME", "RESULT_QUEUE_NAME"),
}

# siteConfig properties Flex Consumption rejects (ARM error 51021) or ignores.
FLEX_UNSUPPORTED_SITE_CONFIG = {
    "ftpsState",
    "alwaysOn",
    "linuxFxVersion",
    "use32BitWorkerProcess",
    "netFrameworkVersion",
    "preWarmedInstanceCount",
    "functionsRuntimeScaleMonitoringEnabled",
    "functionAppScaleLimit",
}

LOGIC_APP_POOL = "modules/agent-pool-logicapp.bicep"  # its Workflow Standard plan: checked in pool_checks

# Resource types the deployment must declare (not merely reference as `existing`).
REQUIRED_RESOURCE_TYPES: dict[str, str] = {
    "Microsoft.Storage/storageAccounts": "storage account",
    "Microsoft.Storage/storageAccounts/tableServices/tables": "ledger tables",
    "Microsoft.Storage/storageAccounts/queueServices/queues": "storage-queue transport queues",
    "Microsoft.ServiceBus/namespaces": "Service Bus namespace",
    "Microsoft.ServiceBus/namespaces/queues": "Service Bus queues",
    "Microsoft.Web/serverfarms": "Function App plan",
    "Microsoft.Web/sites": "Function App",
    "Microsoft.ManagedIdentity/userAssignedIdentities": "user-assigned managed identity",
    "Microsoft.OperationalInsights/workspaces": "Log Analytics workspace",
    "Microsoft.Insights/components": "Application Insights",
    "Microsoft.Insights/scheduledQueryRules": "log alert rule",
    "Microsoft.Insights/metricAlerts": "metric alert rule",
    "Microsoft.Authorization/roleAssignments": "role assignments",
}

# Settings the Flex Consumption plan rejects or ignores (runtime/deployment live in functionAppConfig).
FLEX_DEPRECATED_SETTINGS = {
    "FUNCTIONS_WORKER_RUNTIME",
    "FUNCTIONS_EXTENSION_VERSION",
    "WEBSITE_RUN_FROM_PACKAGE",
    "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
    "WEBSITE_CONTENTSHARE",
    "WEBSITE_NODE_DEFAULT_VERSION",
    "SCM_DO_BUILD_DURING_DEPLOYMENT",
    "ENABLE_ORYX_BUILD",
}

# Words that mark a secret when they appear in an output or an app setting value.
SECRET_WORDS = (
    "connectionstring",
    "accountkey",
    "primarykey",
    "secondarykey",
    "sharedaccesskey",
    "sharedaccesssignature",
    "instrumentationkey",
    "listkeys",
    "listconnectionstrings",
    "listaccountsas",
    "listservicesas",
    "secret",
    "password",
)
# Text patterns that must not appear anywhere in the Bicep (list*() functions read keys and SAS tokens).
SECRET_PATTERNS = (
    re.compile(r"\blist[A-Z]\w*\s*\(", re.IGNORECASE),
    re.compile(r"AccountKey\s*=", re.IGNORECASE),
    re.compile(r"SharedAccessKey(Name)?\s*=", re.IGNORECASE),
    re.compile(r"InstrumentationKey\s*=", re.IGNORECASE),
)


@dataclass(frozen=True)
class BicepFile:
    rel: str  # path relative to the infra folder, with forward slashes
    text: str
    tree: dict[str, Any]

    def section(self, name: str) -> dict[str, Any]:
        return self.tree.get(name) or {}


@dataclass(frozen=True)
class Resource:
    file: str
    symbol: str
    type: str
    existing: bool
    config: dict[str, Any]  # the resource body (condition / loop wrappers removed)
    condition: Any = None  # the ``if (...)`` expression of a conditional resource, else None

    @property
    def properties(self) -> dict[str, Any]:
        value = self.config.get("properties")
        return value if isinstance(value, dict) else {}


class Unresolved:
    """A value only known at deployment time (a resource property, a module output, ...)."""

    def __init__(self, expr: Any) -> None:
        self.expr = expr

    def __repr__(self) -> str:
        return f"Unresolved({dotted(self.expr)})"


# ----------------------------------------------------------------------------------------------------------
# Loading and navigating
# ----------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _parser() -> BicepParser:
    return BicepParser()


@lru_cache(maxsize=128)
def _parse(text: str) -> dict[str, Any]:
    """A text parsed once per process: the mutation tests re-load copies that differ in one file."""
    return _parser().parse(text=text)


def load(infra_dir: Path = INFRA_DIR) -> tuple[dict[str, BicepFile], list[str]]:
    """Parse every ``.bicep`` file under ``infra_dir``; problems list the files that do not parse."""
    files: dict[str, BicepFile] = {}
    problems: list[str] = []
    for path in sorted(infra_dir.rglob("*.bicep")):
        rel = path.relative_to(infra_dir).as_posix()
        text = path.read_text(encoding="utf-8")
        try:
            tree = copy.deepcopy(_parse(text))  # a copy: a check never sees another load's tree
        except Exception as exc:  # pycep raises lark errors of several kinds
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            problems.append(f"{rel}: does not parse as Bicep: {first_line}")
            continue
        files[rel] = BicepFile(rel=rel, text=text, tree=tree)
    if MAIN not in files and not any(p.startswith(f"{MAIN}:") for p in problems):
        problems.append(f"{MAIN} is missing from {infra_dir}")
    return files, problems


def resources(files: dict[str, BicepFile]) -> Iterator[Resource]:
    for bicep in files.values():
        for symbol, resource in bicep.section("resources").items():
            config, condition = _unwrap(resource.get("config"))
            yield Resource(
                file=bicep.rel,
                symbol=symbol,
                type=resource.get("type", ""),
                existing=bool(resource.get("existing")),
                config=config,
                condition=condition,
            )


def _unwrap(config: Any) -> tuple[dict[str, Any], Any]:
    """A resource or module body without its ``if (...)`` / loop wrappers, and the condition if any."""
    condition = None
    config = config or {}
    while isinstance(config, dict) and ("loop_type" in config or "condition" in config):
        if "condition" in config and condition is None:
            condition = config["condition"]
        # ``[for x in (cond ? items : []): {...}]``: a loop over nothing unless cond (pycep has no grammar
        # for ``[for x in items: if (cond) {...}]``)
        source = ((config.get("loop_type") or {}).get("detail") or {}).get("array_name")
        looped = _node(source, "operator")
        if condition is None and looped is not None and looped.get("type") == "conditional":
            condition = (looped.get("operands") or {}).get("condition")
        config = config.get("config") or {}
    return config, condition


def modules_of(bicep: BicepFile) -> dict[str, tuple[str, dict[str, Any], Any]]:
    """``symbol -> (path, params, condition)`` of the module calls in ``bicep``."""
    result = {}
    for symbol, module in bicep.section("modules").items():
        path = ((module.get("detail") or {}).get("path") or "").removeprefix("./")
        config, condition = _unwrap(module.get("config"))
        result[symbol] = (path, config.get("params") or {}, condition)
    return result


def declared(files: dict[str, BicepFile], resource_type: str) -> list[Resource]:
    """Resources of ``resource_type`` that the deployment creates (``existing`` references excluded)."""
    wanted = resource_type.lower()
    return [r for r in resources(files) if r.type.lower() == wanted and not r.existing]


def _node(expr: Any, kind: str) -> dict[str, Any] | None:
    """The ``{"type": ...}`` body of a pycep ``operator`` / ``function`` node, else None (an object literal
    may well have a key called ``operator``, as alert criteria do)."""
    if (
        isinstance(expr, dict)
        and len(expr) == 1
        and isinstance(expr.get(kind), dict)
        and "type" in expr[kind]
    ):
        return expr[kind]
    return None


def dotted(expr: Any) -> str:
    """``a.b.c`` / ``a.f()`` / ``a[0]`` back from pycep's accessor trees (best effort, for messages)."""
    if isinstance(expr, str):
        return expr
    op = _node(expr, "operator")
    if op is not None:
        operands = op.get("operands", {})
        if op.get("type") == "property_accessor":
            return f"{dotted(operands.get('operand_1'))}.{dotted(operands.get('operand_2'))}"
        if op.get("type") == "function_accessor":
            return f"{dotted(operands.get('operand_1'))}.{operands.get('func_name')}()"
        if op.get("type") == "index_accessor":
            return f"{dotted(operands.get('operand_1'))}[{dotted(operands.get('operand_2'))}]"
    function = _node(expr, "function")
    if function is not None:
        return f"{function.get('type')}(...)"
    return json.dumps(expr, default=str)


def _accessor_path(expr: Any) -> list[Any] | None:
    if isinstance(expr, str):
        return [expr]
    op = _node(expr, "operator")
    if op is not None and op.get("type") == "property_accessor":
        operands = op["operands"]
        left = _accessor_path(operands.get("operand_1"))
        right = _accessor_path(operands.get("operand_2"))
        if left is not None and right is not None:
            return left + right
    return None


class Resolver:
    """Evaluates what it can of an expression: literals, parameters (through the module call in
    ``main.bicep`` down to the default), variables, ``string(...)`` and property access into objects."""

    def __init__(self, files: dict[str, BicepFile]) -> None:
        self.files = files
        self.calls: dict[str, dict[str, Any]] = {}  # module file -> params passed by main.bicep
        main = files.get(MAIN)
        if main is not None:
            for path, params, _condition in modules_of(main).values():
                self.calls[path] = params

    def value(self, file: str, expr: Any, _seen: frozenset[tuple[str, str]] = frozenset()) -> Any:
        if expr is None or isinstance(expr, bool | int | float):
            return expr
        if isinstance(expr, list):
            return [self.value(file, item, _seen) for item in expr]
        if isinstance(expr, str):
            return self._name(file, expr, _seen)
        if isinstance(expr, dict):
            function = _node(expr, "function")
            if function is not None:
                if function.get("type") == "string":
                    args = list((function.get("parameters") or {}).values())
                    inner = self.value(file, args[0], _seen) if args else None
                    if isinstance(inner, bool):
                        return "true" if inner else "false"
                    if isinstance(inner, int | float | str):
                        return str(inner)
                return Unresolved(expr)
            if _node(expr, "operator") is not None:
                path = _accessor_path(expr)
                if path:
                    current = self.value(file, path[0], _seen)
                    for key in path[1:]:
                        if not isinstance(current, dict) or key not in current:
                            return Unresolved(expr)
                        current = self.value(file, current[key], _seen)
                    return current
                return Unresolved(expr)
            return {key: self.value(file, item, _seen) for key, item in expr.items()}
        return Unresolved(expr)

    def _name(self, file: str, name: str, seen: frozenset[tuple[str, str]]) -> Any:
        if (file, name) in seen:
            return name
        seen = seen | {(file, name)}
        bicep = self.files.get(file)
        if bicep is None:
            return name
        parameters = bicep.section("parameters")
        if name in parameters:
            passed = self.calls.get(file, {})
            if file != MAIN and name in passed:
                return self.value(MAIN, passed[name], seen)
            default = parameters[name].get("default")
            return Unresolved(name) if default is None else self.value(file, default, seen)
        variables = bicep.section("variables")
        if name in variables:
            return self.value(file, variables[name].get("value"), seen)
        return name  # a string literal (pycep renders identifiers and literals alike)


def function_app_sites(files: dict[str, BicepFile]) -> list[Resource]:
    """The Function App's site: kind functionapp, not a Logic App (``functionapp,workflowapp``)."""
    kinds = [(r, str(r.config.get("kind", ""))) for r in declared(files, "Microsoft.Web/sites")]
    return [r for r, kind in kinds if "functionapp" in kind and "workflowapp" not in kind]


def app_settings_of(files: dict[str, BicepFile]) -> tuple[Resource | None, dict[str, Any]]:
    """The Function App and its ``siteConfig.appSettings`` as ``{name: raw expression}``."""
    sites = function_app_sites(files)
    if not sites:
        return None, {}
    site = sites[0]
    entries, _conditional = _setting_entries(
        files, site.file, (site.properties.get("siteConfig") or {}).get("appSettings")
    )
    return site, {name: value for name, value in entries}


def conditional_app_settings(files: dict[str, BicepFile]) -> dict[str, Any]:
    """The app settings that exist only under a condition (``cond ? [...] : []`` inside ``concat``),
    ``{name: condition expression}``."""
    sites = function_app_sites(files)
    if not sites:
        return {}
    site = sites[0]
    _entries, conditional = _setting_entries(
        files, site.file, (site.properties.get("siteConfig") or {}).get("appSettings")
    )
    return conditional


def _setting_entries(
    files: dict[str, BicepFile], file: str, expr: Any, condition: Any = None
) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """``[(name, value expr)]`` of an appSettings expression: a list literal, a variable holding one,
    ``concat(...)`` of those, or ``cond ? list : list`` (both branches are read)."""
    entries: list[tuple[str, Any]] = []
    conditional: dict[str, Any] = {}
    if isinstance(expr, str):
        variables = files[file].section("variables") if file in files else {}
        if expr in variables:
            return _setting_entries(files, file, variables[expr].get("value"), condition)
        return entries, conditional
    if isinstance(expr, list):
        for entry in expr:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                entries.append((entry["name"], entry.get("value")))
                if condition is not None:
                    conditional[entry["name"]] = condition
        return entries, conditional
    function = _node(expr, "function")
    if function is not None and function.get("type") == "concat":
        for arg in (function.get("parameters") or {}).values():
            more, more_conditional = _setting_entries(files, file, arg, condition)
            entries += more
            conditional.update(more_conditional)
        return entries, conditional
    op = _node(expr, "operator")
    if op is not None and op.get("type") == "conditional":
        operands = op.get("operands") or {}
        for branch in ("true_value", "false_value"):
            more, more_conditional = _setting_entries(
                files, file, operands.get(branch), operands.get("condition")
            )
            entries += more
            conditional.update(more_conditional)
    return entries, conditional


def _symbols(files: dict[str, BicepFile], file: str) -> dict[str, Resource]:
    return {r.symbol: r for r in resources(files) if r.file == file}


# ----------------------------------------------------------------------------------------------------------
# Checks: each returns a list of problems
# ----------------------------------------------------------------------------------------------------------


def check_modules_resolve(files: dict[str, BicepFile], infra_dir: Path = INFRA_DIR) -> list[str]:
    problems = []
    for bicep in files.values():
        base = (infra_dir / bicep.rel).parent
        for symbol, module in bicep.section("modules").items():
            path = (module.get("detail") or {}).get("path") or ""
            if module.get("type") != "local":
                problems.append(f"{bicep.rel}: module {symbol} is not a local file ({path})")
            elif not (base / path).is_file():
                problems.append(f"{bicep.rel}: module {symbol} points at missing file {path}")
    used = set(Resolver(files).calls)
    for rel in files:
        if rel != MAIN and rel not in used:
            problems.append(f"{rel} is not used by {MAIN}")
    return problems


def check_required_resources(files: dict[str, BicepFile]) -> list[str]:
    return [
        f"no {what} ({resource_type}) is declared"
        for resource_type, what in REQUIRED_RESOURCE_TYPES.items()
        if not declared(files, resource_type)
    ] + (
        []
        if declared(files, "Microsoft.Insights/workbooks")
        or declared(files, "Microsoft.OperationalInsights/workspaces/savedSearches")
        else ["no workbook or saved search shows stalled steps and recoveries"]
    )


def _documented_default(name: str) -> str:
    default = app_settings.DOCUMENTED_SETTINGS[name]
    assert default is not None, name
    return default


def check_storage(files: dict[str, BicepFile]) -> list[str]:
    problems = []
    resolver = Resolver(files)
    for account in declared(files, "Microsoft.Storage/storageAccounts"):
        props = {k: resolver.value(account.file, v) for k, v in account.properties.items()}
        expected = {
            "allowSharedKeyAccess": False,
            "minimumTlsVersion": "TLS1_2",
            "allowBlobPublicAccess": False,
        }
        for key, want in expected.items():
            if props.get(key) != want:
                problems.append(
                    f"storage account {account.symbol}: {key} must be {want!r}, is {props.get(key)!r}"
                )
    tables = {
        resolver.value(r.file, r.config.get("name"))
        for r in declared(files, "Microsoft.Storage/storageAccounts/tableServices/tables")
    }
    for setting in ("LEDGER_TABLE_NAME", "DEADLINE_INDEX_TABLE_NAME"):
        if _documented_default(setting) not in tables:
            problems.append(
                f"table {_documented_default(setting)!r} ({setting}) is not created (have {tables})"
            )
    queues = {
        resolver.value(r.file, r.config.get("name"))
        for r in declared(files, "Microsoft.Storage/storageAccounts/queueServices/queues")
    }
    for setting in ("WORK_QUEUE_NAME", "RESULT_QUEUE_NAME", "DEAD_LETTER_QUEUE_NAME"):
        if _documented_default(setting) not in queues:
            problems.append(
                f"storage queue {_documented_default(setting)!r} ({setting}) is not created (have {queues})"
            )
    return problems


def check_service_bus(files: dict[str, BicepFile]) -> list[str]:
    problems = []
    resolver = Resolver(files)
    namespaces = declared(files, "Microsoft.ServiceBus/namespaces")
    for ns in namespaces:
        sku = resolver.value(ns.file, ns.config.get("sku") or {})
        if not isinstance(sku, dict) or sku.get("name") != "Standard":
            problems.append(f"Service Bus namespace {ns.symbol}: sku must be Standard, is {sku!r}")
        if resolver.value(ns.file, ns.properties.get("disableLocalAuth")) is not True:
            problems.append(f"Service Bus namespace {ns.symbol}: disableLocalAuth must be true (no SAS keys)")
    queues = {}
    for queue in declared(files, "Microsoft.ServiceBus/namespaces/queues"):
        queues[resolver.value(queue.file, queue.config.get("name"))] = queue
    max_delivery = int(_documented_default("MAX_DELIVERY_COUNT"))
    for setting in ("WORK_QUEUE_NAME", "RESULT_QUEUE_NAME"):
        name = _documented_default(setting)
        queue = queues.get(name)
        if queue is None:
            problems.append(
                f"Service Bus queue {name!r} ({setting}) is not created (have {sorted(map(str, queues))})"
            )
            continue
        props = {k: resolver.value(queue.file, v) for k, v in queue.properties.items()}
        if props.get("requiresDuplicateDetection") is not True:
            problems.append(f"Service Bus queue {name!r}: requiresDuplicateDetection must be true")
        window = props.get("duplicateDetectionHistoryTimeWindow")
        if not (isinstance(window, str) and window.startswith("P")):
            problems.append(
                f"Service Bus queue {name!r}: duplicateDetectionHistoryTimeWindow must be an ISO 8601 "
                f"duration, is {window!r}"
            )
        lock = props.get("lockDuration")
        if not (isinstance(lock, str) and lock.startswith("PT")):
            problems.append(f"Service Bus queue {name!r}: lockDuration must be set (ISO 8601), is {lock!r}")
        if props.get("maxDeliveryCount") != max_delivery:
            problems.append(
                f"Service Bus queue {name!r}: maxDeliveryCount must be {max_delivery} (MAX_DELIVERY_COUNT), "
                f"is {props.get('maxDeliveryCount')!r}"
            )
        if props.get("deadLetteringOnMessageExpiration") is not True:
            problems.append(f"Service Bus queue {name!r}: deadLetteringOnMessageExpiration must be true")
        if props.get("requiresSession") is True:
            problems.append(f"Service Bus queue {name!r}: sessions are not used by the agents")
    return problems


def check_function_app(files: dict[str, BicepFile]) -> list[str]:
    problems = []
    resolver = Resolver(files)
    plans = [p for p in declared(files, "Microsoft.Web/serverfarms") if p.file != LOGIC_APP_POOL]
    for plan in plans:
        sku = resolver.value(plan.file, plan.config.get("sku") or {})
        if not isinstance(sku, dict) or (sku.get("name"), sku.get("tier")) != ("FC1", "FlexConsumption"):
            problems.append(f"plan {plan.symbol}: sku must be FC1 / FlexConsumption, is {sku!r}")
        if resolver.value(plan.file, plan.properties.get("reserved")) is not True:
            problems.append(f"plan {plan.symbol}: reserved must be true (Linux)")
    site, _ = app_settings_of(files)
    if site is None:
        return [*problems, "no Function App (Microsoft.Web/sites of kind functionapp) is declared"]
    kind = str(site.config.get("kind", ""))
    if "linux" not in kind:
        problems.append(f"Function App kind must be Linux (functionapp,linux), is {kind!r}")
    identity = site.config.get("identity") or {}
    if resolver.value(site.file, identity.get("type")) != "UserAssigned":
        problems.append(
            "Function App must run as a user-assigned managed identity (identity.type UserAssigned)"
        )
    config = site.properties.get("functionAppConfig") or {}
    runtime = resolver.value(site.file, config.get("runtime") or {})
    if runtime != {"name": "python", "version": "3.11"}:
        problems.append(f"functionAppConfig.runtime must be python 3.11, is {runtime!r}")
    auth = ((config.get("deployment") or {}).get("storage") or {}).get("authentication") or {}
    if resolver.value(site.file, auth.get("type")) != "UserAssignedIdentity":
        problems.append("the deployment package must be read with the user-assigned identity")
    if resolver.value(site.file, site.properties.get("httpsOnly")) is not True:
        problems.append("Function App: httpsOnly must be true")
    site_config = site.properties.get("siteConfig") or {}
    for key in sorted(FLEX_UNSUPPORTED_SITE_CONFIG & set(site_config)):
        problems.append(f"siteConfig.{key} is not supported on Flex Consumption (ARM error 51021)")
    always_ready = resolver.value(site.file, (config.get("scaleAndConcurrency") or {}).get("alwaysReady"))
    groups = always_ready if isinstance(always_ready, list) else []
    durable = [g for g in groups if isinstance(g, dict) and g.get("name") == "durable"]
    count = durable[0].get("instanceCount") if durable else None
    if not (isinstance(count, int) and count >= 1):
        problems.append(
            "functionAppConfig.scaleAndConcurrency.alwaysReady must keep at least 1 instance of the durable "
            f"group (Durable Functions on Flex Consumption), is {always_ready!r}"
        )
    for policy in declared(files, "Microsoft.Web/sites/basicPublishingCredentialsPolicies"):
        if not policy.config.get("location"):
            problems.append(f"basicPublishingCredentialsPolicies {policy.symbol} must set location")
        if resolver.value(policy.file, policy.properties.get("allow")) is not False:
            problems.append(f"basicPublishingCredentialsPolicies {policy.symbol} must set allow: false")
    names = {
        resolver.value(r.file, r.config.get("name"))
        for r in declared(files, "Microsoft.Web/sites/basicPublishingCredentialsPolicies")
    }
    if names != {"ftp", "scm"}:
        problems.append(f"basic publishing must be disabled for ftp and scm, policies found: {sorted(names)}")
    server_farm = dotted(site.properties.get("serverFarmId"))
    if not any(server_farm == f"{plan.symbol}.id" for plan in plans if plan.file == site.file):
        problems.append(
            f"Function App serverFarmId must be the Flex plan declared beside it, is {server_farm}"
        )
    return problems


def check_app_settings(files: dict[str, BicepFile]) -> list[str]:
    """Every setting the code reads (DOCUMENTED_SETTINGS) is set, with the documented default; the
    connection prefixes are set in their identity-based form only."""
    site, raw = app_settings_of(files)
    if site is None:
        return ["no Function App to read app settings from"]
    resolver = Resolver(files)
    values = {name: resolver.value(site.file, expr) for name, expr in raw.items()}
    if "HOSTED_POOLS" in raw:  # built from agentPools: its value for the default agentPools
        from tests.infra import pool_checks

        values["HOSTED_POOLS"] = pool_checks.PoolEvaluator(files).module_param(site.file, "hostedPools")
    problems = []
    client_id = raw.get("AZURE_CLIENT_ID")
    prefixes = {app_settings.STORAGE_CONNECTION, app_settings.SERVICE_BUS_CONNECTION}
    identity_forms = {
        app_settings.STORAGE_CONNECTION: ("blobServiceUri", "queueServiceUri", "tableServiceUri"),
        app_settings.SERVICE_BUS_CONNECTION: ("fullyQualifiedNamespace",),
    }
    if client_id is None:
        problems.append(
            "AZURE_CLIENT_ID is not set (azure-identity would not find the user-assigned identity)"
        )
    for name, default in app_settings.DOCUMENTED_SETTINGS.items():
        if name in app_settings.OPTIONAL_CONNECTIONS:
            # optional (e.g. the ledger's own account): unset is fine, a connection string is not
            if name in raw:
                problems.append(
                    f"{name} is set as a connection string; use the identity-based {name}__* settings"
                )
            continue
        if name in prefixes:
            if name in raw:
                problems.append(
                    f"{name} is set as a connection string; use the identity-based {name}__* settings"
                )
            if values.get(f"{name}__credential") != "managedidentity":
                problems.append(f"{name}__credential must be 'managedidentity'")
            if f"{name}__clientId" not in raw or raw[f"{name}__clientId"] != client_id:
                problems.append(
                    f"{name}__clientId must be set to the identity's client id (as AZURE_CLIENT_ID)"
                )
            for suffix in identity_forms[name]:
                if f"{name}__{suffix}" not in raw:
                    problems.append(f"{name}__{suffix} is not set")
            continue
        if name not in raw:
            problems.append(f"app setting {name} (read by workflow_core/settings.py) is not set")
            continue
        if default is not None and values[name] != default:
            problems.append(f"app setting {name} is {values[name]!r}, the code documents {default!r}")
    if values.get("AGENT_TRANSPORT") != "servicebus":
        problems.append("AGENT_TRANSPORT must be 'servicebus' in Azure")
    if values.get("WATCHDOG_RUN_ON_STARTUP") != "false":
        problems.append("WATCHDOG_RUN_ON_STARTUP must be 'false' in Azure")
    ai_connection = dotted(raw.get("APPLICATIONINSIGHTS_CONNECTION_STRING"))
    components = {
        r.symbol
        for r in resources(files)
        if r.file == site.file and r.type == "Microsoft.Insights/components"
    }
    if not any(ai_connection == f"{symbol}.properties.ConnectionString" for symbol in components):
        problems.append(
            "APPLICATIONINSIGHTS_CONNECTION_STRING must come from the Application Insights resource's "
            f"properties.ConnectionString, is {ai_connection}"
        )
    auth = values.get("APPLICATIONINSIGHTS_AUTHENTICATION_STRING")
    if not (isinstance(auth, str) and "Authorization=AAD" in auth and "ClientId=" in auth):
        problems.append(
            "APPLICATIONINSIGHTS_AUTHENTICATION_STRING must be 'Authorization=AAD;ClientId=<client id>'"
        )
    if values.get("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY") != "true":
        problems.append(
            "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY must be 'true': it makes the worker create its "
            "trace-context propagator and configure azure-monitor once (worker dispatcher.py)"
        )
    if "PYTHON_ENABLE_OPENTELEMETRY" in raw:
        problems.append(
            "PYTHON_ENABLE_OPENTELEMETRY marks OpenTelemetry on without a trace-context propagator: every "
            "invocation calls .extract on None (azure-functions-python-worker issue 1881)"
        )
    for name in sorted(FLEX_DEPRECATED_SETTINGS & set(raw)):
        problems.append(f"app setting {name} is not supported on Flex Consumption")
    return problems


def _query_text(resolver: Resolver, rule: Resource) -> list[tuple[str, dict[str, Any]]]:
    criteria = (rule.properties.get("criteria") or {}).get("allOf") or []
    result = []
    for criterion in criteria if isinstance(criteria, list) else []:
        resolved = resolver.value(rule.file, criterion)
        if isinstance(resolved, dict) and isinstance(resolved.get("query"), str):
            result.append((resolved["query"], resolved))
    return result


def check_monitoring(files: dict[str, BicepFile]) -> list[str]:
    problems = []
    resolver = Resolver(files)
    for component in declared(files, "Microsoft.Insights/components"):
        if resolver.value(component.file, component.properties.get("DisableLocalAuth")) is not True:
            problems.append(f"Application Insights {component.symbol}: DisableLocalAuth must be true")
        if not component.properties.get("WorkspaceResourceId"):
            problems.append(f"Application Insights {component.symbol} must be workspace-based")
    rules = declared(files, "Microsoft.Insights/scheduledQueryRules")
    criteria = [item for rule in rules for item in _query_text(resolver, rule)]
    failure_alerts = [
        c for q, c in criteria if f'"{COMPENSATION_FAILURES}"' in q and '"compensation_failed"' in q
    ]
    if not failure_alerts:
        problems.append(
            f"no alert fires on compensation_failed ({COMPENSATION_FAILURES} / outcome compensation_failed)"
        )
    elif not any(c.get("operator") == "GreaterThan" and c.get("threshold") == 0 for c in failure_alerts):
        problems.append("the compensation_failed alert must fire on any occurrence (GreaterThan 0)")
    surge = [(q, c) for q, c in criteria if f'"{RECOVERIES}"' in q and COMPENSATION_FAILURES not in q]
    if not surge:
        problems.append(f"no alert on the number of recoveries ({RECOVERIES})")
    for rule in rules:
        window = resolver.value(rule.file, rule.properties.get("windowSize"))
        # the canary's alerts span its periods (tests/infra/test_canary_alerts.py)
        if window != "PT15M" and rule.symbol not in {"canaryStaleAlert", "canaryPoolStaleAlert"}:
            problems.append(f"alert {rule.symbol}: windowSize must be PT15M, is {window!r}")
        scopes = rule.properties.get("scopes") or []
        if not scopes:
            problems.append(f"alert {rule.symbol} has no scope")
    return problems


def scope_symbol(assignment: Resource) -> str | None:
    """The symbol a role assignment is scoped to: ``scope: queue`` or, in a loop, ``scope: queues[i]``."""
    scope = assignment.config.get("scope")
    op = _node(scope, "operator")
    if op is not None and op.get("type") == "index_accessor":
        scope = (op.get("operands") or {}).get("operand_1")
    return scope if isinstance(scope, str) else None


REGISTRY_PULL = "modules/agent-pool-registry-pull.bicep"


def _principal_of(resolver: Resolver, files: dict[str, BicepFile], assignment: Resource) -> str | None:
    """``app`` (the managed identity's principalId, passed down from a module output), ``operator`` (main's
    ``principalId`` parameter) or None (anything else)."""
    principal = assignment.properties.get("principalId")
    path = _accessor_path(principal)
    if path is not None and path[1:] == ["properties", "principalId"]:
        own = _symbols(files, assignment.file).get(path[0])
        if own is not None and own.type == "Microsoft.ManagedIdentity/userAssignedIdentities":
            return "pool"  # an agent pool's own identity, declared beside it: pool_checks.py
    if assignment.file == LOGIC_APP_POOL and dotted(principal) == "logicApp.identity.principalId":
        return "pool"  # a logicApp pool's system identity: pool_checks.check_logic_app_pool
    if assignment.file == REGISTRY_PULL and dotted(principal) == "pool.principalId":
        return "pool"  # a containerApp pool's identity, from main.bicep: test_pool_registry_pull.py
    if not isinstance(principal, str):
        return None
    if assignment.file == MAIN:
        passed: Any = principal
    else:
        passed = resolver.calls.get(assignment.file, {}).get(principal)
    if dotted(passed).endswith(".outputs.principalId"):
        return "app"
    main_params = files[MAIN].section("parameters") if MAIN in files else {}
    if passed == "principalId" and "principalId" in main_params:
        return "operator"
    return None


def check_role_assignments(files: dict[str, BicepFile]) -> list[str]:
    """The app's identity holds exactly the least-privilege roles, each scoped to its own resource (the
    Service Bus ones to each agent queue); the operator (main's principalId) gets only the table and
    dead-letter roles, on the ledger tables and the queues, and only when principalId is set."""
    problems = []
    resolver = Resolver(files)
    granted: dict[tuple[str, str], set[Any]] = {}
    for assignment in declared(files, "Microsoft.Authorization/roleAssignments"):
        where = f"{assignment.file}: role assignment {assignment.symbol}"
        props = assignment.properties
        role_id = props.get("roleDefinitionId")
        function = _node(role_id, "function") or {}
        if function.get("type") != "subscription_resource_id":
            problems.append(
                f"{where}: roleDefinitionId must be "
                "subscriptionResourceId('Microsoft.Authorization/roleDefinitions', <built-in role GUID>)"
            )
            continue
        parameters = function.get("parameters") or {}
        guid = resolver.value(assignment.file, parameters.get("resource_name_1"))
        principal = _principal_of(resolver, files, assignment)
        if principal is None:
            problems.append(
                f"{where}: principalId must be the managed identity's principalId or main.bicep's "
                f"principalId parameter, is {dotted(props.get('principalId'))}"
            )
            continue
        if principal == "pool":
            continue  # pool_checks.check_pool_role_assignments
        allowed = (
            {**REQUIRED_ROLES, **OPTIONAL_ROLES}
            if principal == "app"
            else {**OPERATOR_ROLES, **OPTIONAL_OPERATOR_ROLES}
        )
        if (
            parameters.get("resource_type") != "Microsoft.Authorization/roleDefinitions"
            or guid not in allowed
        ):
            problems.append(
                f"{where}: role {guid!r} is not one of the least-privilege built-in roles of the {principal} "
                f"{sorted(allowed)}"
            )
            continue
        role_name, scope_type = allowed[guid]
        scope = scope_symbol(assignment)
        target = _symbols(files, assignment.file).get(scope) if isinstance(scope, str) else None
        if target is None or target.type not in (
            scope_type if isinstance(scope_type, tuple) else (scope_type,)
        ):
            problems.append(
                f"{where}: {role_name} must be scoped to a {scope_type} resource, is scoped to "
                f"{dotted(scope) if scope is not None else 'the resource group'}"
            )
            continue
        principal_type = resolver.value(assignment.file, props.get("principalType"))
        if principal == "app" and principal_type != "ServicePrincipal":
            problems.append(f"{where}: principalType must be ServicePrincipal")
            continue
        if principal == "operator":
            if assignment.condition is None:
                problems.append(f"{where}: an operator role must be conditional on principalId being set")
                continue
            if principal_type != "User":
                problems.append(f"{where}: principalType must come from main.bicep's principalType (User)")
                continue
        name = assignment.config.get("name")
        if (_node(name, "function") or {}).get("type") != "guid":
            problems.append(f"{where}: name must be a deterministic guid(...)")
            continue
        granted.setdefault((principal, guid), set()).add(
            resolver.value(target.file, target.config.get("name"))
        )
        granted.setdefault((principal, guid, "types"), set()).add(target.type)
    for guid, (role_name, scope_type) in REQUIRED_ROLES.items():
        for one in scope_type if isinstance(scope_type, tuple) else (scope_type,):
            if one not in granted.get(("app", guid, "types"), set()):
                problems.append(f"missing role assignment: {role_name} ({guid}) on the {one}")
    if (
        declared(files, "Microsoft.DurableTask/schedulers")
        and ("app", DURABLE_TASK_DATA_CONTRIBUTOR) not in granted
    ):
        problems.append(
            "missing role assignment: Durable Task Data Contributor on the Durable Task Scheduler"
        )
    if (
        declared(files, "Microsoft.DurableTask/schedulers")
        and ("operator", DURABLE_TASK_DATA_READER) not in granted
    ):
        problems.append(
            "missing operator role assignment: Durable Task Data Reader on the Durable Task Scheduler "
            "(its dashboard)"
        )
    for guid, (role_name, scope_type) in OPERATOR_ROLES.items():
        if ("operator", guid) not in granted:
            problems.append(f"missing operator role assignment: {role_name} ({guid}) on a {scope_type}")
    for (principal, guid), settings in ROLE_TARGETS.items():
        if (principal, guid) not in granted:
            continue
        role_name = (REQUIRED_ROLES if principal == "app" else OPERATOR_ROLES)[guid][0]
        for setting in settings:
            if _documented_default(setting) not in granted[(principal, guid)]:
                problems.append(
                    f"{role_name} of the {principal} does not cover "
                    f"{_documented_default(setting)!r} ({setting})"
                )
    return problems


def check_no_secrets(files: dict[str, BicepFile]) -> list[str]:
    """No list*() key/SAS reads, no key material, no secret-looking outputs or app settings."""
    problems = []
    for bicep in files.values():
        for number, line in enumerate(bicep.text.splitlines(), start=1):
            for pattern in SECRET_PATTERNS:
                if pattern.search(line):
                    problems.append(f"{bicep.rel}:{number}: {line.strip()!r} reads or holds a key")
        for name, output in bicep.section("outputs").items():
            text = (name + json.dumps(output.get("value"), default=str)).lower()
            words = [w for w in SECRET_WORDS if w in text]
            if words:
                problems.append(f"{bicep.rel}: output {name} exposes a secret ({', '.join(words)})")
    _site, raw = app_settings_of(files)
    for name, expr in raw.items():
        text = json.dumps(expr, default=str).lower()
        if name == "APPLICATIONINSIGHTS_CONNECTION_STRING":
            continue  # checked by check_app_settings: must be the component's ConnectionString property
        words = [w for w in SECRET_WORDS if w in text]
        if words:
            problems.append(f"app setting {name} holds a secret ({', '.join(words)})")
        if name in (app_settings.STORAGE_CONNECTION, app_settings.SERVICE_BUS_CONNECTION):
            problems.append(f"app setting {name} is a connection string")
    return problems


def check_outputs(files: dict[str, BicepFile]) -> list[str]:
    outputs = files[MAIN].section("outputs") if MAIN in files else {}
    problems = [
        f"{MAIN} must output {name}"
        for name in ("functionAppName", "functionAppHostName", "workflowStarterUrl")
        if name not in outputs
    ]
    url = (outputs.get("workflowStarterUrl") or {}).get("value")
    if isinstance(url, str) and not (
        url.startswith("https://${") and url.endswith("/api/workflows/{name}/instances")
    ):
        problems.append(
            f"workflowStarterUrl must look like https://<host>/api/workflows/{{name}}/instances, is {url!r}"
        )
    return problems


def read_bicepparam(path: Path) -> tuple[str | None, dict[str, Any], list[str]]:
    """``using`` target and parameter values of a ``.bicepparam`` file (pycep has no grammar for
    them: the ``param x = v`` lines are parsed as ``var x = v`` to check their syntax and values)."""
    text = path.read_text(encoding="utf-8")
    using = re.search(r"^\s*using\s+'([^']+)'", text, re.MULTILINE)
    body = re.sub(r"^\s*using\s+'[^']*'.*$", "", text, flags=re.MULTILINE)
    body = re.sub(r"^(\s*)param(\s+\w+\s*=)", r"\1var\2", body, flags=re.MULTILINE)
    try:
        tree = _parser().parse(text=body)
    except Exception as exc:
        return None, {}, [f"{path.name}: does not parse: {str(exc).strip().splitlines()[0]}"]
    values = {name: var.get("value") for name, var in (tree.get("variables") or {}).items()}
    return (using.group(1) if using else None), values, []


def check_param_files(files: dict[str, BicepFile], infra_dir: Path = INFRA_DIR) -> list[str]:
    problems = []
    param_files = sorted(infra_dir.glob("main.*.bicepparam"))
    if not any(p.name == "main.dev.bicepparam" for p in param_files):
        problems.append("infra/main.dev.bicepparam is missing")
    declared_params = files[MAIN].section("parameters") if MAIN in files else {}
    required = {name for name, p in declared_params.items() if p.get("default") is None}
    for path in param_files:
        using, values, errors = read_bicepparam(path)
        problems += errors
        if errors:
            continue
        if using is None or (path.parent / using).resolve() != (infra_dir / MAIN).resolve():
            problems.append(f"{path.name}: must start with using './main.bicep' (has {using!r})")
        for name in sorted(set(values) - set(declared_params)):
            problems.append(f"{path.name}: param {name} is not declared in {MAIN}")
        for name in sorted(required - set(values)):
            problems.append(f"{path.name}: required param {name} has no value")
        always_ready = values.get("durableAlwaysReadyInstanceCount")
        if values.get("zoneRedundant") is True and not (isinstance(always_ready, int) and always_ready >= 2):
            problems.append(
                f"{path.name}: zoneRedundant needs durableAlwaysReadyInstanceCount >= 2 (the platform "
                f"keeps at least two always-ready instances per scale group), is {always_ready!r}"
            )
    return problems


def check_no_unused_declarations(files: dict[str, BicepFile]) -> list[str]:
    """What the Bicep linter's no-unused-params / no-unused-vars rules would report (no compiler here)."""
    problems = []
    for bicep in files.values():
        code = "\n".join(line.split("//", 1)[0] for line in bicep.text.splitlines())
        for kind, section in (("param", "parameters"), ("var", "variables")):
            for name in bicep.section(section):
                uses = len(re.findall(rf"(?<![\w.']){re.escape(name)}(?![\w'])", code))
                if uses < 2:  # the declaration itself
                    problems.append(f"{bicep.rel}: {kind} {name} is never used")
    return problems


# ----------------------------------------------------------------------------------------------------------
# host.json, and what it must agree with in the Bicep
# ----------------------------------------------------------------------------------------------------------


def iso_seconds(duration: Any) -> float | None:
    """Seconds of an ISO 8601 duration without years/months (``PT5M``, ``P1DT2H``), else None."""
    match = re.fullmatch(
        r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", str(duration or "")
    )
    if not match or duration in ("P", "PT"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def timespan_seconds(value: Any) -> float | None:
    """Seconds of a .NET timespan ``[d.]hh:mm:ss`` (host.json), else None."""
    match = re.fullmatch(r"(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2}(?:\.\d+)?)", str(value or ""))
    if not match:
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def load_host_json(path: Path = HOST_JSON) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def check_host_json(host: dict[str, Any]) -> list[str]:
    """OpenTelemetry mode, the Durable settings for Flex Consumption, Service Bus locks that cannot expire
    under a running or buffered message."""
    problems = []
    if host.get("telemetryMode") != "OpenTelemetry":
        problems.append(f"host.json telemetryMode must be 'OpenTelemetry', is {host.get('telemetryMode')!r}")
    extensions = host.get("extensions") or {}
    provider = (extensions.get("durableTask") or {}).get("storageProvider") or {}
    if provider.get("type") != "AzureStorage":
        problems.append(
            "host.json durableTask.storageProvider.type must stay AzureStorage (the default backend)"
        )
    polling = timespan_seconds(provider.get("maxQueuePollingInterval"))
    if polling is None or polling > 10:
        problems.append(
            "host.json durableTask.storageProvider.maxQueuePollingInterval must be at most 00:00:10 on Flex "
            f"Consumption, is {provider.get('maxQueuePollingInterval')!r}"
        )
    service_bus = extensions.get("serviceBus") or {}
    if service_bus.get("prefetchCount") != 0:
        problems.append(
            "host.json serviceBus.prefetchCount must be 0: a prefetched message's lock runs while it waits "
            f"in the buffer and is not renewed, is {service_bus.get('prefetchCount')!r}"
        )
    timeout = timespan_seconds(host.get("functionTimeout"))
    renewal = timespan_seconds(service_bus.get("maxAutoLockRenewalDuration"))
    if timeout is None or renewal is None or renewal < timeout:
        problems.append(
            "host.json serviceBus.maxAutoLockRenewalDuration must be at least functionTimeout "
            f"({service_bus.get('maxAutoLockRenewalDuration')!r} < {host.get('functionTimeout')!r})"
        )
    return problems


def check_service_bus_locks(files: dict[str, BicepFile]) -> list[str]:
    """The agent queues lock a message for the longest allowed time (PT5M), so that one renewal lost to a
    transient error does not cost a delivery (MAX_DELIVERY_COUNT of them dead-letter it)."""
    problems = []
    resolver = Resolver(files)
    for queue in declared(files, SERVICE_BUS_QUEUE):
        lock = resolver.value(queue.file, queue.properties.get("lockDuration"))
        if iso_seconds(lock) != 300:
            problems.append(f"Service Bus queue {queue.symbol}: lockDuration must be PT5M, is {lock!r}")
    return problems


def check_diagnostics(files: dict[str, BicepFile]) -> list[str]:
    """Storage data-service logs: the categories listed (StorageWrite, StorageDelete), no category group
    (allLogs logs every Durable poll and lease renewal; a group's members are the platform's to change);
    the workspace has a daily cap."""
    problems = []
    resolver = Resolver(files)
    storage_services = {
        (r.file, r.symbol)
        for r in resources(files)
        if r.type.startswith("Microsoft.Storage/storageAccounts/") and r.type.endswith("Services")
    }
    scoped = 0
    for setting in declared(files, "Microsoft.Insights/diagnosticSettings"):
        scope = setting.config.get("scope")
        if (setting.file, scope) not in storage_services:
            continue
        scoped += 1
        logs = resolver.value(setting.file, setting.properties.get("logs")) or []
        entries = [entry for entry in logs if isinstance(entry, dict)]
        categories = sorted(str(e.get("category")) for e in entries if e.get("category"))
        groups = [e.get("categoryGroup") for e in entries if e.get("categoryGroup")]
        if groups or categories != ["StorageDelete", "StorageWrite"]:
            problems.append(
                f"diagnostic setting {setting.symbol} ({scope}): storage logs must list the categories "
                f"StorageWrite and StorageDelete (no category group, no StorageRead), are "
                f"{categories + groups!r}"
            )
    if scoped == 0:
        problems.append("no diagnostic settings on the storage data services")
    for workspace in declared(files, "Microsoft.OperationalInsights/workspaces"):
        capping = resolver.value(workspace.file, workspace.properties.get("workspaceCapping"))
        quota = capping.get("dailyQuotaGb") if isinstance(capping, dict) else None
        if not (isinstance(quota, int | float) and quota > 0):
            problems.append(
                f"Log Analytics {workspace.symbol}: workspaceCapping.dailyQuotaGb must be > 0, is {quota!r}"
            )
    return problems


def check_alerts(files: dict[str, BicepFile]) -> list[str]:
    """Stalled instances (custom event sas.instance_stalled), dead-lettered results (the Service Bus
    metric on the results queue) and the workbook bound to its component by a lower-cased id."""
    problems = []
    resolver = Resolver(files)
    criteria = [
        item
        for rule in declared(files, "Microsoft.Insights/scheduledQueryRules")
        for item in _query_text(resolver, rule)
    ]
    stalled = [c for q, c in criteria if "customEvents" in q and '"sas.instance_stalled"' in q]
    if not stalled:
        problems.append("no alert on stalled instances (customEvents named sas.instance_stalled)")
    elif not any(c.get("operator") == "GreaterThan" and c.get("threshold") == 0 for c in stalled):
        problems.append("the stalled-instances alert must fire on any occurrence (GreaterThan 0)")
    result_queue = _documented_default("RESULT_QUEUE_NAME")
    dead_letter_alerts = []
    for rule in declared(files, "Microsoft.Insights/metricAlerts"):
        props = resolver.value(rule.file, rule.properties)
        for criterion in (
            ((props.get("criteria") or {}).get("allOf") or []) if isinstance(props, dict) else []
        ):
            if not isinstance(criterion, dict) or criterion.get("metricName") != "DeadletteredMessages":
                continue
            entities = [
                value
                for dimension in criterion.get("dimensions") or []
                if dimension.get("name") == "EntityName" and dimension.get("operator") == "Include"
                for value in dimension.get("values") or []
            ]
            if (
                result_queue in entities
                and criterion.get("operator") == "GreaterThan"
                and criterion.get("threshold") == 0
            ):
                dead_letter_alerts.append(rule.symbol)
    if not dead_letter_alerts:
        problems.append(
            f"no metric alert on DeadletteredMessages of the results queue {result_queue!r} (GreaterThan 0)"
        )
    for workbook in declared(files, "Microsoft.Insights/workbooks"):
        source = workbook.properties.get("sourceId")
        if (_node(source, "function") or {}).get("type") != "to_lower":
            problems.append(
                f"workbook {workbook.symbol}: sourceId must be toLower(<component>.id), is {dotted(source)}"
            )
    return problems


def check_azd_conventions(files: dict[str, BicepFile], infra_dir: Path = INFRA_DIR) -> list[str]:
    """The azd-env-name tag on everything, and the principalId parameter azd fills with the deployer."""
    problems = []
    main = files.get(MAIN)
    if main is None:
        return [f"{MAIN} is missing"]
    resolver = Resolver(files)
    tags = resolver.value(MAIN, main.section("variables").get("allTags", {}).get("value"))
    if "azd-env-name" not in json.dumps(main.section("variables").get("allTags", {}), default=str):
        problems.append(f"{MAIN}: allTags must carry the azd-env-name tag (= environmentName), is {tags!r}")
    principal = main.section("parameters").get("principalId")
    if principal is None or principal.get("default") != "":
        problems.append(f"{MAIN}: param principalId string = '' (the deployer azd passes) is missing")
    parameters_file = infra_dir / "main.parameters.json"
    if parameters_file.is_file():
        values = json.loads(parameters_file.read_text(encoding="utf-8")).get("parameters", {})
        if (values.get("principalId") or {}).get("value") != "${AZURE_PRINCIPAL_ID}":
            problems.append("main.parameters.json must map principalId to ${AZURE_PRINCIPAL_ID}")
    return problems


def check_durable_backend(files: dict[str, BicepFile]) -> list[str]:
    """Azure Storage stays the default Durable backend; the Durable Task Scheduler is provisioned only when
    durableBackend asks for it, and the app is then pointed at it (identity-based connection)."""
    problems = []
    main = files.get(MAIN)
    if main is None:
        return [f"{MAIN} is missing"]
    backend = main.section("parameters").get("durableBackend") or {}
    if backend.get("default") != "AzureStorage":
        problems.append(
            f"{MAIN}: param durableBackend must default to 'AzureStorage', is {backend.get('default')!r}"
        )
    calls = [
        (symbol, condition)
        for symbol, (path, _params, condition) in modules_of(main).items()
        if path == "modules/durable-task-scheduler.bicep"
    ]
    if not calls:
        problems.append(f"{MAIN}: the Durable Task Scheduler module is not called")
    elif any(condition is None for _symbol, condition in calls):
        problems.append(f"{MAIN}: the Durable Task Scheduler module must be conditional on durableBackend")
    for resource_type in ("Microsoft.DurableTask/schedulers", "Microsoft.DurableTask/schedulers/taskHubs"):
        if not declared(files, resource_type):
            problems.append(f"no {resource_type} is declared")
    _site, raw = app_settings_of(files)
    conditional = conditional_app_settings(files)
    resolver = Resolver(files)
    # The packaged host.json names the backend (infra/host_json.py): a setting that overrides it would
    # be a second source the scale controller never reads.
    for name in sorted(raw):
        if name.startswith("AzureFunctionsJobHost__extensions__durableTask__storageProvider"):
            problems.append(
                f"app setting {name} overrides host.json's Durable backend; the scale controller reads "
                "host.json only: package the backend's host.json instead (infra/host_json.py)"
            )
    connection = raw.get("DURABLE_TASK_SCHEDULER_CONNECTION_STRING")
    if connection is None or "DURABLE_TASK_SCHEDULER_CONNECTION_STRING" not in conditional:
        problems.append(
            "DURABLE_TASK_SCHEDULER_CONNECTION_STRING must be set, only with the Durable Task Scheduler"
        )
    elif "Authentication=ManagedIdentity;ClientID=" not in str(resolver.value(_site.file, connection)):
        problems.append(
            "DURABLE_TASK_SCHEDULER_CONNECTION_STRING must authenticate with the managed identity"
        )
    return problems


ALL_CHECKS = (
    check_modules_resolve,
    check_required_resources,
    check_storage,
    check_service_bus,
    check_function_app,
    check_app_settings,
    check_monitoring,
    check_role_assignments,
    check_no_secrets,
    check_outputs,
    check_no_unused_declarations,
    check_service_bus_locks,
    check_diagnostics,
    check_alerts,
    check_durable_backend,
)


def run_all(infra_dir: Path = INFRA_DIR) -> list[str]:
    files, problems = load(infra_dir)
    if problems:
        return problems
    for check in ALL_CHECKS:
        if check in (check_modules_resolve,):
            problems += check(files, infra_dir)
        else:
            problems += check(files)
    problems += check_azd_conventions(files, infra_dir)
    from tests.infra import pool_checks  # the agent pools' checks build on this module

    problems += pool_checks.check_pool_parameter(files, infra_dir)
    for pool_check in pool_checks.POOL_CHECKS[1:]:
        problems += pool_check(files)
    host_json = infra_dir.parent / "host.json"
    problems += check_host_json(load_host_json(host_json if host_json.is_file() else HOST_JSON))
    return problems + check_param_files(files, infra_dir)
