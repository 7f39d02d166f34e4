"""The web console in real headless Chromium against the demo server: it lists and filters the demo
instances, draws an instance's timeline, retries a failed compensation, and shows a refusal."""

from __future__ import annotations

import getpass
import time

from tests.helpers.browser import screenshot
from workflow_core.workflows import get_workflow, version_of

TIMEOUT = 15_000


def test_the_list_shows_the_demo_instances_and_filters_them(demo, page):
    page.goto(demo.console_url)
    table = page.locator("#instances")
    table.wait_for(timeout=TIMEOUT)
    for instance_id in demo.instances.values():
        assert page.locator(f'tr[data-instance="{instance_id}"]').count() == 1, instance_id
    screenshot(page, "console-list")

    page.select_option("select[name=status]", "CompensationFailed")
    page.click("text=Apply filters")
    page.wait_for_function(
        "() => document.querySelectorAll('#instances tbody tr').length === 1", timeout=TIMEOUT
    )
    rows = page.locator("#instances tbody tr")
    assert rows.first.get_attribute("data-instance") == demo.instances["compensation-failed"]
    assert "status=CompensationFailed" in page.url


def test_the_instance_page_draws_the_timeline(demo, page):
    instance_id = demo.instances["compensated"]
    page.goto(f"{demo.console_url}#/instance/{instance_id}")
    page.locator("#gantt svg").wait_for(timeout=TIMEOUT)
    steps = {
        s: page.locator(f'#gantt rect.bar[data-step="{s}"]').count() for s in ("reserve_stock", "ship_order")
    }
    assert all(n >= 3 for n in steps.values()), steps  # Pending, Dispatched..., Compensating, Compensated
    assert page.locator('#gantt rect[data-status="Compensated"]').count() == 3
    assert page.locator('#gantt rect[data-status="Retrying"]').count() >= 1  # ship_order's retries
    assert page.locator("#audit tbody tr").count() > 10
    screenshot(page, "console-instance")


def test_retrying_a_failed_compensation_changes_the_ledger_and_the_page(demo, page):
    instance_id = demo.instances["compensation-failed"]
    ledger = demo.harness.ledger
    assert ledger.get(instance_id, "charge_payment").status.value == "CompensationFailed"
    page.goto(f"{demo.console_url}#/instance/{instance_id}")
    button = page.locator('#steps tr[data-step="charge_payment"] button[data-action="retry"]')
    button.wait_for(timeout=TIMEOUT)
    button.click()
    page.fill("#confirm-reason", "refund service is back")
    screenshot(page, "console-confirm-dialog")
    page.click("#confirm-ok")

    page.wait_for_function(
        """() => { const cell = document.querySelector('#steps tr[data-step="charge_payment"] .step-status');
                   return cell && !cell.textContent.includes('CompensationFailed'); }""",
        timeout=TIMEOUT,
    )
    record = ledger.get(instance_id, "charge_payment")
    assert record.status.value in ("Compensating", "Compensated")
    moves = [a for a in ledger.audit_trail(instance_id) if a.actor.startswith("operator:")]
    assert [(m.actor, m.reason) for m in moves] == [
        (f"operator:{getpass.getuser()}", "operator retry: refund service is back")
    ]
    assert "retry recorded as operator:" in page.locator("#notice").inner_text()

    # The watchdog enacts it on the running demo: compensated, and off the attention list.
    deadline = time.monotonic() + TIMEOUT / 1000
    while ledger.get_instance(instance_id).status.value != "Compensated" and time.monotonic() < deadline:
        time.sleep(0.2)
    settled = ledger.get_instance(instance_id)
    assert settled.status.value == "Compensated"
    assert settled.needs_attention is False and settled.attention_reason is None


def test_buttons_that_cannot_apply_are_disabled_and_say_why(demo, page):
    instance_id = demo.instances["retried"]  # finished: Succeeded, every step Succeeded
    page.goto(f"{demo.console_url}#/instance/{instance_id}")
    button = page.locator('#steps tr[data-step="register_dns"] button[data-action="retry"]')
    button.wait_for(timeout=TIMEOUT)
    assert button.is_disabled()
    assert "step can be retried" in button.get_attribute("title")
    for action in ("stop", "cancel", "resume"):
        instance_button = page.locator(f'.actions[role="group"] button[data-action="{action}"]')
        assert instance_button.is_disabled(), action
        assert "the instance is Succeeded" in instance_button.get_attribute("title")
    button.click(force=True)  # a disabled button does nothing, even when clicked
    assert not page.locator("#confirm").evaluate("d => d.open")
    screenshot(page, "console-disabled")


