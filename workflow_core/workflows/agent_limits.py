"""Per-agent limits declared under ``agents:`` in ``workflows/pools.yaml`` (docs/agent-limits.md). An
agent named nowhere there is unlimited: dispatch reads no limit row for it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CircuitSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # consecutive retryable failures, across instances, that open the circuit
    failure_threshold: int = Field(default=5, ge=1, le=10_000)
    open_seconds: float = Field(default=60, gt=0, le=86_400)


class AgentLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_in_flight: int | None = Field(default=None, ge=1, le=1_000)
    circuit: CircuitSettings | None = None
    wait_poll_seconds: float = Field(default=5, ge=0.1, le=3_600)

    @property
    def active(self) -> bool:
        return self.max_in_flight is not None or self.circuit is not None
