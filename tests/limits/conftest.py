"""Agent limits end to end: the whole pattern in one process (``devtools.harness``) on Azurite."""

from __future__ import annotations

import pytest

from activities.worker.handlers import faults


@pytest.fixture(autouse=True)
def no_faults():
    faults.clear()
    yield
    faults.clear()
