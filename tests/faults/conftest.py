"""The fault matrix: one fault per test, injected into the whole pattern running in one process
(``devtools.harness``: durable test host + real Azurite + real agent and watchdog bodies).

Every test ends with :func:`tests.helpers.fault_matrix.verify`, which records a row for the summary
table printed at the end of the session and asserts the two properties the pattern promises:

* nothing lost: every step of every instance reached a settled status, and every workflow reached
  the outcome the test expects;
* no double effect: no (instance, step) made more than one remote effect (or undid one twice).
"""

from __future__ import annotations

import pytest

from tests.helpers.fault_matrix import CURRENT, ROWS, Row


@pytest.fixture(autouse=True)
def _row_even_if_the_test_fails_early(request):
    CURRENT["recorded"] = False
    yield
    if not CURRENT["recorded"] and request.node.get_closest_marker("breakage") is None:
        ROWS.append(Row(request.node.name, "(test failed before verify)", "?", "?", "?"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not ROWS:
        return
    headers = ("fault", "injected", "steps lost", "double effects", "workflow outcome", "transport")
    table = [headers] + [
        (r.fault, r.injected, str(r.steps_lost), str(r.double_effects), r.outcome, r.transport) for r in ROWS
    ]
    widths = [min(max(len(row[i]) for row in table), 60) for i in range(len(headers))]
    terminalreporter.section("fault matrix")
    for n, row in enumerate(table):
        terminalreporter.write_line(
            "  ".join(cell[:60].ljust(w) for cell, w in zip(row, widths, strict=True))
        )
        if n == 0:
            terminalreporter.write_line("  ".join("-" * w for w in widths))
