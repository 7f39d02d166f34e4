"""Each broken agent of ``broken_agent.py`` fails the conformance kit with a line naming its fault, in
under 60 s; the same agent without a fault passes every check."""

from __future__ import annotations

import io
import json
import re
import sys
import time

import pytest

from devtools.conformance import CHECKS
from operator_cli.cli import main as sas
from tests.helpers.fault_matrix import storage_queue_only

NAMED = {
    "wrong-token": r"wrong reply token",
    "stale-token": r"stale reply token",
    "contradict": r"contradicting replies",
    "no-reply": r"no reply within the step's deadline",
    "endless-heartbeat": r"heartbeats without an end",
    "crash": r"crash",
    "no-idempotency": r"effect without idempotency",
    "no-effect": r"success without effect",
    "ignore-expiry": r"ignoring expiry",
}


def kit(azurite, tmp_path, fault: str, *options: str) -> tuple[int, dict]:
    ports = f"{azurite.blob_port},{azurite.queue_port},{azurite.table_port}"
    agent = [sys.executable, "-m", "tests.agent_runner.broken_agent", "--fault", fault]
    out, err = io.StringIO(), io.StringIO()
    timeline = tmp_path / "timeline.txt"
    argv = ["conformance", "--azurite-ports", ports, "--timeline", str(timeline), "-o", "json", *options]
    code = sas([*argv, "--", *agent], stdout=out, stderr=err)
    return code, json.loads(out.getvalue() or "{}")


@storage_queue_only
@pytest.mark.parametrize("fault", sorted(NAMED))
def test_each_fault_is_named_in_one_line_within_60_seconds(azurite, tmp_path, fault):
    began = time.monotonic()
    code, doc = kit(azurite, tmp_path, fault)
    assert time.monotonic() - began < 60
    assert code == 5, doc
    failed = [c["detail"] for c in doc["checks"] if not c["passed"]]
    assert failed and re.match(NAMED[fault], failed[0]), failed
    assert all("\n" not in line for line in failed)
    assert (tmp_path / "timeline.txt").read_text().startswith("# ")  # the ledger's story, in the file


@storage_queue_only
def test_the_agent_without_a_fault_passes_and_one_check_runs_alone(azurite, tmp_path):
    code, doc = kit(azurite, tmp_path, "none")
    assert code == 0 and doc["passed"] == len(CHECKS), doc
    code, doc = kit(azurite, tmp_path, "none", "--check", "expiry")
    assert code == 0 and [c["name"] for c in doc["checks"]] == ["expired work makes no effect"], doc
