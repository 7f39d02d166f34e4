"""``sas doctor``: is the deployment right on the platform? One row per assumption, pass or fail, and
for a failure what to change. It asks the running app (``GET /api/diagnostics``), because only the app
sees its own packaged host.json, settings, identity and telemetry.

The app computes each row (api/diagnostics_sections.py); :data:`CHECKS` orders them, names the
platform behaviour (docs/platform.md) behind each, and lets the CLI notice a row the app did not send
(an older app, a section that failed to load). Exit codes: 0 every check passed, 6 a check failed, 7
the app could not be asked (unreachable, refused the credentials, or not a diagnostics report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from operator_cli import render
from operator_cli.api_client import EXIT_UNREACHABLE, ApiClient, ApiError, api_options
from operator_cli.session import OUTPUT, current_session

EXIT_CHECK_FAILED = 6


@dataclass(frozen=True)
class Check:
    section: str  # the key in the response's "sections"
    prefix: str  # the row's "check" starts with this
    assumption: str  # the platform behaviour relied on (docs/platform.md)


CHECKS: tuple[Check, ...] = (
    Check("host", "host.json durable backend", "the scale controller reads the backend from host.json"),
    Check("host", "host.json task hub", "the Durable extension resolves %TASK_HUB_NAME% in host.json"),
    Check("host", "host.json telemetryMode", "the host emits OpenTelemetry with telemetryMode"),
    Check("host", "host.json extension bundle", "the bundle [4.*, 5.0.0) carries the bindings used"),
    Check("host", "host.json polling interval", "Flex Consumption wants maxQueuePollingInterval <= 10 s"),
    Check("settings", "app settings", "the settings the worker, host and app read (names only)"),
    Check("identity", "platform identity", "Flex Consumption injects the managed identity endpoint"),
    Check("identity", "identity client id", "azure-identity picks the identity by AZURE_CLIENT_ID"),
    Check("identity", "App Service Authentication", "WEBSITE_AUTH_ENABLED marks platform authentication"),
    Check("telemetry", "telemetry propagator", "the worker makes its propagator with its telemetry"),
    Check("telemetry", "telemetry configured once", "the worker configures azure-monitor itself"),
    Check("telemetry", "telemetry exporter", "the exporter started on the logger every record passes"),
    Check("durable", "durable backend round trip", "the Durable extension reaches its backend as the app"),
    Check("access", "table ", "the identity's table data role on each ledger table"),
    Check("access", "container ", "the identity's blob data role on the payload container"),
    Check("queues", "queue ", "the identity's rights on each pool queue and the result queue"),
    Check("queues", "answer queue", "an answer the app sends reaches each answer queue (read back)"),
    Check(
        "roles", "role", "the roles infra granted the app (Manage) and each pool (queues, storage, telemetry)"
    ),
    Check("timers", "watchdog last tick", "the timer trigger runs the watchdog on WATCHDOG_SCHEDULE"),
    Check("providers", "canary", "the recovery canary's last verdict"),
    Check("providers", "circuits", "the agents' circuit states"),
)


def missing(sections: dict[str, list[dict]]) -> list[Check]:
    """Checks of this table the app sent no row for (providers are optional)."""
    return [
        c
        for c in CHECKS
        if c.section != "providers"
        and not any(str(r.get("check", "")).startswith(c.prefix) for r in sections.get(c.section) or [])
    ]


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
        for check in (c for c in checks if isinstance(c, dict)):
            name, ok = str(check.get("check", "")), check.get("ok")
            known = (c.assumption for c in CHECKS if c.section == section and name.startswith(c.prefix))
            rows.append(
                {
                    "section": str(section),
                    "check": name,
                    "ok": ok if isinstance(ok, bool) else None,
                    "detail": str(check.get("detail", "")),
                    "fix": str(check.get("fix", "")),
                    "assumption": next(known, ""),
                }
            )
    fix = "deploy the version of the app that matches this CLI"
    return rows + [
        {
            "section": c.section,
            "check": c.prefix.strip(),
            "ok": False,
            "detail": "the app sent no row for this check",
            "fix": fix,
            "assumption": c.assumption,
        }
        for c in missing(body["sections"])
    ]


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
