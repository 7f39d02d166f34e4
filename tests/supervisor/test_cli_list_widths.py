"""`sas list` never wraps an identifier or a business key mid-value: a value too long for the table is
cut with an ellipsis on its own line, `-o wide` shows every value whole on one line, `-o json` as
stored."""

from __future__ import annotations

import json

import pytest

from operator_cli.render import PLAIN_WIDTH
from workflow_core import clock
from workflow_core.workflows import get_workflow, version_of

KEY = "tenant-" + "0123456789abcdef" * 16  # 263 characters: more than a whole plain line


@pytest.fixture
def long_key(ledger):
    ledger.create_instance(
        "wf-long-key",
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=clock.utcnow(),
        business_key=KEY,
        version=version_of(get_workflow("provision-tenant")),
    )
    return KEY


def _row(out: str, instance_id: str) -> list[str]:
    lines = out.splitlines()
    found = [i for i, line in enumerate(lines) if instance_id in line]
    assert len(found) == 1, out
    at = found[0]
    return [lines[at], lines[at + 1] if at + 1 < len(lines) else ""]


def test_the_table_cuts_a_long_key_with_an_ellipsis_and_never_wraps_it(cli, long_key):
    code, out, err = cli("list")

    assert code == 0, err
    row, after = _row(out, "wf-long-key")
    assert "…" in row and long_key[:20] in row
    assert "0123456789abcdef" not in after  # no continuation line carrying the rest of the key
    assert all(len(line) <= PLAIN_WIDTH for line in out.splitlines())


def test_wide_output_shows_every_value_whole_on_one_line(cli, long_key):
    code, out, err = cli("list", "-o", "wide")

    assert code == 0, err
    row, _ = _row(out, "wf-long-key")
    assert long_key in row and "…" not in row


def test_json_output_carries_the_key_as_stored(cli, long_key):
    code, out, err = cli("list", "-o", "json")

    assert code == 0, err
    assert long_key in [i["business_key"] for i in json.loads(out)["instances"]]
