"""The console's bulk action in real headless Chromium: "Act on all matching" shows the count and a
sample from a dry run (which changes nothing), asks for a reason, and then acts once per instance
through POST /api/operations, each audit row naming the operation."""

from __future__ import annotations

from tests.helpers.browser import screenshot

TIMEOUT = 15_000


def test_act_on_all_matching_confirms_with_count_and_sample_then_acts(demo, page):
    instance_id = demo.instances["compensation-failed"]
    ledger = demo.harness.ledger
    assert ledger.get(instance_id, "charge_payment").status.value == "CompensationFailed"
    page.goto(f"{demo.console_url}#/?status=CompensationFailed")
    page.locator("#bulk-start").wait_for(timeout=TIMEOUT)
    page.select_option("#bulk-action", "retry")

    page.click("#bulk-start")  # a dry run: the count and a sample, nothing changed
    page.locator("#bulk-confirm[open]").wait_for(timeout=TIMEOUT)
    assert page.locator("#bulk-title").inner_text() == "Retry all 1 matching?"
    assert page.locator("#bulk-sample li").all_inner_texts() == [instance_id]
    screenshot(page, "console-bulk-confirm")
    assert ledger.get(instance_id, "charge_payment").status.value == "CompensationFailed"
    page.click("#bulk-cancel")
    assert ledger.get(instance_id, "charge_payment").status.value == "CompensationFailed"

    page.click("#bulk-start")
    page.locator("#bulk-confirm[open]").wait_for(timeout=TIMEOUT)
    page.click("#bulk-ok")  # no reason: the dialog stays open and nothing is done
    assert page.locator("#bulk-confirm[open]").count() == 1
    assert ledger.get(instance_id, "charge_payment").status.value == "CompensationFailed"
    page.fill("#bulk-reason", "refund service is back")
    with page.expect_request(lambda r: r.url.endswith("/api/operations") and r.method == "POST") as sent:
        page.click("#bulk-ok")
    key = sent.value.headers.get("idempotency-key", "")  # one per intent: a lost answer is resent with it
    assert 10 <= len(key) <= 100, sent.value.headers
    page.wait_for_function(
        "() => document.querySelector('#notice').textContent.includes('acted 1')", timeout=TIMEOUT
    )
    moves = [a for a in ledger.audit_trail(instance_id) if "[bulk " in (a.reason or "")]
    assert len(moves) == 1 and moves[0].actor.startswith("operator:")
    assert "refund service is back" in moves[0].reason
    assert ledger.get(instance_id, "charge_payment").status.value in ("Compensating", "Compensated")

    # Confirm pressed again with the same key (an answer lost on the way): the first answer, no second act
    again = page.evaluate(
        """async (key) => (await api('/operations', { method: 'POST', headers: { 'Idempotency-Key': key },
          body: JSON.stringify({ action: 'retry', reason: 'refund service is back',
            filter: JSON.parse(document.querySelector('#bulk-confirm').dataset.filter) }) })).id""",
        key,
    )
    assert f"bulk retry {again} by" in page.locator("#notice").inner_text()  # the same operation
    assert len([a for a in ledger.audit_trail(instance_id) if "[bulk " in (a.reason or "")]) == 1
