"""The recovery canary's core: its scenarios (the fault each injects, the recovery it expects, the
time that recovery may take) and the verdict a finished run earns from its audit trail.

Roles build on it: the canary agent (``activities/worker/handlers/canary.py``) reads the fault from
its own input; the supervisor's canary (``supervisor/canary``, run by the maintenance timer) starts
runs and records verdicts.
"""

from workflow_core.canary.scenarios import (
    CANARY_AGENTS,
    CANARY_ECHO_WORKFLOW,
    CANARY_WORKFLOW,
    CANARY_WORKFLOWS,
    ECHO_AGENT,
    ECHO_FAULTS,
    SCENARIOS,
    SERVED_OUTSIDE_THE_APP,
    Scenario,
    canary_pool,
    canary_pools,
    canary_workflow_of,
    echo_input,
    expected_recovery_seconds,
    scenario_named,
)
from workflow_core.canary.verdicts import Observation, judge
