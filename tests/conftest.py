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
