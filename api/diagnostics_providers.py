"""The optional features' rows in ``GET /api/diagnostics`` (``sas doctor``): the recovery canary's,
the circuit breakers', and a failing row for each feature whose settings are invalid (it is off).

Kept apart from :mod:`api.diagnostics_sections` (which knows the platform, not the features); listed
in :data:`api.diagnostics.PROVIDERS`. What makes a row fail is what an
operator must act on: the canary's newest verdict failed or none passed within two periods; a
circuit is open. A disabled canary, a canary that has not judged a run yet, a half-open circuit and
superseded failures are shown, not failed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from api import diagnostics_sections as sections
from api.canary import TURN_ON
from supervisor.canary import latest_verdicts
from supervisor.canary.runs import pools_of
from workflow_core import clock
from workflow_core.feature_settings import canary_settings, feature_errors
from workflow_core.settings import SettingsError

VERDICTS_SHOWN = 5


def _age(at: str, now: datetime) -> str:
    minutes = int((now - datetime.fromisoformat(at)).total_seconds() // 60)
    return f"{minutes} min ago"


def feature_rows(_services: Any) -> list[sections.Row]:
    """A feature (canary, retention, bulk) whose settings do not load is off: a failing row naming it."""
    return [
        sections.row(f"feature {feature}", False, f"{feature} is off: {error}", "fix that app setting")
        for feature, error in feature_errors().items()
    ]


def canary_rows(services: Any) -> list[sections.Row]:
    try:
        canary = canary_settings()
    except SettingsError:  # feature_rows names it
        return []
    if not canary.enabled:
        return [sections.row("canary", None, "the recovery canary is off (CANARY_ENABLED)", TURN_ON)]
    now = clock.utcnow()
    period = canary.period
    summary = latest_verdicts(
        services.ledger, now=now, period=period, limit=VERDICTS_SHOWN, pools=pools_of(services)
    )
    state, verdicts = summary["state"], summary["verdicts"]
    passed_at = summary["last_passed_at"]
    last_pass = f"last passed {_age(passed_at, now)}" if passed_at else "never passed"
    fixes = {
        "failed": "read the verdict's cause; docs/operations.md 'Recovery canary' says what to check first",
        "stale": "check that the maintenance timer and the watchdog run; `sas canary` lists the runs",
    }
    if state == "none":
        head = sections.row("canary", None, "enabled; no run judged yet (the first verdict takes a period)")
    else:
        failing = [p["last"]["cause"] for p in summary["pools"].values() if p["state"] == "failed"]
        detail = f"{state}: {last_pass}" + (f"; {'; '.join(failing)}" if failing else "")
        head = sections.row("canary", state == "passed", detail[:400], fixes.get(state, ""))
    rows = [head]
    pool_ok = {"passed": True, "failed": False, "stale": False}
    for name, pool in summary["pools"].items():  # each pool on its own: one passing hides no other
        at = pool["last_passed_at"]
        seen = f"last passed {_age(at, now)}" if at else "never passed"
        ok_pool = pool_ok.get(pool["state"])
        rows.append(sections.row(f"canary pool {name}", ok_pool, f"{pool['state']}: {seen}"))
    newest = {id(p["last"]) for p in summary["pools"].values() if p["last"] is not None}
    for verdict in verdicts:
        passed = verdict["outcome"] == "passed"
        ok: bool | None = True if passed else (False if id(verdict) in newest else None)
        what = verdict["observed"] if passed else f"failed: {verdict['cause']}"
        detail = f"{_age(verdict['at'], now)} on pool {verdict['pool']}: {what} ({verdict['instance_id']})"
        rows.append(sections.row(f"canary verdict {verdict['scenario']}", ok, detail[:400]))
    return rows


def circuit_rows(services: Any, agents: dict[str, Any] | None = None) -> list[sections.Row]:
    views = services.circuits.states(agents)
    if not views:
        return [sections.row("circuits", None, "no agent declares limits (workflows/pools.yaml `agents:`)")]
    rows = []
    for view in views:
        text = view.attention_text()
        state = view.circuit.state.value
        ok = True if text is None else (False if state == "open" else None)
        slots = f"{view.in_flight}/{view.max_in_flight}" if view.max_in_flight else f"{view.in_flight}"
        detail = text or f"closed; slots held {slots}, {view.waiting} waiting"
        fix = "" if ok is not False else "see docs/agent-limits.md; `sas circuit close AGENT --reason ...`"
        rows.append(sections.row(f"circuit {view.agent}", ok, detail[:400], fix))
    return rows
