"""``LEDGER_TRANSACTION_CODEC``: the ledger's transactions through our codec (default) or the SDK's.

The switch exists for production: if the storage service ever answers a transaction in a shape the
codec refuses, operators set ``sdk`` and restart, without a redeploy. So both settings must give a
working ledger, and the default must be our codec.
"""

from __future__ import annotations

import pytest
from azure.data.tables import TableClient

from workflow_core.ledger import ConcurrencyConflict, NewStep, StepStatus
from workflow_core.runtime import Services
from workflow_core.settings import SettingsError, load_settings
from workflow_core.table_transactions import TransactionTableClient


def _services(azurite, unique_name, codec: str | None) -> Services:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "AGENT_TRANSPORT": "storage-queue",
        "LEDGER_TABLE_NAME": unique_name("steps"),
        "DEADLINE_INDEX_TABLE_NAME": unique_name("idx"),
    }
    if codec is not None:
        env["LEDGER_TRANSACTION_CODEC"] = codec
    return Services(load_settings(env))


@pytest.mark.parametrize(("codec", "ours"), [(None, True), ("own", True), ("SDK", False)])
def test_the_setting_picks_the_codec_and_either_gives_a_working_ledger(azurite, unique_name, codec, ours):
    ledger = _services(azurite, unique_name, codec).ledger
    for client in (ledger._steps, ledger._index, ledger.table_client()):
        assert isinstance(client, TableClient)
        assert isinstance(client, TransactionTableClient) is ours

    new = [NewStep(step_id="s", step_name="s", agent="a")]
    (step,) = ledger.create_steps("codec-1", "wf", new, actor="t")
    moved = ledger.transition(step, StepStatus.SKIPPED, actor="t", reason="codec check")
    assert ledger.get("codec-1", "s").status is StepStatus.SKIPPED
    assert [e.action for e in ledger.audit_trail("codec-1")][-1:] == ["transition"]
    with pytest.raises(ConcurrencyConflict):  # the stale ETag is refused, through either codec
        ledger.transition(step, StepStatus.SKIPPED, actor="t", reason="stale")
    assert moved.etag != step.etag


def test_an_unknown_codec_is_a_clear_settings_error():
    with pytest.raises(SettingsError, match="LEDGER_TRANSACTION_CODEC must be one of own, sdk; got 'fast'"):
        load_settings(
            {
                "AzureWebJobsStorage": "UseDevelopmentStorage=true",
                "AGENT_TRANSPORT": "storage-queue",
                "LEDGER_TRANSACTION_CODEC": "fast",
            }
        )
