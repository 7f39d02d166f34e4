"""Calling async function bodies from the host's synchronous loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable
from typing import Any


class AsyncRunner:
    """Runs awaitables to completion in the calling thread, on one private event loop per thread
    (kept open: libraries cache loop-bound sessions). A loop already running in this thread is set
    aside meanwhile rather than the work handed to another thread: the host's lock is re-entrant for
    this thread only, so a helper thread calling back into the host would wait for its own caller."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._loops: list[asyncio.AbstractEventLoop] = []
        self._lock = threading.Lock()

    def run(self, awaitable: Awaitable[Any]) -> Any:
        loop = getattr(self._local, "loop", None)
        nested = loop is not None and loop.is_running()
        if nested:  # re-entered from inside our own loop: a short-lived loop of its own
            loop = asyncio.new_event_loop()
        elif loop is None or loop.is_closed():
            loop = asyncio.new_event_loop()
            self._local.loop = loop
            with self._lock:
                self._loops.append(loop)
        outer = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(None)
        try:
            return loop.run_until_complete(awaitable)
        finally:
            asyncio.events._set_running_loop(outer)
            if nested:
                loop.close()

    def close(self) -> None:
        with self._lock:
            loops, self._loops = self._loops, []
        for loop in loops:
            if not loop.is_closed() and not loop.is_running():
                loop.close()
        self._local = threading.local()


def call_maybe_async(runner: AsyncRunner, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; if it is async (or returns an awaitable), run it to completion."""
    result = fn(*args, **kwargs)
    return runner.run(result) if inspect.isawaitable(result) else result
