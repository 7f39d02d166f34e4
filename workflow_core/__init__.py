"""Shared core of the Scheduler Agent Supervisor app: settings, the step ledger and the transport.

The role folders (``orchestrators/``, ``activities/``, ``supervisor/``) hold Azure Functions
bindings; everything they share, and everything that must be testable without the Functions
host, lives here.
"""

import logging

# Every log record the app writes reaches Application Insights. In Azure the Python worker configures the
# exporter itself (PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY) and attaches its handler to the one logger
# PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME names (azure-functions-python-worker, otel.py,
# initialize_azure_monitor; docs/platform.md row 4): "sas", not the root, which would also export every
# Azure SDK request and the exporter's own records. The modules of these packages log through
# ``logging.getLogger(__name__)``: their package loggers are made children of "sas", so each record passes
# the worker's handler on its way to the root (whatever the import order), and a new module needs nothing.
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
