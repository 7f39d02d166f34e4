"""Calling async function bodies from the host's synchronous loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable
from typing import Any


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class AsyncRunner:
    """Runs awaitables to completion from synchronous code.

    Keeps one private event loop per thread (kept open, so libraries that cache loop-bound sessions
    keep working); when called while an event loop is already running in this thread (an async
    test, or an async activity that calls back into the host), runs the awaitable on a helper
    thread instead.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._loops: list[asyncio.AbstractEventLoop] = []
        self._lock = threading.Lock()

    def run(self, awaitable: Awaitable[Any]) -> Any:
        coroutine = awaitable if inspect.iscoroutine(awaitable) else _await(awaitable)
        loop = getattr(self._local, "loop", None)
        if _loop_running_in_this_thread() or (loop is not None and loop.is_running()):
            return self._run_on_thread(coroutine)
        if loop is None or loop.is_closed():
            loop = asyncio.new_event_loop()
            self._local.loop = loop
            with self._lock:
                self._loops.append(loop)
        return loop.run_until_complete(coroutine)

    def close(self) -> None:
        with self._lock:
            loops, self._loops = self._loops, []
        for loop in loops:
            if not loop.is_closed() and not loop.is_running():
                loop.close()
        self._local = threading.local()

    @staticmethod
    def _run_on_thread(coroutine: Any) -> Any:
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["value"] = asyncio.run(coroutine)
            except BaseException as exc:  # re-raised in the caller's thread
                outcome["error"] = exc

        thread = threading.Thread(target=target, name="durable-host-async", daemon=True)
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")


def _loop_running_in_this_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


_default_runner = AsyncRunner()


def run_async(awaitable: Awaitable[Any]) -> Any:
    """Run an awaitable to completion from synchronous code and return its result."""
    return _default_runner.run(awaitable)


def call_maybe_async(runner: AsyncRunner, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; if it is async (or returns an awaitable), run it to completion."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        return runner.run(result)
    return result
