"""Every Azure Storage client of the app is built here, with one HTTP transport: proxy settings,
``NO_PROXY`` and the CA bundle resolved once per client (``requests``' ``trust_env`` re-reads them on
every call), table clients that are ``TransactionTableClient``; :func:`add_transport_hook` wraps it
for tests and benchmarks.

Its connections read a response's header block as headers only (:class:`HeadersOnlyResponse`), so a
``$batch`` answer's ``multipart/mixed`` type no longer makes ``email`` compile a pattern for its
boundary (new in every answer, never cached; docs/capacity.md): ``http.client``'s own ``begin`` with
``parse_headers`` looked up where it passes ``headersonly``, the same headers, status, length and
framing (what the skipped search records, ``urllib3`` ignores); no module is patched.
``tests/storage/test_http_headers.py`` holds it to the standard parse.
"""

from __future__ import annotations

import email.parser
import http.client
import os
import threading
import types
from collections.abc import Callable
from typing import Any

import requests
from azure.core.pipeline.transport import HttpTransport, RequestsTransport
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from workflow_core.settings import SettingsError, StorageConnection

TransportHook = Callable[[HttpTransport], HttpTransport]

_hooks: list[TransportHook] = []
_hooks_lock = threading.Lock()


def parse_headers_only(fp: Any, _class: type = http.client.HTTPMessage) -> http.client.HTTPMessage:
    """``http.client.parse_headers`` with ``headersonly``: the header block is all there is."""
    raw = b"".join(http.client._read_headers(fp))  # type: ignore[attr-defined]
    return email.parser.Parser(_class=_class).parsestr(raw.decode("iso-8859-1"), headersonly=True)


_stdlib_begin = http.client.HTTPResponse.begin


class HeadersOnlyResponse(http.client.HTTPResponse):
    """``http.client.HTTPResponse`` reading its header block with :func:`parse_headers_only`."""

    begin = types.FunctionType(
        _stdlib_begin.__code__,
        {**vars(http.client), "parse_headers": parse_headers_only},
        _stdlib_begin.__name__,
        _stdlib_begin.__defaults__,
        _stdlib_begin.__closure__,
    )


def _headers_only_pool(pool: type, connection: type) -> type:
    """``pool`` whose connections read responses with :class:`HeadersOnlyResponse`."""
    reading = type(connection.__name__, (connection,), {"response_class": HeadersOnlyResponse})
    return type(pool.__name__, (pool,), {"ConnectionCls": reading})


_POOLS = {
    "http": _headers_only_pool(HTTPConnectionPool, HTTPConnection),
    "https": _headers_only_pool(HTTPSConnectionPool, HTTPSConnection),
}


def headers_only_pools(pool_manager: Any) -> None:
    """Make ``pool_manager`` (a ``urllib3.PoolManager``) open connections that read responses with
    :class:`HeadersOnlyResponse`; pools it already holds keep theirs."""
    pool_manager.pool_classes_by_scheme = dict(_POOLS)


class ResolvedEnvTransport(RequestsTransport):
    """The SDK's ``requests`` transport with ``trust_env`` off and the environment's proxies (for
    ``endpoint``, honouring ``NO_PROXY``) and CA bundle set on the session once."""

    def __init__(self, endpoint: str | None = None, **kwargs: Any) -> None:
        kwargs["use_env_settings"] = False
        super().__init__(**kwargs)
        self._endpoint = endpoint

    def _init_session(self, session: requests.Session) -> None:
        super()._init_session(session)  # trust_env = False (use_env_settings), adapters
        for adapter in session.adapters.values():  # a $batch answer's headers read as headers only
            headers_only_pools(adapter.poolmanager)
        if self._endpoint:
            proxies = requests.utils.get_environ_proxies(self._endpoint)  # {} when NO_PROXY matches
            session.proxies.update({k: v for k, v in proxies.items() if k != "no"})
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle:
            session.verify = bundle


