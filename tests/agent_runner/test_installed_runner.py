"""An installed ``sas-agent`` (the project's wheel in a fresh virtual environment, outside the source
tree) serves a declared non-default pool when told where the definitions and ``pools.yaml`` are
(``--definitions-dir``/``SAS_DEFINITIONS_DIR``, ``--pools-file``/``SAS_POOLS_FILE``). Nothing is
downloaded: the wheel is built without isolation and installed without dependencies; the dependencies
come from this environment's site-packages on PYTHONPATH (which holds no editable path to the repo)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from datetime import timedelta
from pathlib import Path

import azure.durable_functions as df
import pytest

from agent_runner import conformance_echo  # noqa: F401 - the app checks every agent has a handler
from tests.helpers.runner import ROOT, Runner
from workflow_core.workflows import loader

POOLS = "pools:\n  remote:\n    agents: [conformance.echo]\n    message_only: false\n"
WORKFLOW = {
    "name": "remote-echo",
    "description": "One step on the non-default pool remote.",
    "input": {"required": ["value"], "properties": {"value": {"type": "string"}}},
    "steps": [
        {
            "id": "echo",
            "agent": "conformance.echo",
            "input": {"value": "$input.value"},
            "deadline_seconds": 60,
        }
    ],
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The ``sas-agent`` script of the wheel installed in a new venv."""
    where = tmp_path_factory.mktemp("wheel")
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-build-isolation",
        "--no-deps",
        "-q",
        "-w",
        str(where),
    ]
    leftover = not (ROOT / "build").exists()  # setuptools builds in <source>/build: not ours to keep
    try:
        subprocess.run([*build, str(ROOT)], check=True, capture_output=True, timeout=300)
    finally:
        if leftover:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    [wheel] = where.glob("*.whl")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    install = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    subprocess.run([*install, "--no-deps", "-q", str(wheel)], check=True, capture_output=True, timeout=300)
    return venv / "bin" / "sas-agent"


@pytest.fixture
def harness_options():  # the runner alone serves the pool remote
    return {
        "clock": "real",
        "extra_workflows": {"pools": POOLS, "remote-echo": WORKFLOW},
        "hosted_pools": ["default"],
    }


def _runner(installed: Path, tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> Runner:
    environment = {
        **os.environ,
        "PYTHONPATH": sysconfig.get_paths()["purelib"],  # the dependencies, not the repo
        "CONFORMANCE_EFFECTS": str(tmp_path / "effects"),
        **(env or {}),
    }
    argv = [str(installed), "--pool", "remote", "--handlers", "agent_runner.conformance_echo", *options]
    return Runner(
        argv, environment, tmp_path, tmp_path / f"runner-{len(list(tmp_path.glob('runner-*')))}.log"
    )


def test_the_installed_runner_refuses_an_undeclared_pool_without_the_pools_file(installed, harness, tmp_path):
    runner = _runner(installed, tmp_path)
    assert runner.wait(60) == 2
    assert "--pool 'remote' is not declared in pools.yaml (pools: default)" in runner.output(), (
        runner.output()
    )


@pytest.mark.parametrize("how", ["options", "environment"])
def test_the_installed_runner_serves_a_declared_non_default_pool(installed, harness, tmp_path, how):
    directory = Path(loader.DEFAULT_DIRECTORY)  # where the harness wrote its definitions and pools.yaml
    if how == "options":
        runner = _runner(
            installed,
            tmp_path,
            "--definitions-dir",
            str(directory),
            "--pools-file",
            str(directory / "pools.yaml"),
        )
    else:
        env = {"SAS_DEFINITIONS_DIR": str(directory), "SAS_POOLS_FILE": str(directory / "pools.yaml")}
        runner = _runner(installed, tmp_path, env=env)
    try:
        assert (
            str(ROOT)
            not in subprocess.run(
                [str(installed.parent / "python"), "-c", "import agent_runner; print(agent_runner.__file__)"],
                capture_output=True,
                text=True,
                env={"PYTHONPATH": sysconfig.get_paths()["purelib"]},
                cwd=tmp_path,
            ).stdout
        )  # the installed copy runs, not the source tree
        iid = harness.start_workflow("remote-echo", {"value": "hi"})
        status = harness.run_until_complete(iid, timeout=timedelta(seconds=60))
        assert status.runtime_status == df.OrchestrationRuntimeStatus.Completed, runner.output()
        assert (tmp_path / "effects").read_text().split() == [f"{iid}:echo"]
        assert "-remote" in runner.output()
    finally:
        runner.close()
