"""``./scripts/demo --pools``: the runner of pool ``remote`` is killed mid-step and started again while a
workflow of the default pool runs to the end; the step finishes on attempt 1 with its effect once."""

from __future__ import annotations

import io
import re

from devtools import demo


def test_the_pools_demo_kills_a_runner_mid_step_while_the_default_pool_flows():
    out = io.StringIO()
    assert demo.main(["--pools"], out=out) == 0
    text = out.getvalue()
    assert "runner KILLED (SIGKILL) mid-step" in text
    meanwhile = re.search(
        r"provision-tenant \w+ \(pool default\) succeeded meanwhile; remote_work is still (\w+)", text
    )
    assert meanwhile and meanwhile.group(1) in ("Running", "Dispatched"), text
    assert re.search(r"remote_work: attempt 1, run by 2 workers .*; remote effect made 1 time\(s\)", text), (
        text
    )
