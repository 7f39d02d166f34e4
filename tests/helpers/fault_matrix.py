"""The fault matrix's bookkeeping (tests/faults): :func:`verify` asserts the pattern's two promises for a
test's workflows (nothing lost, nothing done twice) and records its row of the summary table
(:func:`print_table`), which reaches tests/conftest.py on the test's report and is printed at the end
of the session."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from devtools.harness import PatternHarness

# On Service Bus (SERVICEBUS_CONNECTION_STRING set) the broker's duplicate detection drops copies and
# the queue's LockDuration, not the receiver, decides when an unsettled or held message comes back.
storage_queue_only = pytest.mark.skipif(
    bool(os.environ.get("SERVICEBUS_CONNECTION_STRING", "").strip()),
    reason="relies on Storage Queue delivery: duplicates delivered, per-receive locks (holds, kills)",
)

# CompensationFailed is settled as far as automation goes: it sits in the operators' inbox.
SETTLED = frozenset({"Succeeded", "Compensated", "Cancelled", "Skipped", "CompensationFailed"})


@dataclass
class Row:
    fault: str
    injected: str
    steps_lost: int | str
    double_effects: int | str
    outcome: str
    transport: str = ""


ROWS: list[Row] = []
CURRENT = {"recorded": False}


def outcome_of(h: PatternHarness, instance_id: str) -> str:
    """The workflow's final word: its output status, or, when it was terminated, its compensation's."""
    status = h.host.get_status(instance_id)
    if status is None:
        return "unknown"
    runtime = status.runtime_status.value
    if runtime == "Terminated":
        compensation = h.host.get_status(f"{instance_id}:compensation")
        output = compensation.output if compensation else None
        return f"terminated, then {output['status'] if isinstance(output, dict) else 'no compensation'}"
    if runtime != "Completed":
        return runtime.lower()
    return status.output.get("status", "?") if isinstance(status.output, dict) else str(status.output)


def verify(h: PatternHarness, fault: str, injected: str, expected: dict[str, str]) -> None:
    """Record the summary row, then assert nothing was lost and nothing was done twice."""
    lost = {
        iid: {step: status for step, status in h.statuses(iid).items() if status not in SETTLED}
        for iid in expected
    }
    outcomes = {iid: outcome_of(h, iid) for iid in expected}
    doubles = h.double_effects(expected)
    shown = sorted(set(outcomes.values()))
    ROWS.append(
        Row(
            fault,
            injected,
            sum(len(v) for v in lost.values()),
            len(doubles),
            ", ".join(shown),
            h.transport_label.split(" (")[0],
        )
    )
    CURRENT["recorded"] = True
    assert {iid: steps for iid, steps in lost.items() if steps} == {}, "steps left unsettled"
    assert outcomes == expected
    assert doubles == {}, "a remote effect was made (or undone) more than once"


PROVISION_INPUT = {"admin_email": "ops@contoso.example", "region": "westeurope"}


def start_provisioning(h: PatternHarness, tenant: str = "contoso") -> str:
    return h.start_workflow("provision-tenant", {"tenant_id": tenant, **PROVISION_INPUT})


def print_table(terminalreporter, rows: list[tuple]) -> None:
    """The fault matrix's summary table, which tests/conftest.py prints from the tests' reports."""
    headers = ("fault", "injected", "steps lost", "double effects", "workflow outcome", "transport")
    table = [headers] + [tuple(str(cell) for cell in row) for row in rows]
    widths = [min(max(len(row[i]) for row in table), 60) for i in range(len(headers))]
    terminalreporter.section("fault matrix")
    for n, row in enumerate(table):
        cells = (cell[:60].ljust(w) for cell, w in zip(row, widths, strict=True))
        terminalreporter.write_line("  ".join(cells))
        if n == 0:
            terminalreporter.write_line("  ".join("-" * w for w in widths))
