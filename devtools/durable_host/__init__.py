"""An in-process durable test host: Durable Functions orchestrations without the Functions host.

A development tool (never deployed): it runs real orchestrator functions through the real
``azure-functions-durable`` replay, with the contract the Durable Functions extension uses
(context JSON with the history in, actions JSON out), executes activities, timers, external
events, sub-orchestrations and continue-as-new, and skips time on a virtual clock.
See docs/durable-test-host.md.
"""

from .client import DurableTestClient
from .clock import DEFAULT_EPOCH, FlowingClock, RealClock, VirtualClock
from .host import (
    DurableTestHost,
    InstanceCompletedError,
    InstanceNotFoundError,
    OrchestrationAlreadyExistsError,
)

__all__ = [
    "DEFAULT_EPOCH",
    "DurableTestClient",
    "DurableTestHost",
    "FlowingClock",
    "InstanceCompletedError",
    "InstanceNotFoundError",
    "OrchestrationAlreadyExistsError",
    "RealClock",
    "VirtualClock",
]
