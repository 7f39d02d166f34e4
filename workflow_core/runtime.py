"""The process-wide services (settings, ledger, transport) the function bodies share.

Built lazily on first use, from app settings, so importing ``function_app`` needs no storage and
a cold start pays for connections only when a function actually runs. Tests and the durable test
host call :func:`reset_services` after pointing the environment at their Azurite.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from workflow_core.ledger import StepLedger
from workflow_core.payloads import PayloadStore
from workflow_core.settings import Settings, get_settings
from workflow_core.storage_clients import blob_container_client, table_service_client
from workflow_core.transport import Transport
from workflow_core.workflows.store import DefinitionStore


@dataclass
class Services:
    settings: Settings

    @cached_property
    def ledger(self) -> StepLedger:
        storage = self.settings.ledger_connection  # LedgerStorage, else AzureWebJobsStorage
        service = table_service_client(storage)  # connection string, or service URI + managed identity
        ledger = StepLedger(
            service,
            self.settings.ledger_table,
            self.settings.deadline_index_table,
            sdk_transactions=self.settings.ledger_sdk_transactions,
        )
        if storage.connection_string:  # local/dev: create what infra would have provisioned
            ledger.create_tables()
        return ledger

    @cached_property
    def definitions(self) -> DefinitionStore:
        """Stored definition versions, in the ledger table (created with the ledger)."""
        return DefinitionStore(self.ledger.table_client())

    @cached_property
    def payloads(self) -> PayloadStore:
        """Large payloads by reference, in a blob container of the app's storage account; the
        container client is made (and, locally, the container created) on the first large payload."""
        settings = self.settings

        def container() -> Any:
            client = blob_container_client(settings.storage, settings.payload_container)
            if settings.storage.connection_string:  # local/dev: create what infra would have provisioned
                from azure.core.exceptions import ResourceExistsError

                with contextlib.suppress(ResourceExistsError):
                    client.create_container()
            return client

        return PayloadStore(container, max_bytes=settings.max_payload_bytes)

    @cached_property
    def transport(self) -> Transport:
        from workflow_core.transport import create_transport

        transport = create_transport(self.settings)
        if self.settings.storage.connection_string:
            s = self.settings
            transport.ensure_queues(s.work_queue, s.result_queue)
        return transport

    def close(self) -> None:
        if "ledger" in self.__dict__:
            self.ledger.close()
        if "transport" in self.__dict__:
            self.transport.close()
        if "payloads" in self.__dict__:
            self.payloads.close()


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
