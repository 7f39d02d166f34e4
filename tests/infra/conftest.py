"""The Bicep files under infra/, parsed once per test module (``files``), with no parse problem."""

from __future__ import annotations

import pytest

from tests.infra import bicep_checks as bc


@pytest.fixture(scope="module")
def files() -> dict[str, bc.BicepFile]:
    loaded, problems = bc.load()
    assert problems == []
    return loaded
