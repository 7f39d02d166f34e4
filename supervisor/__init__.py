"""Supervisor: the timer-triggered watchdog that recovers overdue steps, and the operator intents.

``function_app.py`` registers :data:`blueprint` (the watchdog timer function); :func:`run_tick` is
the watchdog's whole logic as a plain coroutine.
"""

from supervisor.maintenance import maintenance_blueprint
from supervisor.watchdog import blueprint, run_tick
