"""``sas-agent`` as a real subprocess for tests: where it is installed, and one running process whose
output is kept in a file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAS_AGENT = str(Path(sys.executable).parent / "sas-agent")


class Runner:
    """One ``sas-agent`` process; its output is kept in a file (read with :meth:`output`)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        return self.process.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
