"""How the app's Table and Queue clients are built (workflow_core.storage_clients)."""

from __future__ import annotations

import requests
from azure.core.pipeline.transport import HttpTransport

from workflow_core import storage_clients
from workflow_core.settings import StorageConnection
from workflow_core.storage_clients import ResolvedEnvTransport, storage_transport, table_service_client


def _session(transport: ResolvedEnvTransport) -> requests.Session:
    transport.open()
    assert transport.session is not None
    return transport.session


def test_the_environment_is_read_once_when_the_session_is_made_not_per_request(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/custom-ca.pem")

    session = _session(ResolvedEnvTransport("https://acct.table.core.windows.net"))
    bypassed = _session(ResolvedEnvTransport("http://127.0.0.1:10002/devstoreaccount1"))

    assert session.trust_env is False  # requests skips its per-call proxy/.netrc lookups
    assert session.proxies == {"https": "http://proxy.example:3128"}
    assert session.verify == "/etc/custom-ca.pem"
    assert bypassed.proxies == {}  # NO_PROXY honoured for that endpoint


def test_without_proxy_settings_nothing_is_set(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    session = _session(ResolvedEnvTransport("https://acct.table.core.windows.net"))
    assert session.proxies == {}
    assert session.verify is True


def test_a_hook_wraps_only_transports_built_while_it_is_registered():
    wrapped = []

    def hook(transport: HttpTransport) -> HttpTransport:
        wrapped.append(transport)
        return transport

    storage_clients.add_transport_hook(hook)
    try:
        storage_transport("https://acct.queue.core.windows.net")
    finally:
        storage_clients.remove_transport_hook(hook)
    storage_transport("https://acct.queue.core.windows.net")
    assert len(wrapped) == 1


def test_identity_based_table_client_uses_the_service_uri_and_default_credential(monkeypatch):
    calls = []

    class FakeCredential:
        def __init__(self, **kwargs):
            calls.append(kwargs)

        def get_token(self, *scopes, **kwargs):  # pragma: no cover - never reached: nothing connects
            raise AssertionError("no network in this test")

    monkeypatch.setattr("azure.identity.DefaultAzureCredential", FakeCredential)
    connection = StorageConnection(
        table_service_uri="https://acct.table.core.windows.net",
        queue_service_uri="https://acct.queue.core.windows.net",
        client_id="client-123",
    )
    service = table_service_client(connection)
    assert service.url.startswith("https://acct.table.core.windows.net")
    assert calls == [{"managed_identity_client_id": "client-123"}]
    service.close()
