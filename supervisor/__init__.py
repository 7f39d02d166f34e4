"""Supervisor: the timer-triggered watchdog that recovers overdue steps, and the operator intents.

``function_app.py`` registers :data:`blueprint` (a ``df.Blueprint`` holding the watchdog timer
function). :func:`run_tick` is the watchdog's whole logic as a plain coroutine; ``supervisor.operator``
holds what the operator CLI (``sas``, operator_cli/) does.
"""

from supervisor.watchdog import (
    Action,
    Decision,
    TickReport,
    blueprint,
    run_tick,
    runtime_status_name,
)

__all__ = ["Action", "Decision", "TickReport", "blueprint", "run_tick", "runtime_status_name"]
