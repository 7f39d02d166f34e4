"""The Functions Python worker owns azure-monitor when PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true.

The worker calls ``configure_azure_monitor()`` itself at worker init when that setting is true
(azure-functions-python-worker, ``dispatcher.py`` / ``otel.py``: ``initialize_azure_monitor``). The
app must then not configure it a second time: two calls install two exporters and every span and
record is sent twice. infra/modules/function-app.bicep sets the setting (tests/infra pins that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os
    from unittest import mock
    import azure.monitor.opentelemetry as am
    from workflow_core import telemetry_instruments

    with mock.patch.object(am, "configure_azure_monitor") as spy:
        first = telemetry_instruments.configure_telemetry()
        second = telemetry_instruments.configure_telemetry()
    print(json.dumps({
        "first": first, "second": second, "calls": spy.call_count,
        "by": telemetry_instruments.configured_by(),
    }))
    os._exit(0)
    """
)


def _run(worker_setting: str | None) -> dict:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "PYTHON_ENABLE_OPENTELEMETRY")
    }
    env.update(
        APPLICATIONINSIGHTS_CONNECTION_STRING="InstrumentationKey=00000000-0000-0000-0000-000000000000;"
        "IngestionEndpoint=http://127.0.0.1:9/",
        APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL="true",
        PYTHONPATH=str(REPO),
    )
    if worker_setting is not None:
        env["PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"] = worker_setting
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_app_does_not_configure_azure_monitor_when_the_worker_does():
    result = _run("true")
    assert result == {"first": True, "second": True, "calls": 0, "by": "worker"}


def test_the_app_configures_azure_monitor_once_when_the_worker_does_not():
    for setting in (None, "false"):
        result = _run(setting)
        assert result == {"first": True, "second": True, "calls": 1, "by": "app"}, setting


# The worker's otel.py (initialize_azure_monitor), as it runs at worker init: the exporter's logger is the
# app setting PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME, default "" (the root). Then the host indexes the app.
AS_THE_WORKER_DOES = textwrap.dedent(
    """
    import json, logging, os, sys
    from azure.monitor.opentelemetry import configure_azure_monitor
    configure_azure_monitor(
        connection_string=os.environ["APPLICATIONINSIGHTS_CONNECTION_STRING"],
        logger_name=os.environ.get("PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME", ""),
    )
    exported = []
    exporter_logger = logging.getLogger(os.environ.get("PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME", ""))
    for handler in exporter_logger.handlers:
        handler.emit = lambda record: exported.append(record.name)
    import function_app  # every module the worker loads
    import agent_runner.runner
    from workflow_core import APP_PACKAGES
    names = sorted(
        name for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.split(".")[0] in APP_PACKAGES + ("sas",)
    )
    for name in names + ["azure.core.pipeline.policies.http_logging_policy"]:
        logging.getLogger(name).error("probe")
    from api.diagnostics import telemetry_exporter
    print(json.dumps({"names": names, "exported": exported, "marker": telemetry_exporter()}))
    os._exit(0)
    """
)


def test_every_app_logger_reaches_the_exporter_the_worker_configures():
    """In Azure the worker, not the app, configures azure-monitor, on the logger the Bicep names: every
    logger of the app's modules (``logging.getLogger(__name__)`` included) reaches its handler, and an
    Azure SDK logger does not (the exporter would log its own requests)."""
    from tests.infra import bicep_checks as bc

    files, _problems = bc.load()
    _site, app_settings = bc.app_settings_of(files)
    logger_name = bc.Resolver(files).value(
        "modules/function-app.bicep", app_settings["PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME"]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON_APPLICATIONINSIGHTS_")}
    env.update(
        APPLICATIONINSIGHTS_CONNECTION_STRING="InstrumentationKey=00000000-0000-0000-0000-000000000000;"
        "IngestionEndpoint=http://127.0.0.1:9/",
        APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL="true",
        PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME=logger_name,
        PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY="true",
        PYTHONPATH=str(REPO),
    )
    done = subprocess.run(
        [sys.executable, "-c", AS_THE_WORKER_DOES],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    modules = [name for name in result["names"] if not name.startswith("sas")]
    assert "activities.replies.attempt_status" in modules  # a module logger, not under "sas"
    assert logger_name == "sas"
    assert sorted(result["exported"]) == result["names"]
    # doctor's worker-side marker sees the exporter the worker started, on "sas"
    assert result["marker"]["ok"] is True and "'sas'" in result["marker"]["detail"]
