"""The process-wide services (settings, ledger, transport) the function bodies share, built lazily
so importing ``function_app`` needs no storage and a cold start connects only when a function runs."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from azure.core.exceptions import ResourceExistsError

from workflow_core.ledger import StepLedger
from workflow_core.ledger.bulk_rows import BulkRows
from workflow_core.ledger.idempotency import IdempotencyKeys
from workflow_core.limits import CircuitStore, LimitsStore
from workflow_core.liveness import Liveness
from workflow_core.payloads import PayloadStore
from workflow_core.settings import Settings, get_settings
from workflow_core.storage_clients import blob_container_client, table_service_client
from workflow_core.transport import Transport, create_transport
from workflow_core.workflows.loader import agent_pools
from workflow_core.workflows.pools import pool_queue
from workflow_core.workflows.store import DefinitionStore


@dataclass
class Services:
    settings: Settings

    @cached_property
    def ledger(self) -> StepLedger:
        storage = self.settings.ledger_connection
        ledger = StepLedger(
            table_service_client(storage),
            self.settings.ledger_table,
            self.settings.deadline_index_table,
            sdk_transactions=self.settings.ledger_sdk_transactions,
        )
        if storage.connection_string:  # local/dev: create what infra would have provisioned
            ledger.create_tables()
        return ledger

    @cached_property
    def definitions(self) -> DefinitionStore:
        return DefinitionStore.of(self.ledger)

    @cached_property
    def bulk_operations(self) -> BulkRows:
        return BulkRows.of(self.ledger)

    @cached_property
    def idempotency_keys(self) -> IdempotencyKeys:
        return IdempotencyKeys(self.ledger)

    @cached_property
    def liveness(self) -> Liveness:
        return Liveness(self.ledger.table_client())

    @cached_property
    def limits(self) -> LimitsStore:
        return LimitsStore(self.ledger)

    @cached_property
    def circuits(self) -> CircuitStore:
        return CircuitStore(self.ledger)

    @cached_property
    def payloads(self) -> PayloadStore:
        """The container client is made (and, locally, the container created) on the first large payload."""

        def container() -> Any:
            client = blob_container_client(self.settings.storage, self.settings.payload_container)
            if self.settings.storage.connection_string:  # local/dev: create what infra would have provisioned
                with contextlib.suppress(ResourceExistsError):
                    client.create_container()
            return client

        return PayloadStore(container, max_bytes=self.settings.max_payload_bytes)

    @cached_property
    def transport(self) -> Transport:
        transport = create_transport(self.settings)
        if self.settings.storage.connection_string:  # local/dev: every pool's queue, hosted or not
            pools = [pool_queue(self.settings.work_queue, pool) for pool in agent_pools().names]
            transport.ensure_queues(*pools, self.settings.result_queue)
        return transport

    def close(self) -> None:
        for made in ("ledger", "transport", "payloads"):  # only what was built
            if made in self.__dict__:
                self.__dict__[made].close()


_lock = threading.Lock()
_services: Services | None = None


def get_services() -> Services:
    global _services
    with _lock:
        if _services is None:
            _services = Services(get_settings())
        return _services


def set_services(services: Services | None) -> None:
    """Install prebuilt services (tests, the durable test host, the demo)."""
    global _services
    with _lock:
        if _services is not None and _services is not services:
            _services.close()
        _services = services


def reset_services() -> None:
    """Forget cached settings and services; the next call rebuilds them from the environment."""
    get_settings.cache_clear()
    set_services(None)
