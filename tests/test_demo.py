"""The newcomer's demo (``./scripts/demo``) runs every shipped workflow and shows the recovery."""

from __future__ import annotations

import io

import pytest

from devtools import demo
from workflow_core.workflows import load_workflows


def run_demo(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = demo.main(list(argv), out=out)
    return code, out.getvalue()


@pytest.mark.parametrize("workflow", sorted(load_workflows()))
def test_every_shipped_workflow_has_a_sample_input_and_succeeds(workflow):
    code, text = run_demo(workflow)
    assert code == 0, text
    assert "FINISHED: succeeded" in text
    assert "0 made twice" in text


def test_a_stalled_step_is_detected_and_retried():
    code, text = run_demo("provision-tenant", "--stall", "register_dns")
    assert code == 0, text
    assert "OVERDUE" in text and "RETRY scheduled: attempt 2" in text
    assert "SUCCEEDED on attempt 2" in text and "FINISHED: succeeded" in text


def test_a_failing_step_is_compensated_in_reverse_order():
    code, text = run_demo("order-fulfilment", "--fail", "ship_order")
    assert code == 0, text
    undo = [line.split()[1] for line in text.splitlines() if "COMPENSATING: undo" in line]
    assert undo == ["ship_order", "charge_payment", "reserve_stock"]
    assert "FINISHED: compensated" in text


def test_unknown_step_is_a_clear_error(capsys):
    code, _ = run_demo("provision-tenant", "--fail", "nope")
    assert code == 2
    assert "has no step 'nope'" in capsys.readouterr().err


def test_a_scheduler_killed_between_steps_is_resumed_and_each_step_runs_once():
    code, text = run_demo("provision-tenant", "--kill-scheduler", "create_storage")
    assert code == 0, text
    assert "ORCHESTRATION TERMINATED (create_storage is done, nothing is in flight)" in text
    assert "watchdog: resume instance" in text
    assert "FINISHED: Succeeded after 1 resume(s) by the watchdog" in text
    assert "create_storage x1, register_dns x1, send_welcome x1" in text
    assert "0 made twice" in text


def test_a_scheduler_terminated_mid_step_is_resumed_by_the_watchdog():
    code, text = run_demo("provision-tenant", "--terminate", "register_dns")
    assert code == 0, text
    assert "watchdog decisions: resume_instance" in text
    assert "FINISHED: Succeeded after 1 resume(s)" in text and "0 made twice" in text
