"""Shared fixtures: one real Azurite per test session, fresh tables/queues per test."""

from __future__ import annotations

import uuid

import pytest

from devtools.azurite import Azurite


@pytest.fixture(scope="session")
def azurite():
    """A real Azurite on free loopback ports with a temporary ``--location``."""
    with Azurite() as instance:
        yield instance


@pytest.fixture
def storage_connection_string(azurite: Azurite) -> str:
    return azurite.connection_string


@pytest.fixture
def unique_name():
    """Table/queue-safe unique names, so tests sharing one Azurite never see each other's data."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}{uuid.uuid4().hex[:12]}"

    return make


@pytest.fixture
def ledger(azurite, unique_name):
    """A ledger on fresh tables of the session's real Azurite (folders whose tests run on an app's
    services override it with that app's ledger)."""
    from workflow_core.ledger import StepLedger

    led = StepLedger.from_connection_string(
        azurite.connection_string, unique_name("steps"), unique_name("idx")
    )
    led.create_tables()
    yield led
    led.close()


@pytest.fixture
def broken_definitions(tmp_path, monkeypatch):
    """The shipped workflows/ with one typo (``agnet:`` in provision-tenant.yaml), loaded from a copy:
    what a newcomer's half-edited file looks like to every command that reads the definitions."""
    from workflow_core.workflows import loader

    for path in loader.DEFAULT_DIRECTORY.glob("*.yaml"):
        text = path.read_text()
        if path.name == "provision-tenant.yaml":
            text = text.replace("    agent: storage.create", "    agnet: storage.create")
        (tmp_path / path.name).write_text(text)
    monkeypatch.setattr(loader, "DEFAULT_DIRECTORY", tmp_path)
    loader.clear_workflow_cache()
    yield "provision-tenant.yaml: steps[0].agnet: unknown key"
    loader.clear_workflow_cache()
