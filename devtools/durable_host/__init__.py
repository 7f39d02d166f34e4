"""An in-process durable test host: Durable Functions orchestrations without the Functions host,
through the real ``azure-functions-durable`` replay (docs/durable-test-host.md). Never deployed."""

from .client import DurableTestClient
from .clock import DEFAULT_EPOCH, FlowingClock, RealClock, VirtualClock
from .host import DurableTestHost, InstanceCompletedError, OrchestrationAlreadyExistsError
