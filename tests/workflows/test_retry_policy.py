"""RetryPolicy.delay_seconds: exponential, capped, jittered downwards, deterministic per seed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from workflow_core.workflows import RetryPolicy

policies = st.builds(
    lambda initial, extra, coefficient, jitter, attempts: RetryPolicy(
        max_attempts=attempts,
        initial_interval_seconds=initial,
        max_interval_seconds=initial + extra,
        backoff_coefficient=coefficient,
        jitter=jitter,
    ),
    initial=st.floats(min_value=0.001, max_value=3600),
    extra=st.floats(min_value=0, max_value=20000),
    coefficient=st.floats(min_value=1, max_value=100),
    jitter=st.floats(min_value=0, max_value=1),
    attempts=st.integers(min_value=1, max_value=100),
)
attempts = st.integers(min_value=1, max_value=10_000)
seeds = st.text(max_size=40)


@given(policies, attempts)
def test_base_delay_is_monotone_non_decreasing_and_capped(policy, attempt):
    assert policy.base_delay_seconds(attempt) <= policy.base_delay_seconds(attempt + 1)
    assert (
        policy.initial_interval_seconds * 0.999999
        <= policy.base_delay_seconds(attempt)
        <= policy.max_interval_seconds
    )


@given(policies, attempts, seeds)
def test_jitter_only_shortens_and_stays_within_its_fraction(policy, attempt, seed):
    base = policy.base_delay_seconds(attempt)
    delay = policy.delay_seconds(attempt, seed)
    assert base * (1 - policy.jitter) - 1e-9 <= delay <= base <= policy.max_interval_seconds


@given(policies, attempts, seeds)
def test_same_seed_same_delay(policy, attempt, seed):
    assert policy.delay_seconds(attempt, seed) == policy.delay_seconds(attempt, seed)


def test_known_values_without_jitter():
    policy = RetryPolicy(initial_interval_seconds=5, backoff_coefficient=2, max_interval_seconds=30, jitter=0)
    assert [policy.delay_seconds(n, "s") for n in range(1, 6)] == [5, 10, 20, 30, 30]


def test_different_seeds_spread_retries():
    policy = RetryPolicy(initial_interval_seconds=100, jitter=0.5, max_interval_seconds=100)
    delays = {policy.delay_seconds(1, f"instance-{n}") for n in range(50)}
    assert len(delays) == 50 and min(delays) >= 50 and max(delays) <= 100


def test_jitter_is_stable_across_processes():
    # sha256-based, not hash(): a replay in another worker process (another PYTHONHASHSEED) computes
    # the same delay. Pinned so a change of the jitter function is a visible, deliberate decision.
    policy = RetryPolicy(
        initial_interval_seconds=10, backoff_coefficient=2, max_interval_seconds=100, jitter=1
    )
    assert policy.delay_seconds(1, "inst-1:create_storage:work") == pytest.approx(3.62007024367468, rel=1e-12)


def test_attempt_must_be_positive():
    with pytest.raises(ValueError):
        RetryPolicy().delay_seconds(0, "s")


def test_huge_attempts_do_not_overflow():
    assert RetryPolicy(backoff_coefficient=100, max_interval_seconds=60).base_delay_seconds(10**6) == 60


def test_defaults_and_bounds():
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.backoff_coefficient) == (3, 2.0)
    with pytest.raises(ValidationError):
        RetryPolicy(max_attempts=0)
