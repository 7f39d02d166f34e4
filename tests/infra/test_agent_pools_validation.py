"""main.bicep validates ``agentPools`` before it creates anything (modules/agent-pools-validation.bicep):
each rule is a list main.bicep computes from the input, passed to a parameter that must be empty."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra import pool_checks as pc

VALIDATION = "modules/agent-pools-validation.bicep"


def _problems(files, pools: list[dict[str, Any]]) -> dict[str, list[str]]:
    ev = pc.PoolEvaluator(files, pools)
    declared = files[VALIDATION].section("parameters")
    result = {name: ev.module_param(VALIDATION, name) for name in declared}
    return {name: value for name, value in result.items() if value}


def _asking(*queues: str) -> list[dict[str, Any]]:
    return [{"name": "mail", "hosting": "external", "messageOnly": True, "answerQueues": list(queues)}]


def test_every_rule_is_a_parameter_that_must_be_empty(files):
    declared = files[VALIDATION].section("parameters")
    assert declared
    for name, param in declared.items():
        assert {"type": "max_length", "argument": 0} in param["decorators"], name


def test_valid_pools_pass(files):
    pools = [
        {"name": "default", "hosting": "app"},
        {"name": "provisioning", "hosting": "external"},
        {"name": "dns-1", "hosting": "containerApp", "image": "reg.example/a:1", "maxReplicas": 3},
        {"name": "mail", "hosting": "external", "messageOnly": True},
        {
            "name": "dns",
            "hosting": "external",
            "messageOnly": True,
            "answerQueues": ["agent-results-answers-dns1", "agent-results-answers-dns-2"],
        },
    ]
    assert _problems(files, pools) == {}
    assert _problems(files, pc.DEFAULT_POOLS) == {}


@pytest.mark.parametrize(
    ("pools", "rule"),
    [
        ([{"name": "x", "hosting": "aks"}], "poolsWithAnUnknownHosting"),
        ([{"name": "x"}], "poolsWithAnUnknownHosting"),
        ([{"name": "DNS", "hosting": "external"}], "poolsWithABadName"),
        ([{"name": "a_b", "hosting": "external"}], "poolsWithABadName"),
        ([{"name": "-a", "hosting": "external"}], "poolsWithABadName"),
        ([{"name": "a--b", "hosting": "external"}], "poolsWithABadName"),
        ([{"name": "a" * 21, "hosting": "external"}], "poolsWithABadName"),
        ([{"name": "", "hosting": "external"}], "poolsWithABadName"),
        ([{"name": "a b", "hosting": "external"}], "poolsWithABadName"),
        ([{"name": "a", "hosting": "external"}, {"name": "a", "hosting": "app"}], "poolNamesListedTwice"),
        ([{"name": "a", "hosting": "containerApp"}], "containerAppPoolsWithoutImageOrReplicas"),
        (
            [{"name": "a", "hosting": "containerApp", "image": "i", "maxReplicas": 0}],
            "containerAppPoolsWithoutImageOrReplicas",
        ),
        (
            [{"name": "a", "hosting": "containerApp", "image": "i", "messageOnly": True}],
            "containerAppPoolsMessageOnly",
        ),
        (
            [{"name": "a", "hosting": "external", "answerQueues": ["agent-results-answers-a1"]}],
            "answerQueuesOutsideAnExternalMessageOnlyPool",
        ),
        (
            [
                {
                    "name": "a",
                    "hosting": "app",
                    "messageOnly": True,
                    "answerQueues": ["agent-results-answers-a1"],
                }
            ],
            "answerQueuesOutsideAnExternalMessageOnlyPool",
        ),
        (_asking("agent-work"), "answerQueuesWithABadName"),  # the app would never answer there
        (_asking("agent-results-answers-"), "answerQueuesWithABadName"),
        (_asking("agent-results-answers-A1"), "answerQueuesWithABadName"),
        (_asking("agent-results-answers-a--1"), "answerQueuesWithABadName"),
        (_asking("agent-results-answers-" + "a" * 42), "answerQueuesWithABadName"),  # 64 characters
        (_asking("agent-results-answers-a1", "agent-results-answers-a1"), "answerQueuesListedTwice"),
    ],
)
def test_each_bad_input_names_its_rule(files, pools, rule):
    assert set(_problems(files, pools)) == {rule}
