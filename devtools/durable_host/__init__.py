"""An in-process durable test host: Durable Functions orchestrations without the Functions host.

A development tool (never deployed): it runs real orchestrator functions through the real
``azure-functions-durable`` replay, with the contract the Durable Functions extension uses
(context JSON with the history in, actions JSON out), executes activities, timers, external
events, sub-orchestrations and continue-as-new, and skips time on a virtual clock.

    from devtools.durable_host import DurableTestHost

    with DurableTestHost(app) as host:              # a df.DFApp, a Blueprint, or {name: callable}
        iid = host.start_new("process_order", input={"order": 42})
        status = host.run_until_complete(iid)
        assert status.runtime_status.value == "Completed"

See docs/durable-test-host.md.
"""

from .aio import AsyncRunner, run_async
from .client import DurableTestClient, ExtensionHttpApi, binding_context
from .clock import DEFAULT_EPOCH, FlowingClock, RealClock, VirtualClock
from .host import (
    RUNNING_STATUSES,
    TERMINAL_STATUSES,
    DurableTestHost,
    InstanceCompletedError,
    InstanceNotFoundError,
    OrchestrationAlreadyExistsError,
)
from .registry import ActivityFunction, FunctionTable, OrchestratorFunction

__all__ = [
    "DEFAULT_EPOCH",
    "RUNNING_STATUSES",
    "TERMINAL_STATUSES",
    "ActivityFunction",
    "AsyncRunner",
    "DurableTestClient",
    "DurableTestHost",
    "ExtensionHttpApi",
    "FlowingClock",
    "FunctionTable",
    "InstanceCompletedError",
    "InstanceNotFoundError",
    "OrchestrationAlreadyExistsError",
    "OrchestratorFunction",
    "RealClock",
    "VirtualClock",
    "binding_context",
    "run_async",
]
