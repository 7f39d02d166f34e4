"""``sas doctor``: is the deployment right on the platform? One row per assumption, pass or fail, and
for a failure what to change. It asks the running app (``GET /api/diagnostics``), because only the app
sees its own packaged host.json, settings, identity and telemetry.

Exit codes: 0 every check passed, 6 a check failed, 7 the app could not be asked (unreachable, refused
the credentials, or answered something that is not a diagnostics report).
"""

from __future__ import annotations

from typing import Any

import click

from operator_cli import render
from operator_cli.api_client import EXIT_UNREACHABLE, ApiClient, ApiError, api_options
from operator_cli.doctor_checks import assumption_of, missing
from operator_cli.session import OUTPUT, current_session

EXIT_CHECK_FAILED = 6


def fetch(api: ApiClient) -> dict[str, Any]:
    """The diagnostics report, or :class:`ApiError` saying why not."""
    body = api.call("GET", "/api/diagnostics")
    sections = body.get("sections") if isinstance(body, dict) else None
    if not isinstance(sections, dict) or not all(isinstance(v, list) for v in sections.values()):
        raise ApiError("the answer is not a diagnostics report", EXIT_UNREACHABLE)
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
@api_options
@OUTPUT
def doctor_command(api: ApiClient, output: str) -> None:
    """Check a running deployment (or a local one) against every platform assumption in docs/platform.md.

    Asks the app's GET /api/diagnostics (role Workflows.Operate behind App Service Authentication,
    else a function key in SAS_FUNCTION_KEY) and prints one row per assumption: pass, FAIL (with
    what to change) or n/a.
    The app probes its own access by writing and deleting rows, blobs and messages of its own; it
    never touches workflow data and never returns a setting's value.

    Exit codes: 0 all passed, 6 a check failed, 7 the app could not be asked.
    """
    s = current_session()
    try:
        body = fetch(api)
    except ApiError as exc:
        if output != "json":
            raise  # printed as one error line by the command group
        render.print_json(s.out, {"ok": False, "reachable": False, "error": str(exc)})
        raise click.exceptions.Exit(exc.exit_code) from None
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
