"""The Function App: composes the role blueprints (docs/architecture.md). No logic lives here."""

import azure.durable_functions as df
import azure.functions as func

import activities
import api
import orchestrators
import supervisor
from workflow_core import ledger_gauges
from workflow_core.telemetry_instruments import configure_telemetry

configure_telemetry()  # from the environment: the other settings may not be valid yet
# The in-flight and overdue gauges read the ledger lazily, at export time (nothing when not exported).
ledger_gauges.register()
# Fail the start-up, naming the file and field, if a workflow definition is invalid or uses an
# agent that has no handler: better a failed deployment than a failed first step.
activities.check_shipped_workflows()
# A feature whose settings are invalid is off, named in the log now and in /api/diagnostics, never the app.
supervisor.report_feature_errors()

app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
for blueprint in (orchestrators.blueprint, activities.blueprint, supervisor.blueprint, api.blueprint):
    app.register_blueprint(blueprint)
app.register_blueprint(supervisor.maintenance_blueprint)  # canary, retention and bulk operations
