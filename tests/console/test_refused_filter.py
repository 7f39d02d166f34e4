"""In real Chromium: when the API refuses a filter (400), the list keeps its filter form with the
refused value as typed and the problem's message beside it, so the operator can correct it; the
corrected filter then lists again."""

from __future__ import annotations

import pytest

TIMEOUT = 15_000


@pytest.mark.parametrize(
    ("query", "field", "value", "said"),
    [
        ("startedFrom=yesterday-ish", "startedFrom", "yesterday-ish", "invalid startedFrom"),
        ("startedTo=0001-01-01T00:00:00", "startedTo", "0001-01-01T00:00:00", "invalid startedTo"),
        ("workflow=no%20such%20name!", "workflow", "no such name!", "workflow"),
    ],
    ids=["not-a-time", "calendar-edge", "bad-workflow-name"],
)
def test_a_refused_filter_keeps_the_form_with_the_value_and_the_message(
    demo, page, query, field, value, said
):
    page.goto(f"{demo.console_url}#/?{query}")
    box = page.locator("#filter-problem")
    box.wait_for(timeout=TIMEOUT)

    shown = page.locator(f"form.filters [name={field}]").input_value()
    assert shown == value or (shown + ":00") == value  # Chromium shows a whole minute without ":00"
    assert said in box.inner_text() and "HTTP 400" in box.inner_text()
    assert page.locator("#instances").count() == 0

    page.fill(f"form.filters [name={field}]", "")  # corrected: the list comes back
    page.click("text=Apply filters")
    page.locator("#instances").wait_for(timeout=TIMEOUT)
    assert page.locator("#filter-problem").count() == 0
