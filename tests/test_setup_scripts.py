"""The set-up scripts on a busy machine: `scripts/apt-install` waits for another package manager's
lock (bounded, then a clear error), and fails at once on any other error. A stub `apt-get` on PATH
plays the package manager, so the machine's own is never touched."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKED = "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"


def stub_apt_get(tmp_path: Path, *, busy_calls: int, other_error: str = "") -> Path:
    """An `apt-get` that answers the first ``busy_calls`` calls with the lock error (exit 100), then
    succeeds, or fails with ``other_error``; it logs each call's arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "apt-get"
    script.write_text(
        f"""#!/usr/bin/env bash
echo "$*" >> {tmp_path}/calls
n=$(wc -l < {tmp_path}/calls)
if [ "$n" -le {busy_calls} ]; then echo "{LOCKED}" >&2; exit 100; fi
if [ -n "{other_error}" ]; then echo "{other_error}" >&2; exit 100; fi
exit 0
"""
    )
    script.chmod(0o755)
    return bin_dir


def run_apt_install(tmp_path: Path, bin_dir: Path, wait: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "APT_LOCK_WAIT": str(wait)}
    env["APT_LOCK_POLL"] = "0.1"
    return subprocess.run(
        [str(ROOT / "scripts/apt-install"), "chromium"], env=env, capture_output=True, text=True, timeout=60
    )


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_a_held_lock_is_waited_for_and_the_install_then_runs(tmp_path):
    done = run_apt_install(tmp_path, stub_apt_get(tmp_path, busy_calls=3), wait=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("another package manager holds apt's lock") == 3
    made = calls(tmp_path)
    assert len(made) == 5 and "update" in made[3] and "install -y -qq chromium" in made[4]
    assert all("DPkg::Lock::Timeout=60" in c for c in made)  # dpkg's own locks are waited for too


def test_a_lock_held_past_the_bound_fails_with_a_clear_message(tmp_path):
    done = run_apt_install(tmp_path, stub_apt_get(tmp_path, busy_calls=10_000), wait=1)
    assert done.returncode == 1
    assert LOCKED in done.stderr and "waits up to 1 s" in done.stderr
    assert not any("install" in c for c in calls(tmp_path))  # never got as far as installing


def test_any_other_error_fails_at_once_without_waiting(tmp_path):
    done = run_apt_install(
        tmp_path, stub_apt_get(tmp_path, busy_calls=0, other_error="E: Unable to locate package"), wait=60
    )
    assert done.returncode == 1 and "Unable to locate package" in done.stderr
    assert len(calls(tmp_path)) == 1 and "waiting" not in done.stderr


def test_bootstrap_writes_its_stamps_only_after_what_they_stand_for_succeeded():
    """A run that fails half-way leaves no stamp saying the venv or node_modules is complete, so the
    next run redoes it instead of trusting a half-installed state."""
    text = (ROOT / "scripts/bootstrap").read_text()
    venv = text.index("rm -f .venv/.stamp .venv/.stamp-sas")
    assert venv < text.index("pip install --quiet -r requirements-dev.txt") < text.index("> .venv/.stamp\n")
    npm = text.index("rm -f node_modules/.stamp")
    assert npm < text.index("npm ci --no-audit") < text.index("> node_modules/.stamp\n")
    assert "set -euo pipefail" in text
