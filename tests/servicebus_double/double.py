"""Start and stop the AMQP 1.0 Service Bus test double (``amqp_test_double.js``) for a test run.

The double is a Node script on the ``rhea`` package (installed by ``npm ci`` with Azurite). It listens
on a free loopback port and prints ``LISTENING <port>`` when ready; :class:`AmqpTestDouble` waits for
that line, hands out an emulator-style connection string, and stops the process (closing its stdin
too, so it never outlives the tests). See the script's header for what it does and does not model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

SCRIPT = Path(__file__).with_name("amqp_test_double.js")
REPO_ROOT = Path(__file__).resolve().parents[2]


class AmqpTestDouble:
    def __init__(self, *, lock_duration_seconds: float = 30, verbose: bool = False) -> None:
        self.lock_duration_seconds = lock_duration_seconds
        self.verbose = verbose
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self._control = threading.Lock()
        self._log = tempfile.NamedTemporaryFile(prefix="amqp-test-double-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def log_path(self) -> str:
        return self._log.name

    @property
    def connection_string(self) -> str:
        if self.port is None:
            raise RuntimeError("the AMQP test double is not running")
        return (
            f"Endpoint=sb://127.0.0.1:{self.port};SharedAccessKeyName=test;SharedAccessKey=test;"
            "UseDevelopmentEmulator=true;"
        )

    def start(self, timeout: float = 20.0) -> AmqpTestDouble:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not on PATH: the AMQP test double needs Node.js 20 (and `npm ci`)")
        if not (REPO_ROOT / "node_modules" / "rhea").is_dir():
            raise RuntimeError("the rhea package is missing: run `npm ci` in the repository root")
        cmd = [node, str(SCRIPT), "--host", "127.0.0.1", "--port", "0"]
        cmd += ["--lock-duration-seconds", str(self.lock_duration_seconds)]
        if self.verbose:
            cmd.append("--verbose")
        self.process = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=REPO_ROOT,
            text=True,
            start_new_session=True,
        )
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not line or not line[0].startswith("LISTENING "):
            self.stop()
            raise RuntimeError(
                f"the AMQP test double did not report readiness within {timeout}s "
                f"(got {line[0] if line else 'nothing'!r}); see {self.log_path}"
            )
        self.port = int(line[0].split()[1])
        return self

    def state(self) -> dict[str, dict[str, int]]:
        """What the double holds per entity: ``{"q": {"available": n, "locked": n}, ...}``."""
        return self._command("state")["queues"]

    def refuse(self, refusal: str, entity: str) -> None:
        """From now on answer attaches to ``entity`` with an error: ``"refuse-receive"`` (a receiver:
        amqp:unauthorized-access, an identity without Listen) or ``"missing"`` (any: amqp:not-found)."""
        if refusal not in ("refuse-receive", "missing"):
            raise ValueError(refusal)
        self._command(f"{refusal} {entity}")

    def _command(self, line: str) -> dict:
        if self.process is None or self.process.stdin is None or self.process.stdout is None:
            raise RuntimeError("the AMQP test double is not running")
        if self.process.poll() is not None:
            raise RuntimeError(f"the AMQP test double exited ({self.process.returncode}): {self.log_path}")
        with self._control:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
            return json.loads(self.process.stdout.readline())

    def queue_state(self, entity: str) -> tuple[int, int]:
        """``(available, locked)`` for one entity (``(0, 0)`` if it was never used)."""
        entry = self.state().get(entity, {"available": 0, "locked": 0})
        return entry["available"], entry["locked"]

    def stop(self) -> None:
        process, self.process = self.process, None
        self.port = None
        if process is None:
            return
        try:
            if process.stdin:
                process.stdin.close()
        except OSError:
            pass
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()

    def close(self) -> None:
        self.stop()
        self._log.close()
        if os.environ.get("KEEP_AMQP_TEST_DOUBLE_LOG") is None:
            Path(self.log_path).unlink(missing_ok=True)

    def __enter__(self) -> AmqpTestDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":  # pragma: no cover - manual helper
    with AmqpTestDouble(verbose=True) as double:
        print(double.connection_string, "log:", double.log_path, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
