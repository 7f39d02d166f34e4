"""Supervisor: the timer-triggered watchdog that recovers overdue steps, the operator intents, and
the maintenance timer (the recovery canary, retention, bulk operations); ``function_app.py`` registers
:data:`blueprint` (the watchdog) and :data:`maintenance_blueprint`.
"""

from supervisor.maintenance import maintenance_blueprint, report_feature_errors
from supervisor.watchdog import blueprint, run_tick
