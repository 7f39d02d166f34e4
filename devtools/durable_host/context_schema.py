"""The schema part of the orchestration context JSON the Durable extension sends the Python worker.

Which schema versions it announces and the two timer durations that come with V3, as the extension
writes them; shared by the in-process host's episodes and the replay check, which must hand the
orchestrator the same context shape.
"""

from __future__ import annotations

#: Azure Storage provider defaults the extension passes for V3's long timers
#: (``AzureStorageDurabilityProvider``: ``MaximumDelayTime`` 6 days, ``LongRunningTimerIntervalLength``
#: 3 days), as .NET ``TimeSpan`` strings, which is how Newtonsoft writes them.
MAXIMUM_SHORT_TIMER_DURATION = "6.00:00:00"
LONG_RUNNING_TIMER_INTERVAL_DURATION = "3.00:00:00"


def schema_fields(schema_version: int) -> dict:
    """The schema part of the context JSON.

    The extension (``OrchestrationTriggerAttributeBindingProvider.OrchestrationContextToString``)
    always sends ``upperSchemaVersion: 1`` (V2, for SDKs 1.1.0-1.1.3 that knew no more) and
    ``upperSchemaVersionNew: 2`` (V3) with the two timer durations; azure-functions-durable 1.7 takes
    the larger of the two versions. The older schemas are sent the way an older extension did.
    """
    if schema_version < 2:
        return {"upperSchemaVersion": schema_version}
    return {
        "upperSchemaVersion": 1,
        "upperSchemaVersionNew": 2,
        "longRunningTimerIntervalDuration": LONG_RUNNING_TIMER_INTERVAL_DURATION,
        "maximumShortTimerDuration": MAXIMUM_SHORT_TIMER_DURATION,
        "defaultHttpAsyncRequestSleepTimeMillseconds": 30000,
    }
