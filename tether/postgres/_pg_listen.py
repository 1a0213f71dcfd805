r"""LISTEN/NOTIFY for the PostgreSQL run store: one listening thread per store, many waiters.

A :class:`Listener` owns a thread with one connection that ``LISTEN``\ s on
the store's channel; a waiting task registers a :class:`Wake` (an anyio Event
in its own event loop, asyncio or trio) for a run id, and the thread rings the
waiters of each notified run id through ``anyio.from_thread.run_sync`` with
the waiter's event-loop token. A dropped connection is reconnected, and then
every waiter is rung, since notifications may have been missed meanwhile.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import psycopg
from psycopg import sql

from tether.runtime import RunStoreError


class Wake:
    """One waiting task's doorbell: an anyio Event in its own event loop, re-armed per read."""

    __slots__ = ("_event", "_token")

    def __init__(self) -> None:
        self._token = anyio.lowlevel.current_token()
        self._event = anyio.Event()

    def arm(self) -> None:
        if self._event.is_set():
            self._event = anyio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    def ring_from_thread(self) -> None:
        # The loop may have ended meanwhile: then nobody is waiting any more.
        with contextlib.suppress(Exception):
            anyio.from_thread.run_sync(self._event.set, token=self._token)


class Listener:
    """A thread with one connection that LISTENs on a store's channel and rings waiters."""

    def __init__(self, dsn: str, channel: str, kwargs: dict[str, object], where: str) -> None:
        self._dsn = dsn
        self._channel = channel
        self._kwargs = kwargs
        self._where = where
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Wake]] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def listening(self) -> bool:
        return self._ready.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @contextmanager
    def watch(self, run_id: str) -> Iterator[Wake]:
        wake = Wake()
        with self._lock:
            self._waiters.setdefault(run_id, set()).add(wake)
        try:
            yield wake
        finally:
            with self._lock:
                waiting = self._waiters.get(run_id)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del self._waiters[run_id]

    def start(self) -> None:
        """In a worker thread: start listening (once), and return when LISTEN took effect."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"tether-listen-{self._channel}", daemon=True
                )
                self._thread.start()
        while not self._ready.wait(0.1):
            if self._error is not None or self._stop.is_set():
                raise RunStoreError(
                    f"run store at {self._where}: could not LISTEN for run events ({self._error})"
                ) from self._error

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _ring(self, run_id: str | None) -> None:
        with self._lock:
            if run_id is None or run_id == "":
                wakes = [w for waiting in self._waiters.values() for w in waiting]
            else:
                wakes = list(self._waiters.get(run_id, ()))
        for wake in wakes:
            wake.ring_from_thread()

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._dsn, **self._kwargs) as conn:  # type: ignore[arg-type]
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    if self._ready.is_set():
                        self._ring(None)  # reconnected: anything may have been missed
                    self._ready.set()
                    failures = 0
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.2):
                            self._ring(note.payload)
            except psycopg.Error as exc:
                self._error = exc
                failures += 1
                if not self._ready.is_set() and failures >= 3:
                    self._stop.set()
                    return
                self._stop.wait(min(5.0, 0.2 * 2**failures))


class ListenerSlot:
    """A store's listener, made on first use, replaced once stopped, closed with the store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listener: Listener | None = None

    def get(self, make: Callable[[], Listener]) -> Listener:
        with self._lock:
            if self._listener is None or self._listener.stopped:
                self._listener = make()
            return self._listener

    def _take(self) -> Listener | None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        return listener

    def close(self) -> None:
        """Stop the listener (its thread ends by itself within a fraction of a second)."""
        self._take()

    async def aclose(self) -> None:
        """Stop the listener and wait for its thread to end."""
        listener = self._take()
        if listener is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(listener.join)


__all__ = ["Listener", "ListenerSlot", "Wake"]
