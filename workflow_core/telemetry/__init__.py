"""Telemetry of the pattern: step metrics, recoveries, compensations, dead letters and custom events.

One module per concern: ``instruments`` (the names, the instruments and the providers they report to),
``export`` (to Application Insights), ``recoveries`` (the four signals of a recovery action),
``step_metrics`` (the pattern's normal path) and ``events`` (custom events). This package names what
the roles call; tests and tools import the rest from its module.
"""

from workflow_core.telemetry.events import record_instance_stalled as record_instance_stalled
from workflow_core.telemetry.export import configure_telemetry as configure_telemetry
from workflow_core.telemetry.instruments import OUTCOME_ERROR as OUTCOME_ERROR
from workflow_core.telemetry.instruments import OUTCOME_OK as OUTCOME_OK
from workflow_core.telemetry.instruments import STEP_FAILED as STEP_FAILED
from workflow_core.telemetry.instruments import STEP_SUCCEEDED as STEP_SUCCEEDED
from workflow_core.telemetry.instruments import STEP_TIMED_OUT as STEP_TIMED_OUT
from workflow_core.telemetry.instruments import register_ledger_gauges as register_ledger_gauges
from workflow_core.telemetry.instruments import tracer as tracer
from workflow_core.telemetry.recoveries import record_compensation_failed as record_compensation_failed
from workflow_core.telemetry.recoveries import record_recovery as record_recovery
from workflow_core.telemetry.step_metrics import record_compensation_finished as record_compensation_finished
from workflow_core.telemetry.step_metrics import record_dead_letter as record_dead_letter
from workflow_core.telemetry.step_metrics import record_dispatch_started as record_dispatch_started
from workflow_core.telemetry.step_metrics import record_step_finished as record_step_finished
