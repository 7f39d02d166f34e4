"""Start and stop a real Azurite (the Azure Storage emulator) on free loopback ports.

Tests, the demo and the benchmarks all need a real Table/Queue service; Azurite is installed from
the npm registry by ``npm ci`` (see package.json) and found in ``node_modules/.bin``.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from workflow_core.settings import azurite_connection_string

REPO_ROOT = Path(__file__).resolve().parents[1]


class AzuriteNotFound(RuntimeError):
    pass


class AzuriteExited(RuntimeError):
    """Azurite died while starting (most often: a port was taken)."""


def find_azurite() -> str:
    """The azurite binary: the repo's npm install first, then PATH."""
    local = REPO_ROOT / "node_modules" / ".bin" / "azurite"
    found = str(local) if local.exists() else shutil.which("azurite")
    if not found:
        raise AzuriteNotFound(
            "Azurite is not installed: run `npm ci` in the repository root (needs Node 20 and npm)"
        )
    return found


def _free_ports() -> tuple[int, int, int]:
    """Three distinct free loopback ports: every socket stays bound until all three are picked, so
    the kernel cannot hand one port out twice (one at a time, two services once got the same port)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(3)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        blob, queue, table = (s.getsockname()[1] for s in sockets)
        return blob, queue, table


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Azurite:
    """One Azurite process with on-disk state, so it can be restarted with its data intact."""

    location: Path | None = None  # None: a temporary folder made at the first start, removed by close()
    blob_port: int = 0  # 0: free ports picked here
    queue_port: int = 0
    table_port: int = 0
    process: subprocess.Popen | None = None
    owns_location: bool = True
    picked_ports: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if not any(self._ports):
            self.blob_port, self.queue_port, self.table_port = _free_ports()
            self.picked_ports = True

    @property
    def _ports(self) -> tuple[int, int, int]:
        return self.blob_port, self.queue_port, self.table_port

    @property
    def connection_string(self) -> str:
        return azurite_connection_string(
            blob_port=self.blob_port, queue_port=self.queue_port, table_port=self.table_port
        )

    def start(self, timeout: float = 30.0) -> Azurite:
        """Start and wait for the three ports. Ports picked here can be taken by another process
        before Azurite binds them: a first start that dies is retried on fresh ports (a restart
        keeps its ports, the connection string others hold names them)."""
        tries = 3 if self.picked_ports else 1
        for attempt in range(1, tries + 1):
            try:
                self._launch(timeout)
                break
            except AzuriteExited:
                if attempt == tries:
                    raise
                self.blob_port, self.queue_port, self.table_port = _free_ports()
        self.picked_ports = False
        return self

    def _launch(self, timeout: float) -> None:
        if self.process is not None:
            return
        if self.location is None:  # made here, not at construction: an Azurite never started leaves nothing
            self.location = Path(tempfile.mkdtemp(prefix="azurite-"))
        cmd = [find_azurite(), "--silent", "--loose", "--skipApiVersionCheck", "--disableTelemetry"]
        cmd += ["--location", str(self.location)]
        for service, port in zip(("blob", "queue", "table"), self._ports, strict=True):
            cmd += [f"--{service}Host", "127.0.0.1", f"--{service}Port", str(port)]
        with open(self.location / "azurite.log", "ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not all(port_open(p) for p in self._ports):
            if (code := self.process.poll()) is not None:
                self.process = None
                raise AzuriteExited(f"Azurite exited with code {code}; see {self.location / 'azurite.log'}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"Azurite did not open ports {self._ports} within {timeout}s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
        # Wait until the ports are released so a restart on the same ports succeeds.
        deadline = time.monotonic() + 10
        while any(port_open(p) for p in self._ports) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self) -> None:
        """Stop and start on the same ports and the same ``--location`` (state survives)."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self.owns_location and self.location is not None:
            shutil.rmtree(self.location, ignore_errors=True)

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def env_for(azurite: Azurite) -> dict[str, str]:
    """App settings that point the app at this Azurite with the storage-queue transport."""
    return {
        "AzureWebJobsStorage": azurite.connection_string,
        "AGENT_TRANSPORT": "storage-queue",
        "FUNCTIONS_WORKER_RUNTIME": "python",
    }


def private_env(azurite: Azurite, prefix: str) -> dict[str, str]:
    """:func:`env_for` plus tables and queues of their own (``<prefix><random tag>...``), so a
    benchmark run shares nothing with another on the same Azurite."""
    tag = f"{prefix}{uuid.uuid4().hex[:8]}"
    return {
        **env_for(azurite),
        "LEDGER_TABLE_NAME": f"{tag}steps",
        "DEADLINE_INDEX_TABLE_NAME": f"{tag}idx",
        "WORK_QUEUE_NAME": f"{tag}-work",
        "RESULT_QUEUE_NAME": f"{tag}-results",
        "DEAD_LETTER_QUEUE_NAME": f"{tag}-work-poison",
    }
