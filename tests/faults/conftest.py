"""The fault matrix: one fault per test, injected into the whole pattern running in one process
(``devtools.harness``: durable test host + real Azurite + real agent and watchdog bodies).

Every test ends with :func:`tests.helpers.fault_matrix.verify`, which records a row for the summary
table printed at the end of the session and asserts the two properties the pattern promises:

* nothing lost: every step of every instance reached a settled status, and every workflow reached
  the outcome the test expects;
* no double effect: no (instance, step) made more than one remote effect (or undid one twice).
"""

from __future__ import annotations

from dataclasses import astuple

import pytest

from tests.helpers.fault_matrix import CURRENT, ROWS, Row


@pytest.fixture(autouse=True)
def _row_even_if_the_test_fails_early(request):
    """Each row this test recorded rides on its report (``user_properties``), so the summary that
    tests/conftest.py prints is whole when the suite runs in several worker processes."""
    CURRENT["recorded"] = False
    first = len(ROWS)
    yield
    if not CURRENT["recorded"] and request.node.get_closest_marker("breakage") is None:
        ROWS.append(Row(request.node.name, "(test failed before verify)", "?", "?", "?"))
    for row in ROWS[first:]:
        request.node.user_properties.append(("fault_row", astuple(row)))
