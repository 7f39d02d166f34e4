"""Record the replay corpus: orchestration histories of representative runs, for the replay check.

Each scenario runs the whole pattern on the durable test host and saves the history of every
orchestration it ran as one replay file (docs/scheduler.md, "The replay check"). Re-record after a
*deliberate* change of the orchestrators' actions (and handle the instances still in flight)::

    .venv/bin/python -m devtools.replay_corpus tests/replay_corpus

Timestamps are whatever the run produced (the clock moves with real time, and skips to timers); the
check compares actions, and the fire times the scheduler derived from the recorded times.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

from activities.worker.handlers import faults
from devtools.durable_host import FlowingClock
from devtools.harness import PatternHarness
from workflow_core.contracts import compensation_instance_id, result_event_name, step_instance_id

TENANT = {"tenant_id": "corpus-t1", "admin_email": "admin@corpus.example"}
CHAIN = {
    "name": "corpus-chain",
    "version": "corpus-1",
    "history_checkpoint_every": 1,
    "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
    "steps": [
        {
            "id": f"s{i}",
            "agent": "storage.create",
            "deadline_seconds": 60,
            "input": {"tenant_id": "$input.tenant_id"},
        }
        for i in range(1, 4)
    ],
}


def _completes(h: PatternHarness, workflow: str, body: dict[str, Any], instance_id: str) -> list[str]:
    h.run_until_complete(h.start_workflow(workflow, body, instance_id=instance_id))
    return [instance_id]


def _retry_then_compensate(h: PatternHarness) -> list[str]:
    faults.inject("dns.register", faults.Fail(times=1))  # one retry with backoff
    faults.inject("email.send_welcome", faults.Fail())  # gives up: DNS and storage are undone
    (iid,) = _completes(h, "provision-tenant", TENANT, "corpus-compensate")
    return [iid, compensation_instance_id(iid)]


def _parallel_group(h: PatternHarness) -> list[str]:
    (iid,) = _completes(h, "onboard-tenant", {**TENANT, "tenant_id": "corpus-t2"}, "corpus-parallel")
    return [iid, *sorted(i for i in h.host.instance_ids() if i.startswith(step_instance_id(iid, "")))]


def _resume_after_dead_scheduler(h: PatternHarness) -> list[str]:
    """The scheduler dies while a step is out; the agent answers late; the watchdog resumes it."""
    held = h.hold("register_dns")
    iid = h.start_workflow("provision-tenant", TENANT, instance_id="corpus-resumed")
    h.run_until(lambda: len(h.held(held)) == 1)
    h.host.terminate(iid, "killed mid-step")
    h.release(held)
    h.run_until(lambda: h.settled(iid))
    return [iid]


def _duplicate_and_late_results(h: PatternHarness) -> list[str]:
    """A reply sent twice (two result events for one attempt), and a reply held past its step's
    deadline (the scheduler asks the ledger instead and goes on; the reply arrives while the next
    step is out)."""
    h.duplicate_send("create_storage", queue="results")
    late = h.hold("register_dns", queue="results", times=1)
    iid = h.start_workflow("provision-tenant", TENANT, instance_id="corpus-duplicates")
    h.run_until(lambda: h.steps(iid)["send_welcome"].status.value != "Pending")
    h.release(late)
    h.run_until_complete(iid)
    return [iid]


def _timer_and_event_in_one_episode(h: PatternHarness) -> list[str]:
    """A step's reply and its deadline arrive together: the reply is held until the deadline timer
    is due, and both reach the scheduler in one episode (an EventRaised and a TimerFired among its
    new events), as the backend batches whatever is waiting for an instance. The first in the batch
    (the reply) wins the race; the timer that fired with it is the loser."""
    late = h.hold("register_dns", queue="results", times=1)
    iid = h.start_workflow("provision-tenant", TENANT, instance_id="corpus-timer-and-event")
    h.run_until(lambda: len(h.held(late)) == 1)
    deadline = h.steps(iid)["register_dns"].deadline
    with h.host.batched(iid):
        h.release(late)
        h.host.advance(max(deadline - h.host.clock.now(), timedelta(0)))
    h.run_until_complete(iid)
    return [iid]


def _late_result_after_retry(h: PatternHarness) -> list[str]:
    """Attempt 1's result event is raised while attempt 2 is out: the scheduler, which never got it
    in time, asked the ledger at the deadline, retried, and must now ignore it (event names carry
    the attempt). The result handler confirmed attempt 1's failure against the ledger and raised it
    late, as a handler whose ``raise_event`` call is delayed (a slow call to the extension) does."""
    name = result_event_name("register_dns", 1)
    faults.inject("dns.register", faults.Fail(times=1))
    second = h.hold("register_dns", attempt=2)
    client, deferred = h.host.client, []
    on_time = client.raise_event

    async def delayed(instance_id, event_name, event_data=None):
        if event_name == name:  # the handler's call (and the watchdog's nudge) is still under way
            deferred.append((instance_id, event_name, event_data))
            return None
        return await on_time(instance_id, event_name, event_data)

    with mock.patch.object(client, "raise_event", delayed):
        iid = h.start_workflow("provision-tenant", TENANT, instance_id="corpus-late-result")
        h.run_until(lambda: len(h.held(second)) == 1)
    for instance_id, event_name, event_data in deferred[:1]:
        h.host.raise_event(instance_id, event_name, event_data)
    h.run_until(lambda: any(e["EventType"] == 15 and e.get("Name") == name for e in h.host.history(iid)))
    h.release(second)
    h.run_until_complete(iid)
    return [iid]


def _bookkeeping_retry(h: PatternHarness) -> list[str]:
    """A scheduler activity fails once (a storage error in dispatch_step's ledger write): the
    orchestration's retry policy runs it again after its retry timer."""
    from azure.core.exceptions import ServiceResponseError

    from workflow_core.ledger import StepStatus

    real, raised = h.ledger.transition, []

    def transition(record, to, **kwargs):
        if record.step_id == "register_dns" and to is StepStatus.DISPATCHED and not raised:
            raised.append(record.step_id)
            raise ServiceResponseError("Connection aborted: the storage account timed out")
        return real(record, to, **kwargs)

    with mock.patch.object(h.ledger, "transition", transition):
        return _completes(h, "provision-tenant", TENANT, "corpus-activity-retry")


SCENARIOS: dict[str, Callable[[PatternHarness], list[str]]] = {
    "succeed": lambda h: _completes(h, "provision-tenant", TENANT, "corpus-succeed"),
    "retry-then-compensate": _retry_then_compensate,
    "parallel-group": _parallel_group,
    "continue-as-new": lambda h: _completes(h, "corpus-chain", {"tenant_id": "corpus-t3"}, "corpus-chain"),
    "resume-after-dead-scheduler": _resume_after_dead_scheduler,
    "duplicate-and-late-results": _duplicate_and_late_results,
    "bookkeeping-retry": _bookkeeping_retry,
    "timer-and-event-in-one-episode": _timer_and_event_in_one_episode,
    "late-result-after-retry": _late_result_after_retry,
}


def record_scenario(name: str, azurite: Any = None) -> dict[str, Any]:
    """Run one scenario on a fresh harness; its replay file's content."""
    faults.clear()
    try:
        # The clock flows with real time between the skips to timers, so the timestamps progress
        # from episode to episode as the extension's do.
        with PatternHarness(azurite, clock=FlowingClock(), extra_workflows={"corpus-chain": CHAIN}) as h:
            ids = SCENARIOS[name](h)
            recordings = []
            for iid in ids:
                generations = h.host.histories(iid)  # every generation of a continue-as-new run
                for number, history in enumerate(generations, 1):
                    started = next(e for e in history if e["EventType"] == 0)
                    recording = {"orchestrator": started["Name"], "instanceId": iid, "history": history}
                    if len(generations) > 1:
                        recording["generation"] = number
                    recordings.append(recording)
    finally:
        faults.clear()
    return {"scenario": name, "recordings": _without_checkout_paths(recordings)}


def _without_checkout_paths(recordings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recordings with this checkout's location cut out of every string (the Python stacks in
    failure Details name the files): a committed recording does not depend on where it was made.
    Cut everywhere alike, so an error text the orchestrator carried into a later input still
    matches what it replays from."""
    root = f"{Path(__file__).resolve().parents[1]}/"
    return json.loads(json.dumps(recordings).replace(root, ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, nargs="?", default=Path("tests/replay_corpus"))
    args = parser.parse_args(argv)
    args.directory.mkdir(parents=True, exist_ok=True)
    for name in SCENARIOS:
        path = args.directory / f"{name}.json"
        path.write_text(json.dumps(record_scenario(name), indent=1, sort_keys=True) + "\n")
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
