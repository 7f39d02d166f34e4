"""The deploy guard: infra/deploy.sh and azd's predeploy hook run ``sas replay-check --live``
(infra/replay-check.sh) before publishing, on by default for production, and refuse on exit 4 with
the divergence printed. ``az`` and the project's Python are stubs that record their calls; the
check itself is tested against Azurite in tests/orchestrators/test_replay_live.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.infra import bicep_checks as bc
from tests.infra.test_deploy_tooling import AZ_STUB, fake_repo  # noqa: F401  (fixture)

GUARD = bc.INFRA_DIR / "replay-check.sh"
AZ = AZ_STUB.replace(
    "esac",
    '  *"deployment group show"*storageAccountName*) echo "stsasprod1" ;;\n'
    '  *"deployment group show"*taskHubName*) echo "ProdHub" ;;\nesac',
)
PYTHON = """#!/usr/bin/env bash
seen="account=$AzureWebJobsStorage__accountName hub=$TASK_HUB_NAME conn=[$AzureWebJobsStorage]"
echo "python $* $seen" >> "$STUB_LOG"
if [ "$STUB_REPLAY_EXIT" = 4 ]; then
  echo "NON-DETERMINISTIC  live: workflow_orchestrator tenant-7 (3 episode(s), 5 action(s))"
  echo "first divergence: tenant-7: episode 2: action #1 differs"
fi
exit "$STUB_REPLAY_EXIT"
"""


def _run(repo: Path, tmp_path: Path, *args: str, replay_exit: int = 0, **env: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("az", AZ), ("python", PYTHON)):
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("", encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if k != "SAS_REPLAY_CHECK"}
    environ |= {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "STUB_REPLAY_EXIT": str(replay_exit),
        "SAS_PYTHON": str(bin_dir / "python"),
        **env,
    }
    done = subprocess.run(args, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60)
    return done, log.read_text(encoding="utf-8").splitlines()


def _deploy(repo: Path, tmp_path: Path, env_name: str, *flags: str, **kwargs):
    script = repo / "infra" / "deploy.sh"
    return _run(
        repo, tmp_path, "bash", str(script), env_name, f"rg-sas-{env_name}", "westeurope", *flags, **kwargs
    )


def test_a_production_deploy_replays_the_task_hub_before_publishing(fake_repo, tmp_path):  # noqa: F811
    done, calls = _deploy(fake_repo, tmp_path, "prod")
    assert done.returncode == 0, done.stderr
    [check] = [c for c in calls if c.startswith("python ")]
    assert check == (
        "python -m operator_cli replay-check --live --new-hub-ok account=stsasprod1 hub=ProdHub conn=[]"
    )
    publish = next(i for i, c in enumerate(calls) if "config-zip" in c)
    assert calls.index(check) < publish
    assert "every in-flight instance replays" in done.stderr


def test_a_divergence_refuses_to_publish_and_prints_it(fake_repo, tmp_path):  # noqa: F811
    done, calls = _deploy(fake_repo, tmp_path, "prod", replay_exit=4)
    assert done.returncode != 0
    assert not any("config-zip" in c for c in calls)
    assert "first divergence: tenant-7: episode 2: action #1 differs" in done.stdout
    assert "refusing to publish" in done.stderr and "not published" in done.stderr


@pytest.mark.parametrize(
    ("env_name", "flags", "setting", "runs"),
    [
        ("dev", (), None, False),
        ("dev", ("--replay-check",), None, True),
        ("dev", (), "true", True),
        ("prod", ("--no-replay-check",), None, False),
        ("prod", (), "false", False),
    ],
)
def test_opt_in_and_its_production_default(fake_repo, tmp_path, env_name, flags, setting, runs):  # noqa: F811
    env = {"SAS_REPLAY_CHECK": setting} if setting else {}
    done, calls = _deploy(fake_repo, tmp_path, env_name, *flags, **env)
    assert done.returncode == 0, done.stderr
    assert any(c.startswith("python ") for c in calls) is runs
    assert any("config-zip" in c for c in calls)


def test_a_read_error_refuses_too_and_the_scheduler_backend_is_skipped(tmp_path):
    done, calls = _run(
        tmp_path, tmp_path, "sh", str(GUARD), "prod", "st1", "Hub", "AzureStorage", replay_exit=2
    )
    assert done.returncode == 2 and "could not be read" in done.stderr
    done, calls = _run(tmp_path, tmp_path, "sh", str(GUARD), "prod", "st1", "Hub", "DurableTaskScheduler")
    assert done.returncode == 0 and calls == [] and "skipped" in done.stderr


def test_azd_runs_the_guard_before_it_deploys_the_service():
    config = yaml.safe_load((bc.INFRA_DIR.parent / "azure.yaml").read_text(encoding="utf-8"))
    hook = config["services"]["api"]["hooks"]["predeploy"]
    assert hook["shell"] == "sh"
    assert hook["run"].startswith('infra/replay-check.sh "${AZURE_ENV_NAME:-}" "${storageAccountName:-}"')
    assert os.access(GUARD, os.X_OK)
    subprocess.run(["sh", "-n", str(GUARD)], check=True)
