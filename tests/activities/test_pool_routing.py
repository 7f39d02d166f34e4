"""Routing in the app: a pool's work goes to its own queue, the app hosts the pools ``HOSTED_POOLS``
names (one work-queue trigger each, checked against the declared pools), and reads the dead letters
of every pool it can (Storage Queues: every declared pool; Service Bus: the hosted ones only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import azure.durable_functions as df
import pytest

from activities.replies.dead_letters import register_dead_letter_handler
from activities.worker.agent_worker import process_work_message, register_worker
from workflow_core import contracts as c
from workflow_core.ledger import StepStatus
from workflow_core.settings import SettingsError, TransportKind, hosted_pools
from workflow_core.workflows import loader

ROOT = Path(__file__).resolve().parents[2]
DNS_POOL = "pools:\n  dns:\n    agents: [dns.register, dns.unregister]\n"


def declare_pools(monkeypatch: pytest.MonkeyPatch, directory: Path, pools_yaml: str) -> Path:
    """The shipped definitions plus ``pools_yaml`` as ``pools.yaml``, in ``directory``, read by the
    loader instead of ``workflows/`` for the rest of the test."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in loader.DEFAULT_DIRECTORY.glob("*.yaml"):
        shutil.copy(path, directory / path.name)
    (directory / "pools.yaml").write_text(pools_yaml, encoding="utf-8")
    monkeypatch.setattr(loader, "DEFAULT_DIRECTORY", directory)
    loader.clear_workflow_cache()
    return directory


def test_hosted_pools_are_checked_against_the_declared_pools(monkeypatch, tmp_path):
    assert hosted_pools({}) == ("default",)
    declare_pools(monkeypatch, tmp_path, DNS_POOL)
    assert hosted_pools({"HOSTED_POOLS": " dns , default,dns"}) == ("dns", "default")
    with pytest.raises(SettingsError, match=r"HOSTED_POOLS='default,mail' names 'mail'.* default, dns"):
        hosted_pools({"HOSTED_POOLS": "default,mail"})
    with pytest.raises(SettingsError, match="names no pool"):
        hosted_pools({"HOSTED_POOLS": " , "})


def test_dispatch_sends_a_pools_work_to_the_pools_queue_only(harness, monkeypatch, tmp_path):
    declare_pools(monkeypatch, tmp_path, DNS_POOL)
    pool_queue = f"{harness.services.settings.work_queue}-dns"
    instance = harness.start()
    harness.dispatch(instance, "create_storage")
    harness.dispatch(instance, "register_dns")

    assert [m.body["agent"] for m in harness.work()] == ["storage.create"]  # the default pool's
    (routed,) = harness.drain(pool_queue)
    assert routed.body["agent"] == "dns.register"
    process_work_message(
        routed.body, delivery_count=1, services=harness.services, worker_id="dns-runner", pool="dns"
    )
    assert harness.ledger.get(instance, "register_dns").status is StepStatus.SUCCEEDED


@pytest.mark.parametrize("kind", list(TransportKind))
def test_a_pools_worker_and_dead_letter_handler_bind_to_its_queue(kind):
    bp = df.Blueprint()
    worker = register_worker(bp, kind, "dns-east").build()
    dead = register_dead_letter_handler(bp, kind, "dns-east").build()
    assert worker.get_function_name() == f"{c.WORKER_FUNCTION}_dns_east"
    assert dead.get_function_name() == f"{c.DEAD_LETTER_FUNCTION}_dns_east"
    trigger = "serviceBusTrigger" if kind is TransportKind.SERVICE_BUS else "queueTrigger"

    def queue(function):
        return next(b.get_dict_repr() for b in function.get_bindings() if b.type == trigger)["queueName"]

    assert queue(worker) == "%WORK_QUEUE_NAME%-dns-east"
    suffix = "/$DeadLetterQueue" if kind is TransportKind.SERVICE_BUS else "-poison"
    assert queue(dead) == f"%WORK_QUEUE_NAME%-dns-east{suffix}"


REGISTERED = """
import json, sys
from pathlib import Path
from workflow_core.workflows import loader
loader.DEFAULT_DIRECTORY = Path(sys.argv[1])
import function_app
print(json.dumps(sorted(f.get_function_name() for f in function_app.app.get_functions()
                        if f.get_function_name().startswith("agent_"))))
"""


def _import_app(directory: Path, **env: str) -> subprocess.CompletedProcess:
    """Import ``function_app`` in a fresh process over ``directory``'s definitions and pools."""
    return subprocess.run(
        [sys.executable, "-c", REGISTERED, str(directory)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_app_registers_a_trigger_per_hosted_pool_and_needs_only_their_handlers(monkeypatch, tmp_path):
    directory = declare_pools(
        monkeypatch,
        tmp_path / "workflows",
        "pools:\n  dns:\n    agents: [dns.register]\n  remote:\n    agents: [remote.only]\n",
    )
    remote_job = "name: remote-job\nsteps:\n  - {id: only, agent: remote.only, deadline_seconds: 60}\n"
    (directory / "remote-job.yaml").write_text(remote_job, encoding="utf-8")
    storage = _import_app(directory, AGENT_TRANSPORT="storage-queue", HOSTED_POOLS="default,dns")
    assert storage.returncode == 0, storage.stderr
    every_pool = [c.DEAD_LETTER_FUNCTION, f"{c.DEAD_LETTER_FUNCTION}_dns", f"{c.DEAD_LETTER_FUNCTION}_remote"]
    assert set(json.loads(storage.stdout)) == {
        c.RESULT_FUNCTION,
        c.WORKER_FUNCTION,
        f"{c.WORKER_FUNCTION}_dns",
        *every_pool,  # Storage Queues: the app reads every pool's poison queue
    }
    servicebus = _import_app(
        directory, AGENT_TRANSPORT="servicebus", HOSTED_POOLS="dns", ServiceBusConnection="Endpoint=sb://x/"
    )
    assert servicebus.returncode == 0, servicebus.stderr
    # Service Bus: no receive right on a pool served elsewhere, nor on its dead-letter queue
    assert set(json.loads(servicebus.stdout)) == {
        c.RESULT_FUNCTION,
        f"{c.WORKER_FUNCTION}_dns",
        f"{c.DEAD_LETTER_FUNCTION}_dns",
    }

    hosting_remote = _import_app(directory, AGENT_TRANSPORT="storage-queue", HOSTED_POOLS="default,remote")
    assert hosting_remote.returncode != 0
    assert "have no handler: remote.only (used by remote-job)" in hosting_remote.stderr
    unknown = _import_app(directory, AGENT_TRANSPORT="storage-queue", HOSTED_POOLS="default,mail")
    assert unknown.returncode != 0 and "HOSTED_POOLS='default,mail' names 'mail'" in unknown.stderr
