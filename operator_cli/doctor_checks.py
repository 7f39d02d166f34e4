"""What ``sas doctor`` checks: one row per platform assumption, the section of ``GET /api/diagnostics``
that answers it, and the docs/platform.md row it stands for.

The app computes each row (api/diagnostics_sections.py: it alone sees its own host.json, settings,
identity and telemetry); this table orders them, names the platform behaviour behind each, and
lets the CLI notice a row the app did not send (an older app, a section that failed to load).
"""

from __future__ import annotations

from dataclasses import dataclass


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


def assumption_of(section: str, check: str) -> str:
    for known in CHECKS:
        if known.section == section and check.startswith(known.prefix):
            return known.assumption
    return ""


def missing(sections: dict[str, list[dict]]) -> list[Check]:
    """Checks of this table the app sent no row for (providers are optional)."""
    return [
        c
        for c in CHECKS
        if c.section != "providers"
        and not any(str(r.get("check", "")).startswith(c.prefix) for r in sections.get(c.section) or [])
    ]
