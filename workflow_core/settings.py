"""Every app setting the code reads, in one typed place, with an error that names the missing or
malformed setting rather than a ``KeyError`` deep inside a trigger at 3 a.m. The app's own are read
once, at start (:func:`load_settings`). Each optional feature's (canary, retention, bulk operations;
docs/operations.md, "Settings") are read per feature: a bad value disables its feature (logged, and a
failing row in ``/api/diagnostics``), never the whole app."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any

from workflow_core.schedules import Schedule


class SettingsError(ValueError):
    """An app setting is missing or malformed; the message names it and says what is expected."""


class TransportKind(StrEnum):
    SERVICE_BUS = "servicebus"
    STORAGE_QUEUE = "storage-queue"


# Connection setting *prefixes*: a connection string, or ``<prefix>__<property>`` (identity-based).
STORAGE_CONNECTION = "AzureWebJobsStorage"
SERVICE_BUS_CONNECTION = "ServiceBusConnection"
# The ledger's own account, so it does not share the task hub's transaction budget; may be left unset.
LEDGER_STORAGE_CONNECTION = "LedgerStorage"
OPTIONAL_CONNECTIONS = frozenset({LEDGER_STORAGE_CONNECTION})


@dataclass(frozen=True)
class StorageConnection:
    """How to reach Azure Storage: a connection string, or service URIs plus a managed identity."""

    connection_string: str | None = None
    table_service_uri: str | None = None
    queue_service_uri: str | None = None
    client_id: str | None = None  # user-assigned managed identity; None = system-assigned / dev
    blob_service_uri: str | None = None  # large payloads (``workflow_core.payloads``); None: not set


@dataclass(frozen=True)
class ServiceBusConnection:
    connection_string: str | None = None
    fully_qualified_namespace: str | None = None
    client_id: str | None = None


@dataclass(frozen=True)
class Settings:
    storage: StorageConnection
    transport: TransportKind
    service_bus: ServiceBusConnection | None
    ledger_table: str
    deadline_index_table: str
    work_queue: str
    result_queue: str
    dead_letter_queue: str
    max_delivery_count: int
    watchdog_schedule: str
    watchdog_batch_size: int
    watchdog_grace_seconds: float
    watchdog_run_on_startup: bool
    app_insights_connection_string: str | None
    max_compensation_restarts: int = 3
    max_scheduler_terminations: int = 2
    ledger_storage: StorageConnection | None = None  # None: the ledger lives in ``storage``
    ledger_sdk_transactions: bool = False  # LEDGER_TRANSACTION_CODEC=sdk
    max_payload_bytes: int = 1_048_576
    payload_container: str = "sas-payloads"
    hosted_pools: tuple[str, ...] = ("default",)

    @property
    def ledger_connection(self) -> StorageConnection:
        return self.ledger_storage or self.storage


# Every setting the app reads: name -> default (None: none). The app's own (README, "Configuration",
# whose table a test holds to these defaults; `infra/` sets each) are read at start: a bad one fails the
# app, naming it (`/api/health`). Each optional feature's (docs/operations.md, "Settings") are read
# per feature: a bad one disables that feature, logged and shown in `/api/diagnostics`, never the app.
DOCUMENTED_SETTINGS: dict[str, str | None] = {
    "AzureWebJobsStorage": None,
    "AGENT_TRANSPORT": "servicebus",
    "ServiceBusConnection": None,
    "LedgerStorage": None,
    "LEDGER_TABLE_NAME": "StepLedger",
    "DEADLINE_INDEX_TABLE_NAME": "StepDeadlines",
    "WORK_QUEUE_NAME": "agent-work",
    "RESULT_QUEUE_NAME": "agent-results",
    "DEAD_LETTER_QUEUE_NAME": "agent-work-poison",
    "MAX_DELIVERY_COUNT": "5",
    "WATCHDOG_SCHEDULE": "*/30 * * * * *",
    "WATCHDOG_BATCH_SIZE": "100",
    "WATCHDOG_GRACE_SECONDS": "30",
    "WATCHDOG_RUN_ON_STARTUP": "false",
    "MAX_COMPENSATION_RESTARTS": "3",
    "MAX_SCHEDULER_TERMINATIONS": "2",
    "LEDGER_TRANSACTION_CODEC": "own",
    "MAX_PAYLOAD_BYTES": "1048576",
    "PAYLOAD_CONTAINER_NAME": "sas-payloads",
    "HOSTED_POOLS": "default",
    "TASK_HUB_NAME": "SchedulerAgentSupervisor",
    "APPLICATIONINSIGHTS_CONNECTION_STRING": None,
}
FEATURE_SETTINGS: dict[str, dict[str, str | None]] = {
    "canary": {"CANARY_ENABLED": "false", "CANARY_SCHEDULE": "0 0 * * * *"},
    "retention": {
        "RETENTION_DAYS": "30",
        "RETENTION_SCHEDULE": "0 17 * * * *",
        "RETENTION_BATCH_SIZE": "50",
        "AUDIT_ARCHIVE_CONTAINER": None,
    },
    "bulk": {"BULK_SCHEDULE": "*/30 * * * * *", "BULK_RATE_PER_SECOND": "20"},
}
_DEFAULTS = {**DOCUMENTED_SETTINGS, **{k: v for group in FEATURE_SETTINGS.values() for k, v in group.items()}}


def _get(env: Mapping[str, str] | None, name: str) -> str | None:
    return ((os.environ if env is None else env).get(name) or "").strip() or None


def _value(env: Mapping[str, str] | None, name: str) -> str:
    """The setting, else its documented default."""
    default = _DEFAULTS[name]
    assert default is not None, name
    return _get(env, name) or default


def _number(env: Mapping[str, str] | None, name: str, minimum: float = 1, kind: type = int) -> Any:
    """Setting ``name`` as a whole number (``kind=float``: seconds) of at least ``minimum``."""
    raw = _value(env, name)
    try:
        value = kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number of seconds"
        raise SettingsError(f"{name} must be {what}, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name} must be >= {minimum}, got {value}")
    return value


TRUE = ("true", "yes", "on", "1")


def _choice(env: Mapping[str, str] | None, name: str, choices: tuple[str, ...]) -> str:
    raw = _value(env, name).lower()
    if raw not in choices:
        raise SettingsError(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return raw


def _bool(env: Mapping[str, str] | None, name: str) -> bool:
    return _choice(env, name, (*TRUE, "false", "no", "off", "0")) in TRUE


# Names Azure accepts: table names, and queue and container names (rules that both transports share).
_NAME_RULES = {
    "table": ("[A-Za-z][A-Za-z0-9]*", "letters/digits, starting with a letter"),
    "queue": ("[a-z0-9]+(-[a-z0-9]+)*", "lowercase letters, digits, single dashes"),
    "blob container": ("[a-z0-9]+(-[a-z0-9]+)*", "lowercase letters, digits, single dashes"),
}


def _named(env: Mapping[str, str], name: str, kind: str, longest: int = 63, why: str = "") -> str:
    pattern, rule = _NAME_RULES[kind]
    value = _value(env, name)
    if not (3 <= len(value) <= longest and re.fullmatch(pattern, value)):
        raise SettingsError(f"{name}={value!r} is not a valid {kind} name (3-{longest} {rule}{why})")
    return value


# "<RESULT_QUEUE_NAME>-answers-" plus an agent's own suffix of up to 8 characters is an answer queue's
# name (activities/replies/attempt_status.py), and a queue name has at most 63 characters.
RESULT_QUEUE_LONGEST = 63 - len("-answers-") - 8
ANSWER_QUEUES_RULE = ": its answer queues are named <it>-answers-<up to 8 more>"


def _service_uri(env: Mapping[str, str], prefix: str, service: str) -> str | None:
    """``<prefix>__<service>ServiceUri``, else the one ``<prefix>__accountName`` implies."""
    account = _get(env, f"{prefix}__accountName")
    return _get(env, f"{prefix}__{service}ServiceUri") or (
        f"https://{account}.{service}.core.windows.net" if account else None
    )


def storage_connection(env: Mapping[str, str], prefix: str = STORAGE_CONNECTION) -> StorageConnection:
    found = _connection(env, prefix)
    if found is None or (found.connection_string is None and found.queue_service_uri is None):
        raise SettingsError(
            f"Storage is not configured: set {prefix} to a connection string "
            f"(UseDevelopmentStorage=true for Azurite), or set {prefix}__accountName, or both "
            f"{prefix}__tableServiceUri and {prefix}__queueServiceUri for a managed identity"
        )
    return found


def _connection(env: Mapping[str, str], prefix: str) -> StorageConnection | None:
    """``prefix``'s connection string, else its service URIs (None: no table service named)."""
    if conn := _get(env, prefix):
        if conn == "UseDevelopmentStorage=true":
            conn = azurite_connection_string()
        return StorageConnection(connection_string=conn)
    table_uri = _service_uri(env, prefix, "table")
    if table_uri is None:
        return None
    return StorageConnection(
        table_service_uri=table_uri,
        queue_service_uri=_service_uri(env, prefix, "queue"),
        client_id=_get(env, f"{prefix}__clientId"),
        blob_service_uri=_service_uri(env, prefix, "blob"),
    )