def add_transport_hook(hook: TransportHook) -> None:
    with _hooks_lock:
        _hooks.append(hook)


def remove_transport_hook(hook: TransportHook) -> None:
    with _hooks_lock:
        if hook in _hooks:
            _hooks.remove(hook)


def storage_transport(endpoint: str | None) -> HttpTransport:
    transport: HttpTransport = ResolvedEnvTransport(endpoint)
    with _hooks_lock:
        hooks = list(_hooks)
    for hook in hooks:
        transport = hook(transport)
    return transport


def _endpoint_from_connection_string(connection_string: str, key: str) -> str | None:
    parts = dict(part.split("=", 1) for part in connection_string.split(";") if "=" in part and part.strip())
    lowered = {k.strip().lower(): v.strip() for k, v in parts.items()}
    if f"{key.lower()}endpoint" in lowered:
        return lowered[f"{key.lower()}endpoint"]
    account, suffix = lowered.get("accountname"), lowered.get("endpointsuffix", "core.windows.net")
    protocol = lowered.get("defaultendpointsprotocol", "https")
    return f"{protocol}://{account}.{key.lower()}.{suffix}" if account else None


def _client(
    cls: Any, storage: StorageConnection, service: str, uri: str | None, credential: Any, *args: Any
) -> Any:
    """``cls`` from the connection string, or from the service URI and an identity."""
    if storage.connection_string:
        endpoint = _endpoint_from_connection_string(storage.connection_string, service)
        return cls.from_connection_string(
            storage.connection_string, *args, transport=storage_transport(endpoint)
        )
    if credential is None:
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential(managed_identity_client_id=storage.client_id)
    return cls(uri, *args, credential=credential, transport=storage_transport(uri))


def table_service_client(storage: StorageConnection, credential: Any = None) -> Any:
    from azure.data.tables import TableServiceClient

    return _client(TableServiceClient, storage, "Table", storage.table_service_uri, credential)


def table_client(storage: StorageConnection, table_name: str, credential: Any = None) -> Any:
    """A ``TransactionTableClient`` for one table."""
    from workflow_core.table_transactions import TransactionTableClient

    return _client(
        TransactionTableClient, storage, "Table", storage.table_service_uri, credential, table_name
    )


def transaction_table_client(service: Any, table_name: str) -> Any:
    """``service.get_table_client(table_name)`` as a ``TransactionTableClient``, built exactly as the
    SDK's (azure-data-tables 12.7.0): sharing the service's policies and transport."""
    from azure.core.pipeline import Pipeline
    from azure.data.tables._base_client import TransportWrapper

    from workflow_core.table_transactions import TransactionTableClient

    pipeline = Pipeline(
        transport=TransportWrapper(service._client._client._pipeline._transport), policies=service._policies
    )
    return TransactionTableClient(
        service.url,
        table_name=table_name,
        credential=service.credential,
        api_version=service.api_version,
        pipeline=pipeline,
        location_mode=service._location_mode,
        _hosts=service._hosts,
    )


def queue_service_client_from_connection_string(connection_string: str) -> Any:
    from azure.storage.queue import QueueServiceClient

    endpoint = _endpoint_from_connection_string(connection_string, "Queue")
    return QueueServiceClient.from_connection_string(connection_string, transport=storage_transport(endpoint))


def queue_service_client_from_uri(queue_service_uri: str, credential: Any) -> Any:
    from azure.storage.queue import QueueServiceClient

    return QueueServiceClient(
        account_url=queue_service_uri, credential=credential, transport=storage_transport(queue_service_uri)
    )


def blob_container_client(storage: StorageConnection, container: str, credential: Any = None) -> Any:
    from azure.storage.blob import ContainerClient

    if not storage.connection_string and not storage.blob_service_uri:
        raise SettingsError(
            "a payload needs Blob Storage: set AzureWebJobsStorage__blobServiceUri (or __accountName) "
            "for the managed identity"
        )
    return _client(ContainerClient, storage, "Blob", storage.blob_service_uri, credential, container)
