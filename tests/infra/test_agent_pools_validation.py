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
    ],
)
def test_each_bad_input_names_its_rule(files, pools, rule):
    assert set(_problems(files, pools)) == {rule}
