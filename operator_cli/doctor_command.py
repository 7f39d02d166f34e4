"""``sas doctor``: is the deployment right on the platform? One row per assumption, pass or fail, and
for a failure what to change. It asks the running app (``GET /api/diagnostics``), because only the app
sees its own packaged host.json, settings, identity and telemetry.

Exit codes: 0 every check passed, 6 a check failed, 7 the app could not be asked (unreachable, refused
the credentials, or answered something that is not a diagnostics report).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

import click

from operator_cli import render
from operator_cli.doctor_checks import assumption_of, missing
from operator_cli.session import OUTPUT, current_session

EXIT_CHECK_FAILED = 6
EXIT_UNREACHABLE = 7
MAX_BODY = 1_000_000
DEFAULT_URL = "http://localhost:7071"


class Unreachable(Exception):
    pass


def fetch(url: str, key: str | None, token: str | None, timeout: float) -> dict[str, Any]:
    """The diagnostics report, or :class:`Unreachable` saying why not."""
    if not url.startswith(("http://", "https://")):
        raise Unreachable(f"--url must be an http(s) URL, is {url!r}")
    headers = {"Accept": "application/json", "X-SAS-Client": "sas-doctor"}
    if key:
        headers["x-functions-key"] = key
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url.rstrip("/") + "/api/diagnostics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read(MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        hint = {
            401: "pass a function key (--key / SAS_FUNCTION_KEY) or, behind App Service Authentication, "
            "a token (--token / SAS_TOKEN)",
            403: "the caller needs the app role Workflows.Operate",
            404: "the app has no /api/diagnostics: deploy this version",
        }.get(exc.code, "see the app's logs")
        raise Unreachable(f"the app refused the request: HTTP {exc.code} ({hint})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreachable(f"cannot reach {url}: {reason}") from None
    if len(raw) > MAX_BODY:
        raise Unreachable("the answer is larger than a diagnostics report can be")
    try:
        body = json.loads(raw)
    except ValueError:
        raise Unreachable("the answer is not JSON: is --url the Function App?") from None
    sections = body.get("sections") if isinstance(body, dict) else None
    if not isinstance(sections, dict) or not all(isinstance(v, list) for v in sections.values()):
        raise Unreachable("the answer is not a diagnostics report")
    return body


def rows_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for section, checks in body["sections"].items():
        for check in checks:
            if not isinstance(check, dict):
                continue
            ok = check.get("ok")
            rows.append(
                {
                    "section": str(section),
                    "check": str(check.get("check", "")),
                    "ok": ok if isinstance(ok, bool) else None,
                    "detail": str(check.get("detail", "")),
                    "fix": str(check.get("fix", "")),
                    "assumption": assumption_of(str(section), str(check.get("check", ""))),
                }
            )
    for absent in missing(body["sections"]):
        rows.append(
            {
                "section": absent.section,
                "check": absent.prefix.strip(),
                "ok": False,
                "detail": "the app sent no row for this check",
                "fix": "deploy the version of the app that matches this CLI",
                "assumption": absent.assumption,
            }
        )
    return rows


@click.command("doctor")
@click.option(
    "--url",
    envvar="SAS_API_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="the Function App's base URL (env SAS_API_URL)",
)
@click.option("--key", envvar="SAS_FUNCTION_KEY", help="a function key (env SAS_FUNCTION_KEY)")
@click.option(
    "--token", envvar="SAS_TOKEN", help="a bearer token for App Service Authentication (env SAS_TOKEN)"
)
@click.option(
    "--timeout", type=click.FloatRange(1, 300), default=60, show_default=True, help="seconds to wait"
)
@OUTPUT
def doctor_command(url: str, key: str | None, token: str | None, timeout: float, output: str) -> None:
    """Check a running deployment (or a local one) against every platform assumption in docs/platform.md.

    Asks the app's GET /api/diagnostics (role Workflows.Operate behind App Service Authentication,
    else a function key) and prints one row per assumption: pass, FAIL (with what to change) or n/a.
    The app probes its own access by writing and deleting rows, blobs and messages of its own; it
    never touches workflow data and never returns a setting's value.

    Exit codes: 0 all passed, 6 a check failed, 7 the app could not be asked.
    """
    s = current_session()
    try:
        body = fetch(url, key or os.environ.get("SAS_FUNCTION_KEY"), token, timeout)
    except Unreachable as exc:
        if output == "json":
            render.print_json(s.out, {"ok": False, "reachable": False, "error": str(exc)})
        else:
            s.say(f"error: {exc}")
        raise click.exceptions.Exit(EXIT_UNREACHABLE) from None
    rows = rows_of(body)
    failed = [r for r in rows if r["ok"] is False]
    if output == "json":
        render.print_json(s.out, {"ok": not failed, "reachable": True, "failed": len(failed), "checks": rows})
    else:
        table_rows = [
            [
                {True: "pass", False: "FAIL", None: "n/a"}[r["ok"]],
                r["check"],
                r["detail"] + (f"\n-> {r['fix']}" if r["ok"] is False and r["fix"] else ""),
            ]
            for r in rows
        ]
        s.show(render.table(None, ["RESULT", "CHECK", "DETAIL"], table_rows))
        s.say(f"\n{len(rows) - len(failed)} of {len(rows)} checks passed or do not apply")
    if failed:
        raise click.exceptions.Exit(EXIT_CHECK_FAILED)