def test_the_attention_inbox_and_a_narrow_window(demo, browser):
    context = browser.new_context(viewport={"width": 420, "height": 860})
    page = context.new_page()
    try:
        page.goto(f"{demo.console_url}#/attention")
        page.locator("h1", has_text="Needs attention").wait_for(timeout=TIMEOUT)
        page.locator("h2", has_text="Stalled: past their deadline").wait_for(timeout=TIMEOUT)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 440, f"the page scrolls sideways at 420 px ({width} px)"
        screenshot(page, "console-attention-narrow")
    finally:
        context.close()


def test_the_console_is_usable_by_keyboard(demo, page):
    page.goto(demo.console_url)
    page.locator("#instances a").first.wait_for(timeout=TIMEOUT)  # the rows, not only the table
    page.keyboard.press("Tab")  # the skip link
    assert page.evaluate("() => document.activeElement.className") == "skip"
    before = page.evaluate("() => location.hash")
    page.keyboard.press("Enter")
    # focus moves to the content; the route (and so the view) stays as it was: no re-render
    assert page.evaluate("() => document.activeElement.id") == "main"
    assert page.evaluate("() => location.hash") == before
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("() => !!document.activeElement.closest('#instances a')"):
            break
    else:
        raise AssertionError("no instance link is reachable with Tab")
    page.keyboard.press("Enter")
    page.locator("#gantt svg").wait_for(timeout=TIMEOUT)


def test_live_refresh_keeps_the_keyboard_focus_on_its_row(demo, page):
    page.goto(demo.console_url)
    link = page.locator("#instances a").first
    link.wait_for(timeout=TIMEOUT)
    href = link.get_attribute("href")
    link.focus()
    page.wait_for_timeout(3_500)  # longer than the console's live refresh (3 s): the rows were redrawn
    assert page.evaluate("() => document.activeElement.getAttribute('href')") == href


def test_the_demo_clock_runs_ahead_of_the_wall_clock(demo):
    """The CLI stamps its requests with the wall clock; the demo's watchdog must find them due."""
    from datetime import UTC, datetime

    assert demo.harness.host.clock.now() >= datetime.now(UTC)


def test_a_settled_instances_timeline_ends_at_its_last_event_not_at_the_demo_clocks_now(demo, page):
    instance_id = demo.instances["compensated"]
    last = max(a.at for a in demo.harness.ledger.audit_trail(instance_id))
    page.goto(f"{demo.console_url}#/instance/{instance_id}")
    svg = page.locator("#gantt svg")
    svg.wait_for(timeout=TIMEOUT)
    label = svg.get_attribute("aria-label")
    # the demo clock runs 20x ahead: the old axis ran on to "now", hours past the instance's end
    assert label.endswith(f"to {last.strftime('%Y-%m-%d %H:%M:%S')}"), (label, last)


def test_a_stopped_instance_reads_as_stopped_and_only_cancel_applies(demo, page):
    from datetime import timedelta

    from supervisor import operator
    from workflow_core import clock

    ledger = demo.harness.ledger
    ledger.create_instance(
        "ui-stopped",
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=clock.utcnow() + timedelta(hours=1),
        version=version_of(get_workflow("provision-tenant")),
    )
    operator.move_instance(ledger, "ui-stopped", "stop", reason="wrong tenant", user="alice")

    page.goto(f"{demo.console_url}#/instance/ui-stopped")
    cancel = page.locator('.actions[role="group"] button[data-action="cancel"]')
    cancel.wait_for(timeout=TIMEOUT)
    assert "Stopped" in page.locator("#main").inner_text()
    assert "stopped by operator:alice: wrong tenant" in page.locator("#main").inner_text()
    assert not cancel.is_disabled()  # the way out of the inbox: undo what the stop left done
    for action in ("stop", "resume"):
        button = page.locator(f'.actions[role="group"] button[data-action="{action}"]')
        assert button.is_disabled() and "the instance is Stopped" in button.get_attribute("title"), action
