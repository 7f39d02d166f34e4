"""The console's recovery-canary badge in headless Chromium: green after a recent pass, red after a
failed verdict, red when the last pass is older than two periods; it links to the history page.

The verdicts are real ledger rows (``supervisor.canary``'s ``canary-verdict`` notes on real sas-canary
instances of the demo's ledger), read through the real ``GET /api/canary``."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import timedelta

import pytest

from supervisor.canary import ACTOR, VERDICT_ACTION, Verdict
from tests.helpers.browser import screenshot


@pytest.fixture(autouse=True)
def canary_on(monkeypatch):
    """The badge of a canary that runs (off, ``GET /api/canary`` answers ``off``)."""
    monkeypatch.setenv("CANARY_ENABLED", "true")


def _verdict(demo, outcome: str, at, cause: str = "", pool: str = "default") -> str:
    h = demo.harness
    iid = h.start_workflow("sas-canary", {"scenario": "retry"})
    verdict = Verdict(
        instance_id=iid,
        scenario="retry",
        pool=pool,
        outcome=outcome,
        expected="retry with backoff",
        observed="probe:Failed, probe:Succeeded",
        expected_seconds=140.0,
        recovery_seconds=5.0 if outcome == "passed" else None,
        cause=cause,
        at=at.isoformat(),
    )
    h.ledger.note(iid, "*", actor=ACTOR, action=VERDICT_ACTION, reason=json.dumps(asdict(verdict)))
    return iid


def _badge(page, demo):
    page.goto(demo.console_url)
    badge = page.locator("#canary-badge")
    badge.wait_for(state="visible")
    page.wait_for_function("document.getElementById('canary-badge').dataset.state !== undefined")
    return badge


def test_the_badge_is_red_when_stale_green_after_a_pass_red_after_a_failure(demo, page):
    now = demo.harness.now()
    _verdict(demo, "passed", now - timedelta(hours=3))  # only an old pass: stale
    badge = _badge(page, demo)
    assert badge.get_attribute("data-state") == "stale"
    assert "canary-bad" in badge.get_attribute("class")
    assert "recovery verified 18" in badge.inner_text() and "stale" in badge.inner_text()

    passed = _verdict(demo, "passed", demo.harness.now())
    badge = _badge(page, demo)
    assert badge.get_attribute("data-state") == "passed"
    assert "canary-ok" in badge.get_attribute("class")
    assert badge.inner_text().startswith("recovery verified 0 min ago")
    color = page.evaluate("getComputedStyle(document.getElementById('canary-badge')).backgroundColor")
    assert color == "rgb(31, 138, 76)"  # --ok
    screenshot(page, "canary-badge-green")

    failed = _verdict(
        demo, "failed", demo.harness.now() + timedelta(seconds=1), cause="is the watchdog running?"
    )
    badge = _badge(page, demo)
    assert badge.get_attribute("data-state") == "failed"
    assert "last check failed" in badge.inner_text()
    color = page.evaluate("getComputedStyle(document.getElementById('canary-badge')).backgroundColor")
    assert color == "rgb(194, 53, 43)"  # --bad
    screenshot(page, "canary-badge-red")

    badge.click()  # the history page
    page.wait_for_selector("table.canary-history")
    rows = page.locator("table.canary-history tbody tr")
    assert rows.count() >= 3
    assert failed in rows.nth(0).inner_text() and "is the watchdog running?" in rows.nth(0).inner_text()
    assert passed in page.locator("table.canary-history").inner_text()
    screenshot(page, "canary-history")


def test_a_pool_whose_last_verdict_failed_keeps_the_badge_red_after_another_pool_passed(demo, page):
    now = demo.harness.now()
    _verdict(demo, "failed", now - timedelta(seconds=30), cause="pool 'beta': no agent", pool="beta")
    _verdict(demo, "passed", now)  # newer, in another pool: does not hide beta's failure
    badge = _badge(page, demo)
    assert badge.get_attribute("data-state") == "failed" and "canary-bad" in badge.get_attribute("class")
    assert "failed in pool beta" in badge.get_attribute("title")
    badge.click()
    page.wait_for_selector("ul.canary-pools")
    pools = page.locator("ul.canary-pools").inner_text()
    assert "pool beta: failed" in pools and "pool default: passed" in pools
    color = page.evaluate(
        "getComputedStyle(document.querySelector('ul.canary-pools li.verdict-failed')).color"
    )
    assert color == "rgb(194, 53, 43)"  # --bad
    screenshot(page, "canary-pools")


def test_canary_runs_are_not_in_the_console_list(demo, page):
    iid = demo.harness.start_workflow("sas-canary", {"scenario": "retry"})
    page.goto(demo.console_url)
    page.wait_for_selector("main table")
    assert iid not in page.locator("main").inner_text()
    page.check("input[name=canary]")  # the filter that shows them
    page.click("form.filters button[type=submit]")
    page.wait_for_selector(f"text={iid}")
    assert "canary=include" in page.url


def test_the_badge_says_off_and_how_to_turn_it_on_when_the_canary_is_off(demo, page):
    """``GET /api/canary`` answers ``state: "off"`` with a hint when ``CANARY_ENABLED`` is off: the badge
    is grey, says "off" and how to turn it on (never the red "not verified yet"), and so does the
    history page. The answer is the endpoint's, stubbed at the browser."""
    hint = "set CANARY_ENABLED=true and CANARY_SCHEDULE (docs/operations.md, Recovery canary)."
    answer = {
        "state": "off",
        "hint": hint,
        "enabled": False,
        "last_passed_at": None,
        "pools": {},
        "verdicts": [],
        "now": demo.harness.now().isoformat(),
    }
    page.route("**/api/canary?*", lambda route: route.fulfill(json=answer))
    badge = _badge(page, demo)
    assert badge.get_attribute("data-state") == "off"
    assert badge.get_attribute("class").split() == ["canary-badge", "canary-off"]
    assert badge.inner_text() == "recovery canary off · CANARY_ENABLED=true turns it on"
    assert badge.get_attribute("title") == f"the recovery canary is off: {hint[:-1]}"
    color = page.evaluate("getComputedStyle(document.getElementById('canary-badge')).backgroundColor")
    assert color == "rgb(91, 101, 119)"  # --muted, neither --ok nor --bad
    badge.click()
    page.wait_for_selector("p.canary-off-hint")
    assert page.locator("p.canary-off-hint").inner_text() == f"The recovery canary is off: {hint}"
    screenshot(page, "canary-badge-off")
