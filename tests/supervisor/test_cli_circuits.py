"""``sas circuit list|open|close`` and the waiting line of ``sas show``, against a real Azurite."""

from __future__ import annotations

import json

import pytest

from tests.activities.test_pool_routing import declare_pools
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus
from workflow_core.limits import CircuitStore
from workflow_core.workflows.pools import clear_pools_cache

POOLS = """agents:
  storage.create:
    max_in_flight: 2
    circuit: {failure_threshold: 3, open_seconds: 30}
"""


@pytest.fixture
def limited(monkeypatch, tmp_path):
    clear_pools_cache()
    declare_pools(monkeypatch, tmp_path, POOLS)
    monkeypatch.setattr("operator_cli.circuit_commands.operator_user", lambda: "alice")
    yield
    clear_pools_cache()


def test_list_says_when_no_agent_is_limited(cli):
    code, out, _ = cli("circuit", "list")
    assert code == 0 and "no agent declares limits" in out


def test_open_list_close_are_audited_and_done_once(cli, ledger, limited):
    code, out, err = cli(
        "circuit", "open", "storage.create", "--reason", "maintenance", "-y", "--idempotency-key", "k1"
    )
    assert code == 0, err
    assert "circuit of storage.create: open (operator:alice)" in out
    code, out, _ = cli(
        "circuit", "open", "storage.create", "--reason", "maintenance", "-y", "--idempotency-key", "k1"
    )
    assert code == 0 and "already done by the first command" in out
    code, out, _ = cli("circuit", "list")
    assert "open (operator)" in out and "0/2" in out
    assert "circuit open by an operator for storage.create since " in out
    code, out, _ = cli("circuit", "list", "-o", "json")
    (row,) = json.loads(out)
    assert (row["state"], row["manual"], row["max_in_flight"]) == ("open", True, 2)
    code, out, _ = cli("circuit", "close", "storage.create", "--reason", "done", answer="n")
    assert code == 1  # declined: nothing done
    code, out, _ = cli("circuit", "close", "storage.create", "--reason", "done", answer="y")
    assert code == 0 and "closed" in out
    trail = CircuitStore(ledger).audit("storage.create")
    assert [(a["actor"], a["action"], a["reason"]) for a in trail] == [
        ("operator:alice", "operator_open", "maintenance"),
        ("operator:alice", "operator_close", "done"),
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ("circuit", "open", "nobody", "--reason", "x", "-y"),
        ("circuit", "open", "../storage.create", "--reason", "x", "-y"),
        ("circuit", "open", "s" * 5000, "--reason", "x", "-y"),
        ("circuit", "open", "storage.create", "-y"),  # no reason
        ("circuit", "open", "storage.create", "--reason", "x", "-y", "--idempotency-key", "bad key!"),
        ("circuit", "toggle", "storage.create"),
    ],
)
def test_bad_commands_are_refused_and_change_nothing(cli, ledger, limited, argv):
    code, _, _ = cli(*argv)
    assert code == 2
    assert CircuitStore(ledger).audit("storage.create") == []


def test_show_says_which_step_waits(cli, ledger, limited):
    make_step(ledger, "wf-held", StepStatus.PENDING, attempt=0)
    ledger.note(
        "wf-held",
        "create_storage",
        actor="scheduler",
        action="waiting",
        reason="attempt 1 waits: 2 of 2 slots of storage.create in flight",
        attempt=1,
    )
    code, out, err = cli("show", "wf-held")
    assert code == 0, err
    assert "Waiting: create_storage: attempt 1 waits: 2 of 2 slots of storage.create in flight" in out
    code, out, _ = cli("show", "wf-held", "-o", "json")
    assert json.loads(out)["waiting"] == {
        "create_storage": "attempt 1 waits: 2 of 2 slots of storage.create in flight"
    }
