"""Fixtures for the HTTP API tests.

The function bodies run with real ``azure.functions.HttpRequest`` objects, the ledger on the
session's real Azurite, and the real ``DurableOrchestrationClient`` built from a client-binding
JSON whose URLs point at a local stub of the Durable extension's HTTP API (``durable_http_stub``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any

import pytest
from azure.durable_functions import DurableOrchestrationClient
from azure.durable_functions.models.utils import http_utils

from tests.api.durable_http_stub import DurableHttpStub
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR, WORKFLOW_ORCHESTRATOR
from workflow_core.ledger import StepLedger
from workflow_core.runtime import Services, reset_services


@pytest.fixture
def platform_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app as deployed with App Service Authentication on: the Azure marker and the platform's
    ``WEBSITE_AUTH_ENABLED`` set, so principal headers are believed (the platform sets them)."""
    monkeypatch.setenv("WEBSITE_INSTANCE_ID", "test-instance")
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "True")


@pytest.fixture
def run() -> Iterator[Callable[[Coroutine[Any, Any, Any]], Any]]:
    """Run coroutines on an event loop of this test's own.

    The durable client shares one process-wide aiohttp session, bound to the loop that created it.
    Each test starts without one (a session left by another loop would be unusable) and closes the
    one it created, so nothing leaks into later tests.
    """
    http_utils._client_session = None
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.run_until_complete(http_utils._close_session())
    loop.close()


@pytest.fixture(scope="session")
def durable_stub() -> Iterator[DurableHttpStub]:
    with DurableHttpStub(known_orchestrators={WORKFLOW_ORCHESTRATOR, COMPENSATION_ORCHESTRATOR}) as stub:
        yield stub


@pytest.fixture
def stub(durable_stub: DurableHttpStub) -> DurableHttpStub:
    durable_stub.reset()
    return durable_stub


@pytest.fixture
def client(stub: DurableHttpStub) -> DurableOrchestrationClient:
    """The real durable client, as the ``durable_client_input`` binding builds it."""
    return DurableOrchestrationClient(stub.binding_json())


@pytest.fixture
def ledger(services: Services) -> StepLedger:
    return services.ledger


@pytest.fixture
def process_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Mapping[str, str]], None]]:
    """Point the process's app settings (what the Functions bindings read) at a mapping."""

    def apply(values: Mapping[str, str]) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        reset_services()

    yield apply
    monkeypatch.undo()
    reset_services()


@pytest.fixture(scope="module")
def http_app(azurite) -> Iterator[Any]:
    """The app's HTTP functions on a real socket (``devtools.http_server``, as the console demo serves
    them) over the in-process durable host: requests arrive as the Functions host hands them on, with
    URL decoding and no forwarding header. Module-scoped: the harness's virtual clock is
    process-wide while it runs."""
    from devtools.console_demo import ConsoleDemo

    with ConsoleDemo(azurite, tables=("Httpsteps", "Httpdeadlines"), speed=20) as running:
        yield running
