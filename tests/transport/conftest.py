"""Fixtures for the transport tests: the AMQP 1.0 Service Bus test double."""

from __future__ import annotations

import pytest

from tests.servicebus_double.double import AmqpTestDouble


@pytest.fixture(scope="session")
def servicebus_double():
    """The AMQP test double on a free loopback port (see tests/servicebus_double/)."""
    with AmqpTestDouble(lock_duration_seconds=30) as double:
        yield double
