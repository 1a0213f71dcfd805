"""Waiting for a Ray object from asyncio or trio, without holding a thread.

``await ref`` works only on asyncio. :func:`wait_ref` takes the ref's
``concurrent.futures.Future`` (``ref.future()``, completed by Ray's own
threads through a callback) and wakes the waiting task from that callback:
on asyncio through the loop's ``call_soon_threadsafe`` (``asyncio.wrap_future``),
on trio through the run's token. No thread waits per call, so thousands of
handles may wait at once.

A waiter that is cancelled stops waiting; the remote call itself goes on (a
Ray actor method cannot be interrupted from here, see :mod:`tether.ray`).
"""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import Future
from typing import Any

import sniffio


async def wait_ref(ref: Any) -> Any:
    """The value of the Ray ``ObjectRef`` ``ref`` (or the error its task raised)."""
    future: Future[Any] = ref.future()
    if sniffio.current_async_library() == "asyncio":
        return await asyncio.wrap_future(future)
    return await _wait_trio(future)


async def _wait_trio(future: Future[Any]) -> Any:
    import trio

    if not future.done():
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def wake(_: Future[Any]) -> None:
            # RunFinishedError: the caller's run is over, nobody waits any more.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        await done.wait()
    return future.result()


__all__ = ["wait_ref"]
