"""Shared fixtures: one real Azurite per test session, fresh tables/queues per test, and the whole app
in one process (``harness``) on it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from devtools.azurite import Azurite

# What the tests' reports carried (``user_properties``), gathered where the terminal summary is
# printed: in the one pytest process, or in the controller when workers run the tests (-n).
TRANSPORTS_USED: set[str] = set()  # the agents' transport of every harness
FAULT_ROWS: list[tuple] = []  # tests/faults' rows (tests/helpers/fault_matrix.Row as a tuple)


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
def app_settings() -> dict[str, str]:
    """Settings over :func:`tests.helpers.app.settings_env`'s defaults for ``app_env``; a folder's
    conftest or a test module overrides this fixture."""
    return {}


@pytest.fixture
def app_env(azurite, unique_name, app_settings) -> dict[str, str]:
    """App settings for the session's Azurite naming tables and queues of this test's own."""
    from tests.helpers.app import settings_env

    return settings_env(azurite, unique_name, **app_settings)


@pytest.fixture
def services(app_env):
    """The app's services (ledger, transport, payloads...) built from ``app_env``: the ledger's tables
    created, the queues on first use (after a test declared its pools). Function bodies that read the
    process's services get these in tests/activities."""
    from workflow_core.runtime import Services
    from workflow_core.settings import load_settings

    built = Services(load_settings(app_env))
    built.ledger  # noqa: B018 - creates the tables
    yield built
    built.close()


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


@pytest.fixture
def harness_options() -> dict[str, Any]:
    """:class:`~devtools.harness.PatternHarness`'s keyword arguments for ``harness``; a folder's
    conftest or a test module overrides this fixture to shape its harness (``serve_work=False``: the
    harness's own worker is taken off the work queue, for an agent process under test)."""
    return {}


@pytest.fixture
def harness(azurite, harness_options, request):
    """The whole pattern in one process (``devtools.harness``) on fresh tables and queues of the
    session's Azurite: the real HTTP starter, orchestrators through the SDK's replay on a virtual
    clock, agent bodies pumping real queues, the watchdog every 30 s; no fault injected before or after."""
    from activities.worker.handlers import faults
    from devtools.harness import PatternHarness

    options = dict(harness_options)
    serve_work = options.pop("serve_work", True)
    faults.clear()
    with PatternHarness(azurite, **options) as h:
        if not serve_work:
            h.host.remove_pump(h.work_pump)
        request.node.user_properties.append(("transport", h.transport_label))
        yield h
    faults.clear()


def pytest_runtest_logreport(report):
    for key, value in report.user_properties if report.when == "teardown" else ():
        if key == "transport":
            TRANSPORTS_USED.add(value)
        elif key == "fault_row":
            FAULT_ROWS.append(tuple(value))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if TRANSPORTS_USED:
        terminalreporter.write_line(f"end-to-end agent transport: {', '.join(sorted(TRANSPORTS_USED))}")
    if FAULT_ROWS:
        from tests.helpers.fault_matrix import print_table

        print_table(terminalreporter, sorted(FAULT_ROWS, key=lambda row: row[0]))
