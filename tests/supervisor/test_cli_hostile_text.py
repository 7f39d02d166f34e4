"""Ledger text is data: `sas` neither parses it as rich markup nor lets its control characters reach
the operator's terminal (a `[/]` in a step error crashed `sas stalled`/`timeline`, `[link=...]` was
eaten, ESC/OSC sequences were printed raw)."""

from __future__ import annotations

from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus
from workflow_core.workflows import get_workflow, version_of

S = StepStatus
HOSTILE = "\x1b[2J\x9b31m[/] [link=https://e.example]x[/link] [bold red]\x1b]0;pwned\x07"


def assert_safe(text: str) -> None:
    for ch in ("\x1b", "\x07", "\x9b"):
        assert ch not in text, repr(ch)


def test_stalled_and_timeline_print_hostile_errors_literally_and_escaped(cli, ledger):
    make_step(ledger, "wf-hostile", S.COMPENSATION_FAILED, last_error=HOSTILE)
    for argv in (("stalled",), ("timeline", "wf-hostile")):
        code, out, err = cli(*argv)
        assert code == 0, err
        assert_safe(out + err)
        assert "[/]" in out and "[link=https://e.ex" in out  # literal, not eaten
        assert "\\x1b[2J" in out and "\\x9b31m" in out  # visible escapes


def test_list_prints_a_hostile_business_key_literally(cli, ledger):
    from workflow_core import clock

    ledger.create_instance(
        "wf-key",
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=clock.utcnow(),
        business_key="k[/]ey",
        version=version_of(get_workflow("provision-tenant")),
    )
    code, out, err = cli("list")
    assert code == 0, err
    assert "k[/]ey" in out
    assert_safe(out)
