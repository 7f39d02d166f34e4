"""``./scripts/demo --serve``: the operator console on http://127.0.0.1:PORT, with workflows to act on.

It runs the real app in one process, seeds a few workflows with injected faults, then keeps serving
with the virtual clock running ``--speed`` times faster than the wall clock (README.md, "Operators").
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from activities.worker.handlers import faults
from devtools.azurite import Azurite, port_open
from devtools.demo_preflight import DemoError, check_definitions, demo_input
from devtools.durable_host.clock import VirtualClock
from devtools.harness import PatternHarness, app_functions
from devtools.http_server import AppHttpServer, http_routes
from devtools.logs import quiet_logging
from workflow_core.workflows import get_workflow

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PORT = 7071  # func start's port: `sas doctor` and `sas canary run` find either there
# Where the demo keeps its ledger: Azurite's default ports (what local.settings.json names, so `sas`
# finds it) and the checkout's .azurite/. Tests point these at a temporary folder and free ports.
AZURITE_PORTS = (10000, 10001, 10002)
STATE = ROOT / ".azurite"
LOCAL_SETTINGS = ROOT / "local.settings.json"
PORT_SEARCH = 20  # a demo whose default port is taken tries the next ones
DEFAULT_SPEED = 20.0
SEED_TIMEOUT = timedelta(hours=12)


class ConsoleDemo:
    """The app, its HTTP front end and a pacing thread; ``seed()`` runs the demo workflows."""

    def __init__(
        self,
        azurite: Any,
        *,
        port: int = 0,
        speed: float = DEFAULT_SPEED,
        tables: tuple[str, str] = ("StepLedger", "StepDeadlines"),
    ) -> None:
        self.speed = speed
        settings = {"LEDGER_TABLE_NAME": tables[0], "DEADLINE_INDEX_TABLE_NAME": tables[1]}
        # The virtual clock starts at the wall clock's now and only runs ahead of it, so what the CLI
        # writes with the wall clock (an operator's retry, due at once) is due for the demo's watchdog.
        start = datetime.now(UTC).replace(microsecond=0)
        self.harness = PatternHarness(azurite, settings=settings, clock=VirtualClock(start))
        try:
            self.server = AppHttpServer(self.harness.host, http_routes(app_functions()), port=port).start()
        except BaseException:
            self.harness.close()
            raise
        self.url = self.server.url
        self.console_url = f"{self.url}/api/console/"
        self.instances: dict[str, str] = {}
        self.injected: list[str] = []  # the faults seed() injected, each cleared before serving
        self._stop = threading.Event()
        self._pacer: threading.Thread | None = None

    def seed(self) -> dict[str, str]:
        """Run the fault scenarios on the virtual clock (seconds of real time); returns name -> instance."""
        h = self.harness
        tag = uuid.uuid4().hex[:6]

        def start(label: str, workflow: str) -> str:
            iid = f"demo-{label}-{tag}"
            self.instances[label] = h.start_workflow(workflow, demo_input(get_workflow(workflow), None), iid)
            return iid

        def inject(agent: str, rule: Any, step: str, what: str) -> Any:
            self.injected.append(f"{step} ({agent}): {what}")
            return faults.inject(agent, rule, step=step)

        faults.clear()
        inject("dns.register", faults.Stall(times=1), "register_dns", "its first attempt never answered")
        h.run_until_complete(start("retried", "provision-tenant"), timeout=SEED_TIMEOUT)

        inject("shipping.create_shipment", faults.Fail(), "ship_order", "every attempt failed")
        h.run_until_complete(start("compensated", "order-fulfilment"), timeout=SEED_TIMEOUT)

        refund = inject(
            "payments.refund", faults.Fail(times=5), "charge_payment", "its refund failed 5 times"
        )
        stuck = start("compensation-failed", "order-fulfilment")
        h.run_until(lambda: h.statuses(stuck).get("charge_payment") == "CompensationFailed", SEED_TIMEOUT)
        h.host.run_until_idle()
        faults.remove(refund)  # an operator's retry now succeeds: "the refund service is back"

        inject("email.send_welcome", faults.Stall(times=1), "send_welcome", "its first attempt never answers")
        running = start("running", "provision-tenant")
        out_to_agent = ("Dispatched", "Running")
        h.run_until(lambda: h.statuses(running).get("send_welcome") in out_to_agent, SEED_TIMEOUT)
        # Cleared before anyone else starts a workflow here: a newcomer's own start must meet no fault
        # nobody told them about (the "running" instance's stalled attempt is retried at its deadline).
        faults.clear()
        return dict(self.instances)

    def start_clock(self) -> None:
        """Move the virtual clock with the wall clock (times ``speed``), so the watchdog keeps ticking."""

        def pace() -> None:
            last = time.monotonic()
            while not self._stop.wait(0.25):  # 4 host iterations a second: each polls every queue
                now = time.monotonic()
                try:
                    self.harness.host.advance(timedelta(seconds=(now - last) * self.speed))
                except Exception:
                    logging.getLogger(__name__).exception("the durable host loop failed; it goes on")
                last = now

        self._pacer = threading.Thread(target=pace, name="virtual-clock", daemon=True)
        self._pacer.start()

    def close(self) -> None:
        self._stop.set()
        if self._pacer is not None:
            self._pacer.join(timeout=5)
        self.server.close()
        self.harness.close()
        faults.clear()

    def __enter__(self) -> ConsoleDemo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _azurite_for(port: int, moved: bool, out: TextIO) -> tuple[Any, bool]:
    """A demo uses Azurite's default ports (reusing one already listening, as ``func start`` would),
    so ``sas`` finds its ledger through ``local.settings.json``. A demo that ``moved`` off the default
    port because another demo has it starts its own Azurite on free ports with its own state, so two
    demos never share a ledger or a watchdog's work. Returns (azurite, started here)."""
    blob, queue, table = AZURITE_PORTS
    if moved:
        location = STATE / f"demo-{port}"
        location.mkdir(parents=True, exist_ok=True)
        azurite = Azurite(location=location, owns_location=False).start()
        out.write(
            f"  starting Azurite on {azurite.blob_port}-{azurite.table_port} for this demo "
            f"(state in {location})\n"
        )
        return azurite, True
    if port_open(table):
        out.write(f"  Azurite already listening on {blob}-{table}: using it\n")
        return Azurite(blob_port=blob, queue_port=queue, table_port=table), False
    STATE.mkdir(parents=True, exist_ok=True)
    out.write(f"  starting Azurite on {blob}-{table} (state in {STATE})\n")
    azurite = Azurite(location=STATE, blob_port=blob, queue_port=queue, table_port=table, owns_location=False)
    return azurite.start(), True


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="./scripts/demo --serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--port",
        type=int,
        help=f"HTTP port (default {DEFAULT_PORT}, or the next free one when another demo has it)",
    )
    parser.add_argument(
        "--speed", type=float, default=DEFAULT_SPEED, help="virtual seconds per real second (default 20)"
    )
    args = parser.parse_args(argv)
    quiet_logging()
    try:
        check_definitions()
    except DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # without --port: the default port, or the next free one (a second demo moves over, never fails)
    searched = (p for p in range(DEFAULT_PORT, DEFAULT_PORT + PORT_SEARCH) if not port_open(p))
    port = args.port if args.port is not None else next(searched, None)
    if port is None or (args.port is not None and port_open(args.port)):
        busy = args.port if args.port is not None else f"{DEFAULT_PORT}-{DEFAULT_PORT + PORT_SEARCH - 1}"
        print(f"error: port {busy} is busy; pass --port with a free one", file=sys.stderr)
        return 2
    moved = port != DEFAULT_PORT and args.port is None
    if moved:
        out.write(
            f"  port {DEFAULT_PORT} is taken (func start, another demo?): serving on {port} "
            "with its own Azurite\n"
        )
    if not LOCAL_SETTINGS.exists():
        shutil.copy(ROOT / "local.settings.json.example", LOCAL_SETTINGS)
        out.write("  created local.settings.json from the example (the operator CLI reads it)\n")
    azurite, owned = _azurite_for(port, moved, out)
    # SIGTERM (a service manager, `kill`, a closed terminal's job control) stops the demo like Ctrl-C:
    # through the finally below, so the Azurite it started does not outlive it.
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # raises KeyboardInterrupt
    try:
        with ConsoleDemo(azurite, port=port, speed=args.speed) as demo:
            out.write("  running the demo workflows (faults injected; virtual clock)...\n")
            out.flush()
            for label, iid in demo.seed().items():
                out.write(f"    {label:<20} {iid}\n")
            out.write("  faults injected while seeding them, all cleared now (your own starts meet none):\n")
            for what in demo.injected:
                out.write(f"    {what}\n")
            demo.start_clock()
            cli = ".venv/bin/sas list   .venv/bin/sas stalled   .venv/bin/sas show <instance>"
            if moved:  # how to point sas at this demo's own Azurite
                cli = f".venv/bin/sas --connection-string '{azurite.connection_string}' list"
            out.write(
                f"\n  console : {demo.console_url}\n"
                f"  API     : {demo.url}/api/instances, {demo.url}/api/attention\n"
                f"  CLI     : {cli}\n"
                f"  clock   : {args.speed:g}x; the watchdog ticks every 30 virtual seconds\n"
                "  Ctrl-C stops it.\n"
            )
            out.flush()
            while True:
                time.sleep(1)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, while seeding or serving
        out.write("\n  stopped\n")
    finally:
        if owned:
            azurite.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
