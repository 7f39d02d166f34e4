"""Shared core of the Scheduler Agent Supervisor app: settings, the step ledger and the transport.

The role folders (``orchestrators/``, ``activities/``, ``supervisor/``) hold Azure Functions
bindings; everything they share, and everything that must be testable without the Functions
host, lives here.
"""

import logging

# Every log record the app writes reaches Application Insights: the Python worker attaches its exporter
# to the one logger PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME names, "sas", not the root, which would also
# export every Azure SDK request (docs/platform.md row 4). The modules of these packages log through
# ``logging.getLogger(__name__)``: their package loggers are made children of "sas", so each record passes
# the worker's handler on its way to the root, whatever the import order.
APP_LOGGER = "sas"
APP_PACKAGES = (
    "activities",
    "agent_runner",
    "api",
    "function_app",
    "orchestrators",
    "supervisor",
    "workflow_core",
)
for _package in APP_PACKAGES:
    logging.getLogger(_package).parent = logging.getLogger(APP_LOGGER)
