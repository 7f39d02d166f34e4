"""What a canary tick reads, counted at the SDK on Azurite (docs/capacity.md, "Recovery canary"): the
listing (one query per canary workflow and a read of each listed run's record), then the audit trail
of each listed run whose verdict the process has not seen, once, shared by the verifier and the stale
count; a run seen judged is never read again. The tick before this design made 64 requests with one
pool and 25 judged runs (each trail read twice, the listing twice)."""

from __future__ import annotations

import json
from collections import Counter

from devtools.harness import PatternHarness
from supervisor.canary import ACTOR, VERDICT_ACTION
from supervisor.canary.runs import canary_tick
from tests.helpers.request_counter import RequestCounter
from workflow_core.runtime import Services
from workflow_core.settings import canary_settings

BEFORE = 64  # queries a tick with one pool and 25 judged runs, before one shared read


def test_a_tick_reads_each_run_once_and_a_judged_run_never_again(azurite):
    with PatternHarness(azurite) as h:
        for _ in range(25):
            iid = h.start_workflow("sas-canary", {"scenario": "retry"})
            verdict = {"instance_id": iid, "scenario": "retry", "pool": "default", "outcome": "passed"}
            reason = json.dumps({**verdict, "at": h.now().isoformat(), "cause": ""})
            h.ledger.note(iid, "*", actor=ACTOR, action=VERDICT_ACTION, reason=reason)
        with RequestCounter() as counter:
            counted = Services(h.services.settings)  # a process that has seen no verdict yet
            counted.ledger  # noqa: B018 - its tables made (not measured)
            off = canary_settings({})  # reads only: starting runs costs the runs' own requests
            with counter.measure() as first:
                h.host.run_async(canary_tick(counted, h.host.client, off, now=h.now()))
            with counter.measure() as later:
                h.host.run_async(canary_tick(counted, h.host.client, off, now=h.now()))
            counted.close()
    # two listing queries (sas-canary, sas-canary-echo) and a read of each listed run's record (ten: the
    # window of one pool), then each run's audit trail once
    first_ops = Counter(f"{r.service} {r.op}" for r in first)
    assert first_ops == {"table query": 2 + 10, "table read": 10}, first_ops
    later_ops = Counter(f"{r.service} {r.op}" for r in later)
    assert later_ops == {"table query": 2, "table read": 10}, later_ops  # the judged runs: listing alone
    assert len(first) == 22 <= BEFORE // 2 and len(later) == 12
