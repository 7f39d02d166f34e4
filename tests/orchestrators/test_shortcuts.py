"""``orchestrators/shortcuts.py``: which steps the scheduler takes unread (only those whose next write
carries the basis), which versions its writes assume, and what the settle carries."""

from __future__ import annotations

import pytest

from orchestrators.attempts import Provisional, StepRun
from orchestrators.shortcuts import LedgerShortcuts, Taken, basis_refused, expected_rows, next_write_proves
from orchestrators.state import Progress, WorkflowStart
from tests.orchestrators.world import pinned
from workflow_core.workflows import parse_workflow


def chain(every: int):
    """s1, s2, a parallel group (g1, g2), s3, s4."""
    return parse_workflow(
        f"""
name: chain
history_checkpoint_every: {every}
steps:
  - {{id: s1, agent: test.echo, deadline_seconds: 60}}
  - {{id: s2, agent: test.echo, deadline_seconds: 60}}
  - parallel:
      - {{id: g1, agent: test.echo, deadline_seconds: 60}}
      - {{id: g2, agent: test.echo, deadline_seconds: 60}}
  - {{id: s3, agent: test.echo, deadline_seconds: 60}}
  - {{id: s4, agent: test.echo, deadline_seconds: 60}}
""",
        source="chain.yaml",
    )


def takes_unread(every: int) -> dict[str, bool]:
    """Each single step's answer, walking the stages as the orchestrator does from the start."""
    definition = chain(every)
    stages, done, answers = definition.stages, 0, {}
    for index, stage in enumerate(stages):
        if done >= every:  # the orchestrator checkpoints here and starts a new generation
            done = 0
        if len(stage) == 1:
            steps_left = len(definition.steps) - sum(len(s) for s in stages[:index])
            answers[stage[0].id] = next_write_proves(definition, stages, index, done, steps_left)
        done += len(stage)
    return answers


@pytest.mark.parametrize(
    ("every", "expected"),
    [
        # s2 comes before the group, s4 before the settle: s4 is always proven by the settle
        (100, {"s1": True, "s2": False, "s3": True, "s4": True}),
        # a checkpoint after every step: only the last one, before the settle
        (1, {"s1": False, "s2": False, "s3": False, "s4": True}),
        # a checkpoint after s1+s2 and after g1+g2 (a group is never split), then s3, s4
        (2, {"s1": True, "s2": False, "s3": True, "s4": True}),
    ],
)
def test_a_success_is_taken_unread_only_when_the_next_write_proves_it(every, expected):
    assert takes_unread(every) == expected


def test_only_a_settle_answer_saying_so_is_a_refusal():
    assert basis_refused({"outcome": "basis-refused", "changed": False})
    assert not basis_refused({"status": "Succeeded", "changed": True})
    assert not basis_refused(None)


class Context:
    """What the shortcuts ask of an orchestration context: its id, and activity calls (recorded)."""

    instance_id = "wf-1"

    def __init__(self):
        self.calls = []

    def call_activity_with_retry(self, name, options, payload):
        self.calls.append((name, payload))
        return ("task", name)


def status(*args, **kwargs):
    return None


status.step = None
status.progress = None

START = WorkflowStart.model_validate(
    pinned(chain(100), rows={"instance": {"etag": "i1"}, "steps": {"s1": "W/1"}})
)


def settle_input(shortcuts):
    run = shortcuts.settle(Progress())
    next(run)  # the settle activity's task
    with pytest.raises(StopIteration):
        run.send({"outcome": "settled"})
    return shortcuts.context.calls[-1]


def test_the_settle_writes_against_the_known_snapshot_and_carries_the_taken_basis():
    shortcuts = LedgerShortcuts(Context(), chain(100), START, status)
    assert settle_input(shortcuts) == (
        "settle_instance",
        {"instance_id": "wf-1", "outcome": "succeeded", "expected": {"etag": "i1"}},
    )
    shortcuts.forget_instance()
    run = StepRun("work", "wf-1", "chain", "s4", 60, chain(100).steps[-1].retry)
    provisional = Provisional(attempt=1, tries=1, deadline="2030-01-01T00:00:00Z", basis={"step_id": "s4"})
    shortcuts.taken = Taken(run, provisional, Progress())
    _, payload = settle_input(shortcuts)
    assert payload == {"instance_id": "wf-1", "outcome": "succeeded", "basis": {"step_id": "s4"}}


def test_nothing_taken_means_nothing_to_confirm():
    shortcuts = LedgerShortcuts(Context(), chain(100), START, status)
    run = shortcuts.confirm(Progress(position=1, completed=["s1"], outputs={"s1": 1}))
    with pytest.raises(StopIteration) as done:
        next(run)
    assert done.value.value == (Progress(position=1, completed=["s1"], outputs={"s1": 1}), [])
    assert shortcuts.context.calls == []


def test_a_first_dispatch_assumes_the_starters_versions_only_when_both_are_known():
    definition = chain(100)
    s1, s2 = definition.steps[0], definition.steps[1]
    rows = expected_rows(definition, START, s1, {"etag": "i1"})
    assert rows["step_etag"] == "W/1" and rows["instance"] == {"etag": "i1"} and rows["sequence"] == 0
    assert expected_rows(definition, START, s2, {"etag": "i1"}) is None  # no starter ETag for s2
    assert expected_rows(definition, START, s1, None) is None  # the snapshot was forgotten
    assert (
        expected_rows(definition, WorkflowStart.model_validate(pinned(definition)), s1, {"etag": "i1"})
        is None
    )
