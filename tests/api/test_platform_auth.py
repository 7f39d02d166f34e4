"""Behind App Service Authentication the API's routes are anonymous at the Functions level.

The platform authenticates (a bearer token) and the app authorizes roles; a function key on top would
lock out every Entra client. The auth level is read when the worker indexes the app, so each case
indexes it in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import azure.functions as func
import pytest

from api.boundary import api_auth_level, platform_authentication_on

REPO = Path(__file__).resolve().parents[2]
AZURE = {"WEBSITE_INSTANCE_ID": "abc", "WEBSITE_SITE_NAME": "func-sas"}

INDEX = """
import json
import azure.durable_functions as df
import azure.functions as func
import api.functions as api
app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_blueprint(api.blueprint)
print(json.dumps({f.get_function_name(): str(f.get_trigger().auth_level.value).upper()
                  for f in app.get_functions() if f.get_trigger().type == "httpTrigger"}))
"""


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"WEBSITE_AUTH_ENABLED": "True"}, False),  # locally: nobody authenticates, keys stay
        (AZURE, False),
        ({**AZURE, "WEBSITE_AUTH_ENABLED": "False"}, False),
        ({**AZURE, "WEBSITE_AUTH_ENABLED": "True"}, True),
        ({**AZURE, "WEBSITE_AUTH_ENABLED": " true "}, True),
    ],
)
def test_platform_authentication_needs_azure_and_the_platform_setting(env, on):
    assert platform_authentication_on(env) is on
    assert api_auth_level(env) == (func.AuthLevel.ANONYMOUS if on else func.AuthLevel.FUNCTION)


def _levels(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WEBSITE_AUTH_ENABLED", *AZURE)}
    env.update(extra, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", INDEX], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_routes_are_anonymous_behind_app_service_authentication_and_keyed_otherwise():
    behind = _levels({**AZURE, "WEBSITE_AUTH_ENABLED": "True"})
    keyed = _levels(AZURE)
    assert behind["http_health"] == keyed["http_health"] == "FUNCTION"  # excluded from platform auth
    assert behind["http_console"] == keyed["http_console"] == "ANONYMOUS"
    api_routes = set(behind) - {"http_health", "http_console"}
    assert api_routes and all(behind[name] == "ANONYMOUS" for name in api_routes), behind
    assert all(keyed[name] == "FUNCTION" for name in api_routes), keyed
