"""The watchdog re-sends an unclaimed attempt to the queue of its agent's pool, not the work queue."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from supervisor.watchdog import run_tick
from supervisor.watchdog_model import Action
from tests.activities.test_pool_routing import declare_pools
from tests.helpers.app import drain
from tests.helpers.rows import NOW, make_step
from workflow_core.ledger import StepStatus
from workflow_core.transport import message_id_for


def test_an_unclaimed_pool_step_is_resent_to_its_pools_queue(services, ledger, client, monkeypatch, tmp_path):
    declare_pools(monkeypatch, tmp_path, "pools:\n  storage:\n    agents: [storage.create]\n")
    pool_queue = f"{services.settings.work_queue}-storage"
    services.transport.ensure_queues(pool_queue)
    make_step(ledger, "wf-pool", StepStatus.DISPATCHED, attempt=2, deadline=NOW - timedelta(seconds=1))
    client.statuses["wf-pool"] = "Running"

    report = asyncio.run(run_tick(client, services, now=NOW + timedelta(seconds=30)))
    assert report.count(Action.RESEND) == 1
    assert drain(services.transport, services.settings.work_queue) == []
    (message,) = drain(services.transport, pool_queue)
    assert message.message_id == message_id_for("wf-pool", "create_storage", 2)
    resend = [a for a in ledger.audit_trail("wf-pool") if a.reason.startswith("resend")]
    assert len(resend) == 1 and f"re-sent once to {pool_queue}" in resend[0].reason
