"""Sync tools' threads: bounded slots, daemon threads, nothing held by an abandoned call.

A sync tool runs in a thread, and Python cannot stop a thread. What tether can
promise is that such a thread harms nobody once its call is given up (the run
was cancelled, or the call timed out):

- :class:`ToolThreads` counts *calls waited for*, not threads: a call that is
  abandoned gives its slot back at once, so a stuck tool in one run never makes
  a quick tool in another run wait (``Runtime(tool_threads=...)`` calls at once);
- the threads are daemon threads, so one blocked for good never keeps the
  process from exiting (anyio's asyncio worker threads, and trio's with a
  limiter, do not give these two guarantees);
- an abandoned call's late result, or error, is discarded.

Idle threads are kept for reuse for :data:`IDLE_S` seconds.
"""

from __future__ import annotations

import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import sniffio

T = TypeVar("T")

#: How long an idle thread waits for more work before it ends.
IDLE_S = 10.0

_Job = tuple[contextvars.Context, Callable[[], Any], Callable[[Any, BaseException | None], None]]


class _Worker(threading.Thread):
    """A daemon thread that runs jobs, then waits in the idle list for the next."""

    def __init__(self, pool: _Pool) -> None:
        super().__init__(name="tether-tool", daemon=True)
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._pool = pool

    def run(self) -> None:
        while True:
            try:
                context, fn, finished = self.jobs.get(timeout=IDLE_S)
            except queue.Empty:
                if self._pool.retire(self):
                    return
                continue  # handed a job as it timed out: serve it
            value: Any = None
            error: BaseException | None = None
            try:
                value = context.run(fn)
            except BaseException as exc:  # handed to the caller, or dropped if abandoned
                error = exc
            self._pool.idle(self)
            finished(value, error)
            del context, fn, finished, value, error


class _Pool:
    """Idle workers, shared by every Runtime of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []

    def submit(self, job: _Job) -> None:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
            worker.jobs.put(job)
            worker.start()
        else:
            worker.jobs.put(job)

    def idle(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def retire(self, worker: _Worker) -> bool:
        """Take an idle worker out of the list; ``False`` if it was just handed a job."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False


_POOL = _Pool()


class ToolThreads:
    """At most ``size`` sync-tool calls waited for at once (see the module)."""

    __slots__ = ("_slots",)

    def __init__(self, size: int) -> None:
        self._slots = anyio.CapacityLimiter(size)

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in a daemon thread; cancelling the caller abandons the call at once."""
        async with self._slots:
            return await _in_thread(fn)


async def _in_thread(fn: Callable[[], T]) -> T:
    done = anyio.Event()
    outcome: list[Any] = []
    wake = _waker(done.set)

    def finished(value: Any, error: BaseException | None) -> None:
        outcome.append((value, error))
        wake()

    _POOL.submit((contextvars.copy_context(), fn, finished))
    await done.wait()
    value, error = outcome[0]
    if error is not None:
        raise error
    return value  # type: ignore[no-any-return]


def _waker(callback: Callable[[], None]) -> Callable[[], None]:
    """A function any thread may call to run ``callback`` in this event loop, soon.

    It never blocks, and does nothing once the loop is gone (an abandoned call
    that ends after its Runtime).
    """
    if sniffio.current_async_library() == "trio":
        import trio

        token = trio.lowlevel.current_trio_token()

        def wake_trio() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(callback)

        return wake_trio
    import asyncio  # here: a trio program never loads it

    loop = asyncio.get_running_loop()

    def wake_asyncio() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(callback)

    return wake_asyncio


__all__ = ["ToolThreads"]
