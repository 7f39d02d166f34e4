"""In real Chromium, through the demo server: a page on an attacker's name that resolves to 127.0.0.1
(DNS rebinding) is same-origin with itself, may send any ``X-Forwarded-For`` it likes, and still
neither acts nor reads: the app is addressed by that name in ``Host``, which is not a loopback one.
The control: the same script from ``127.0.0.1`` gets past the door.
"""

from __future__ import annotations

import pytest

from devtools.console_demo import ConsoleDemo
from tests.helpers.browser import CHROMIUM, FLAGS, need_chromium
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus

TARGET = "rebind-victim"
SCRIPT = """async ([target, forged]) => {
  const headers = {"Content-Type": "application/json", "X-SAS-Client": "console",
                   "Idempotency-Key": String(Math.random()).slice(2),
                   ...(forged ? {"X-Forwarded-For": "127.0.0.1", "Forwarded": "for=127.0.0.1"} : {})};
  const act = await fetch(`/api/instances/${target}/steps/nope/skip`,
    {method: "POST", headers, body: JSON.stringify({reason: "rebound"})});
  const view = await fetch("/api/instances", {headers: forged ? {"X-Forwarded-For": "127.0.0.1"} : {}});
  return [act.status, (await act.json()).code, view.status];
}"""


@pytest.fixture(scope="module")
def app(azurite):
    with ConsoleDemo(azurite, tables=("Rebindsteps", "Rebinddeadlines"), speed=20) as running:
        make_step(running.harness.ledger, TARGET, StepStatus.FAILED)
        yield running


@pytest.fixture(scope="module")
def rebinding_browser():
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:  # the attacker's name resolves to loopback, as after a rebinding
        launched = p.chromium.launch(
            executable_path=CHROMIUM, args=[*FLAGS, "--host-resolver-rules=MAP rebind.example 127.0.0.1"]
        )
        yield launched
        launched.close()


def test_a_rebinding_page_with_a_forged_forwarded_for_neither_acts_nor_reads(app, rebinding_browser):
    port = app.server.port
    # the attacker's own page (served before the name was rebound) has no CSP; this app's answers do
    context = rebinding_browser.new_context(bypass_csp=True)
    try:
        page = context.new_page()
        page.goto(f"http://rebind.example:{port}/api/health")
        rebound = page.evaluate(SCRIPT, [TARGET, True])
        page.goto(f"http://127.0.0.1:{port}/api/health")
        local = page.evaluate(SCRIPT, [TARGET, False])
    finally:
        context.close()

    assert rebound == [403, "not-loopback", 403]
    assert local == [404, "step-not-found", 200]  # the control: from this machine it is let in
    ledger = app.harness.ledger
    assert ledger.get(TARGET, "create_storage").status is StepStatus.FAILED
    assert not [a for a in ledger.audit_trail(TARGET) if a.actor.startswith("operator:")]
