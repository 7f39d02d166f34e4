"""The Function App: composes the role blueprints. No logic lives here.

Scheduler  -> orchestrators/  (Durable Functions orchestrators)
Agents     -> activities/     (dispatch activities, Service Bus / queue workers, result handler)
Supervisor -> supervisor/     (timer-triggered watchdog)
HTTP API   -> api/            (starter, status, ledger views, health)
"""

import azure.durable_functions as df
import azure.functions as func

import activities
import api
import orchestrators
import supervisor
from workflow_core.telemetry import configure_telemetry_from_env

configure_telemetry_from_env()

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
for blueprint in (orchestrators.blueprint, activities.blueprint, supervisor.blueprint, api.blueprint):
    app.register_blueprint(blueprint)
