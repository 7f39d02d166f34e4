"""Fixtures for the supervisor tests: real Azurite tables and queues, real ledger and transport.

The only stand-in is :class:`tests.helpers.durable.RecordingClient`, at the Durable client boundary
(``get_status``, ``raise_event``, ``start_new``) for decision-level tests; end-to-end tests use the
durable test host.
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest

from operator_cli.cli import main
from tests.helpers.durable import RecordingClient
from tests.helpers.rows import NOW
from workflow_core import clock
from workflow_core.ledger import StepLedger


@pytest.fixture
def cli(app_env, monkeypatch, request):
    """Run the CLI with the app's settings in the environment (as an operator's shell would have), as
    OS user ``alice``, on the clock at the test module's ``LATER`` (default: a minute after ``NOW``).
    ``run(*argv, answer=...)``: ``(exit code, stdout, stderr)``; ``answer`` is what the operator types
    at a confirmation prompt (none expected when unset)."""
    for name in ("AzureWebJobsStorage", "LEDGER_TABLE_NAME", "DEADLINE_INDEX_TABLE_NAME"):
        monkeypatch.setenv(name, app_env[name])
    monkeypatch.delenv("AGENT_TRANSPORT", raising=False)  # the CLI must not need transport settings
    for commands in ("action_commands", "operations_commands", "circuit_commands"):  # the OS account
        monkeypatch.setattr(f"operator_cli.{commands}.operator_user", lambda: "alice")
    later = getattr(request.module, "LATER", NOW + timedelta(minutes=1))

    def run(*argv: str, answer: str | None = None) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()

        def read(prompt: str) -> str:
            out.write(prompt)
            if answer is None:
                raise AssertionError("the CLI asked for confirmation unexpectedly")
            return answer

        with clock.use_clock(lambda: later):
            code = main(list(argv), stdout=out, stderr=err, read=read)
        return code, out.getvalue(), err.getvalue()

    return run


@pytest.fixture
def ledger(services) -> StepLedger:
    return services.ledger


@pytest.fixture
def client() -> RecordingClient:
    return RecordingClient()
