"""``sas doctor`` against the running demo (the whole app behind its HTTP front end, the in-process
durable host, Azurite and a ticking watchdog): healthy, it exits 0; a seeded fault is one FAIL line
naming it and exit 6."""

from __future__ import annotations

import io

from operator_cli.cli import main


def _doctor(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["doctor", *args], stdout=out, stderr=err)
    return code, out.getvalue() + err.getvalue()


def _failed(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.lstrip().startswith("FAIL")]


def test_sas_doctor_passes_against_the_demo_and_names_a_seeded_fault(demo, monkeypatch):
    monkeypatch.delenv("DURABLE_TASK_SCHEDULER_CONNECTION_STRING", raising=False)
    code, out = _doctor("--url", demo.url)
    assert code == 0 and _failed(out) == [], out
    assert "watchdog last ran" in out

    monkeypatch.setenv("DURABLE_TASK_SCHEDULER_CONNECTION_STRING", "Endpoint=https://x;Authentication=None")
    code, out = _doctor("--url", demo.url)
    (failed,) = _failed(out)
    assert code == 6 and "durable backend" in failed, out