def azurite_connection_string(
    host: str = "127.0.0.1", blob_port: int = 10000, queue_port: int = 10001, table_port: int = 10002
) -> str:
    """The well-known Azurite development account (public, documented key; not a secret)."""
    key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    return (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={key};"
        f"BlobEndpoint=http://{host}:{blob_port}/devstoreaccount1;"
        f"QueueEndpoint=http://{host}:{queue_port}/devstoreaccount1;"
        f"TableEndpoint=http://{host}:{table_port}/devstoreaccount1;"
    )


def service_bus_connection(
    env: Mapping[str, str], prefix: str = SERVICE_BUS_CONNECTION
) -> ServiceBusConnection:
    if conn := _get(env, prefix):
        return ServiceBusConnection(connection_string=conn)
    fqns = _get(env, f"{prefix}__fullyQualifiedNamespace")
    if fqns is None:
        raise SettingsError(
            f"AGENT_TRANSPORT=servicebus needs {prefix} (a connection string, e.g. the emulator's "
            f"'...;UseDevelopmentEmulator=true;') or {prefix}__fullyQualifiedNamespace "
            f"(e.g. mybus.servicebus.windows.net) for a managed identity"
        )
    return ServiceBusConnection(fully_qualified_namespace=fqns, client_id=_get(env, f"{prefix}__clientId"))


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every setting; raise :class:`SettingsError` naming the first bad one."""
    env = os.environ if env is None else env
    transport = TransportKind(_choice(env, "AGENT_TRANSPORT", tuple(TransportKind)))
    return Settings(
        storage=storage_connection(env),
        transport=transport,
        service_bus=service_bus_connection(env) if transport is TransportKind.SERVICE_BUS else None,
        ledger_table=_named(env, "LEDGER_TABLE_NAME", "table"),
        deadline_index_table=_named(env, "DEADLINE_INDEX_TABLE_NAME", "table"),
        work_queue=_named(env, "WORK_QUEUE_NAME", "queue"),
        result_queue=_named(env, "RESULT_QUEUE_NAME", "queue", RESULT_QUEUE_LONGEST, ANSWER_QUEUES_RULE),
        dead_letter_queue=_named(env, "DEAD_LETTER_QUEUE_NAME", "queue"),
        max_delivery_count=_number(env, "MAX_DELIVERY_COUNT"),
        watchdog_schedule=_value(env, "WATCHDOG_SCHEDULE"),
        watchdog_batch_size=_number(env, "WATCHDOG_BATCH_SIZE"),
        watchdog_grace_seconds=_number(env, "WATCHDOG_GRACE_SECONDS", 0, float),
        watchdog_run_on_startup=_bool(env, "WATCHDOG_RUN_ON_STARTUP"),
        max_compensation_restarts=_number(env, "MAX_COMPENSATION_RESTARTS"),
        max_scheduler_terminations=_number(env, "MAX_SCHEDULER_TERMINATIONS"),
        app_insights_connection_string=_get(env, "APPLICATIONINSIGHTS_CONNECTION_STRING"),
        ledger_storage=_connection(env, LEDGER_STORAGE_CONNECTION),  # the ledger's own account (tables)
        ledger_sdk_transactions=_choice(env, "LEDGER_TRANSACTION_CODEC", ("own", "sdk")) == "sdk",
        max_payload_bytes=_max_payload_bytes(env),
        payload_container=_named(env, "PAYLOAD_CONTAINER_NAME", "blob container"),
        hosted_pools=hosted_pools(env),
    )


def hosted_pools(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``HOSTED_POOLS``, each a pool ``workflows/pools.yaml`` declares: read on its own too, at import,
    where the Function App registers one work-queue trigger per hosted pool."""
    from workflow_core.workflows.loader import agent_pools

    raw = _value(env, "HOSTED_POOLS")
    names = tuple(dict.fromkeys(name.strip() for name in raw.split(",") if name.strip()))
    declared = agent_pools().names
    unknown = [name for name in names if name not in declared]
    if unknown or not names:
        raise SettingsError(
            f"HOSTED_POOLS={raw!r} names {', '.join(map(repr, unknown)) or 'no pool'}: the pools declared in "
            f"workflows/pools.yaml are {', '.join(declared)}"
        )
    return names


