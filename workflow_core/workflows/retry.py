"""Retry policy of a step or compensator: how many attempts, and how long to wait between them.

``df.RetryOptions`` has only a first interval and an attempt count, so backoff, cap and jitter are
computed here and waited out with durable timers; the jitter is a hash of a seed, not a random
number, so every replay computes the same delay.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_INTERVAL_SECONDS = 24 * 3600


class RetryPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=3, ge=1, le=100, description="attempts in total, the first included")
    initial_interval_seconds: float = Field(default=5.0, gt=0, le=MAX_INTERVAL_SECONDS)
    backoff_coefficient: float = Field(default=2.0, ge=1, le=100)
    max_interval_seconds: float = Field(default=300.0, gt=0, le=MAX_INTERVAL_SECONDS)
    jitter: float = Field(default=0.1, ge=0, le=1, description="fraction of the delay that may be shaved off")

    @model_validator(mode="after")
    def _interval_order(self) -> RetryPolicy:
        if self.max_interval_seconds < self.initial_interval_seconds:
            raise ValueError(
                f"max_interval_seconds ({self.max_interval_seconds:g}) must not be smaller than "
                f"initial_interval_seconds ({self.initial_interval_seconds:g})"
            )
        return self

    def base_delay_seconds(self, attempt: int) -> float:
        """Delay after attempt ``attempt`` (1-based) failed, before jitter."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        try:
            grown = self.initial_interval_seconds * self.backoff_coefficient ** (attempt - 1)
        except OverflowError:  # huge attempt numbers: the cap applies long before
            return self.max_interval_seconds
        return min(self.max_interval_seconds, grown)

    def delay_seconds(self, attempt: int, seed: str) -> float:
        """The jitter only shortens the delay, so the cap holds and instances that failed together
        spread out instead of retrying in lockstep."""
        base = self.base_delay_seconds(attempt)
        return base * (1.0 - self.jitter * _unit_interval(f"{seed}:{attempt}"))


def _unit_interval(text: str) -> float:
    """In [0, 1); stable across processes, unlike ``hash()``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
