"""An agent worker in its own OS process, whose clock is off by ``WORKFLOW_CLOCK_OFFSET_SECONDS``.

``python -m tests.activities.skewed_worker <mode> <beats> <interval>``: prints ``ready`` once it polls,
takes one message from the work queue of the app settings in the environment and runs it; the
handler heartbeats ``beats`` times, ``interval`` seconds apart, then succeeds (``finish``) or the
process dies (``die``).
"""

from __future__ import annotations

import os
import sys
import time

from activities.worker.agent_worker import process_work_message
from activities.worker.handlers import agent
from workflow_core.runtime import get_services

AGENT = "tests.skew.worker"
DIED = 17


def main(mode: str, beats: int, interval: float) -> int:
    @agent(AGENT)
    def work(ctx):
        for _ in range(beats):
            ctx.heartbeat()
            time.sleep(interval)
        if mode == "die":
            os._exit(DIED)  # no record, no reply, no settlement: a machine that lost power
        return {"beats": beats}

    services = get_services()
    print("ready", flush=True)  # imported and connected: the test dispatches only now
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up:
        for message in services.transport.receive(services.settings.work_queue, lock_seconds=120):
            process_work_message(
                message.body,
                delivery_count=message.delivery_count,
                services=services,
                worker_id=f"worker:skewed:{os.getpid()}",
            )
            services.transport.complete(message)
            return 0
        time.sleep(0.1)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
