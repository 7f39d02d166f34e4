"""docs/platform.md: every row names a source and an offline test that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (\d+) \|")
TEST = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")
# A source is pinned (`repo@commit`, `abbrev@release`) or, where none is public, a docs page by its title.
PINNED = re.compile(r"[\w.-]+@[\w.-]+|docs \"")


def _rows() -> list[list[str]]:
    text = (ROOT / "docs" / "platform.md").read_text(encoding="utf-8")
    return [
        [cell.strip() for cell in line.strip("|").split(" | ")]
        for line in text.splitlines()
        if ROW.match(line)
    ]


def test_every_row_names_an_existing_test_and_a_source():
    rows = _rows()
    assert len(rows) >= 30
    for cells in rows:
        assert len(cells) == 6, cells
        number, _behaviour, _relied, source, test, live = cells
        found = TEST.search(test)
        assert found, f"row {number}: no test named"
        path, name = found.groups()
        assert (ROOT / path).is_file(), f"row {number}: {path} does not exist"
        assert re.search(rf"^(async )?def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M), (
            f"row {number}: {path} has no {name}"
        )
        assert source and live, f"row {number}: source and live check are required"
        assert PINNED.search(source), f"row {number}: the source names no version read (repo@commit)"


def test_rows_are_numbered_in_order():
    assert [int(cells[0]) for cells in _rows()] == list(range(1, len(_rows()) + 1))
