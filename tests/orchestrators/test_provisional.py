"""Which steps the workflow orchestrator takes unread: only those whose next write carries the basis."""

from __future__ import annotations

import pytest

from orchestrators.provisional import basis_refused, next_write_proves
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