DTS_MAX_PAYLOAD_BYTES = 262_144  # the Durable Task Scheduler's messages carry values (docs/deploy.md)


def _max_payload_bytes(env: Mapping[str, str]) -> int:
    value = _number(env, "MAX_PAYLOAD_BYTES", minimum=1024)
    ceiling = int(_value({}, "MAX_PAYLOAD_BYTES"))
    if value > ceiling:
        raise SettingsError(f"MAX_PAYLOAD_BYTES must be at most {ceiling} (1 MiB), got {value}")
    dts = _get(env, "DURABLE_TASK_SCHEDULER_CONNECTION_STRING")
    return min(value, DTS_MAX_PAYLOAD_BYTES) if dts else value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Read once; tests that change the environment call ``cache_clear``."""
    return load_settings()


# Each optional feature's settings, read when the feature runs (see the module docstring).
def _schedule(env: Mapping[str, str] | None, name: str) -> Schedule:
    try:
        return Schedule.parse(_value(env, name))
    except ValueError as exc:
        raise SettingsError(f"{name}: {exc}") from None


@dataclass(frozen=True)
class CanarySettings:
    enabled: bool
    schedule: Schedule
    period: timedelta  # the schedule's: the scenario rotation's and the staleness unit


@dataclass(frozen=True)
class RetentionSettings:
    days: int
    schedule: Schedule
    batch_size: int
    archive_container: str | None


@dataclass(frozen=True)
class BulkSettings:
    schedule: Schedule
    rate_per_second: int


def canary_settings(env: Mapping[str, str] | None = None) -> CanarySettings:
    schedule = _schedule(env, "CANARY_SCHEDULE")
    try:
        period = schedule.period()
    except ValueError as exc:  # the rotation and the stale alert count periods: one must exist
        raise SettingsError(f"CANARY_SCHEDULE: {exc}; the canary needs a period") from None
    return CanarySettings(enabled=_bool(env, "CANARY_ENABLED"), schedule=schedule, period=period)


def retention_settings(env: Mapping[str, str] | None = None) -> RetentionSettings:
    days = _number(env, "RETENTION_DAYS")
    if days > 36_500:
        raise SettingsError(f"RETENTION_DAYS is {days}; at most 36500 (100 years)")
    return RetentionSettings(
        days=days,
        schedule=_schedule(env, "RETENTION_SCHEDULE"),
        batch_size=_number(env, "RETENTION_BATCH_SIZE"),
        archive_container=_get(env, "AUDIT_ARCHIVE_CONTAINER"),
    )


def bulk_settings(env: Mapping[str, str] | None = None) -> BulkSettings:
    return BulkSettings(
        schedule=_schedule(env, "BULK_SCHEDULE"), rate_per_second=_number(env, "BULK_RATE_PER_SECOND")
    )


FEATURE_LOADERS = {"canary": canary_settings, "retention": retention_settings, "bulk": bulk_settings}


def feature_errors(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each feature whose settings do not load, with the one-line error that names the setting."""
    errors = {}
    for feature, load in FEATURE_LOADERS.items():
        try:
            load(env)
        except SettingsError as exc:
            errors[feature] = str(exc)
    return errors
