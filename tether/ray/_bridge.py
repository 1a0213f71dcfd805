"""Waiting for a Ray object from asyncio or trio, without holding a thread.

``await ref`` works only on asyncio. :func:`wait_ref` takes the ref's
``concurrent.futures.Future`` (``ref.future()``, completed by Ray's own
threads through a callback) and wakes the waiting task from that callback:
on asyncio through the loop's ``call_soon_threadsafe``, on trio through the
run's token. No thread waits per call, so thousands of handles may wait at once.

A wait may also be given up on: with a :class:`Watch` (one per host, kept by
the caller), :meth:`Watch.give_up` ends every wait on that host at once with
:class:`HostGone`. The caller's monitor gives up on a host that Ray reports
dead, that does not answer its probe in time (a process stopped by SIGSTOP,
a machine cut off: Ray may think those alive for long), or that answers from
a new process (a restart: the calls queued to it would wait on runs the new
process never had). So no wait depends on Ray noticing a death.

A waiter that is cancelled (or given up) stops waiting; the remote call itself
goes on (a Ray actor method cannot be interrupted from here, see :mod:`tether.ray`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import sniffio


class HostGone(Exception):
    """A wait on a host that the caller gave up on (see :class:`Watch`)."""


class Watch:
    """The waits on one host, so that the caller can give up on all of them at once."""

    __slots__ = ("_wakes", "gave_up")

    def __init__(self) -> None:
        self._wakes: set[Callable[[], None]] = set()
        #: How often this host was given up on (each death, stop or restart once).
        self.gave_up = 0

    @property
    def waiting(self) -> int:
        """The waits on this host now."""
        return len(self._wakes)

    def give_up(self) -> None:
        """End every wait on this host now with :class:`HostGone` (from the caller's loop)."""
        self.gave_up += 1
        wakes, self._wakes = self._wakes, set()
        for wake in wakes:
            wake()


async def wait_ref(ref: Any, watch: Watch | None = None) -> Any:
    """The value of the Ray ``ObjectRef`` ``ref`` (or the error its task raised);
    :class:`HostGone` if ``watch`` gives up first."""
    future: Future[Any] = ref.future()
    if sniffio.current_async_library() == "asyncio":
        if watch is None:
            return await asyncio.wrap_future(future)
        await _wait_asyncio(future, watch)
    else:
        await _wait_trio(future, watch)
    if not future.done():
        raise HostGone("the caller gave up on this host")
    return future.result()


async def _wait_asyncio(future: Future[Any], watch: Watch) -> None:
    if future.done():
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    def done(_: Future[Any]) -> None:
        # RuntimeError: the caller's loop is closed, nobody waits any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(wake)

    watch._wakes.add(wake)
    future.add_done_callback(done)
    try:
        await waiter
    finally:
        watch._wakes.discard(wake)


async def _wait_trio(future: Future[Any], watch: Watch | None) -> None:
    import trio

    if future.done():
        return
    event = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def done(_: Future[Any]) -> None:
        # RunFinishedError: the caller's run is over, nobody waits any more.
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(event.set)

    if watch is not None:
        watch._wakes.add(event.set)
    future.add_done_callback(done)
    try:
        await event.wait()
    finally:
        if watch is not None:
            watch._wakes.discard(event.set)


__all__ = ["HostGone", "Watch", "wait_ref"]
