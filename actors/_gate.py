"""The provider gate: shared by every run on one provider endpoint in a Runtime."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import attrs


@attrs.frozen
class GateStatistics:
    in_flight: int
    waiting: int
    paused_for_s: float


class ProviderGate:
    """A concurrency limit plus a pause for everyone after a 429 with retry-after.

    Ten thousand runs on one API do not stampede it: at most ``limit`` requests
    are in flight, and when one run is told to wait, every run waits it out.
    """

    __slots__ = ("_limit", "_paused_until", "_slots", "on_pause")

    def __init__(self, limit: int, on_pause: Callable[[float], object] | None = None) -> None:
        self._limit = limit
        self._slots = anyio.Semaphore(limit)
        self._paused_until = 0.0
        #: Told of every pause this gate starts itself (a fleet passes it to its other hosts).
        self.on_pause = on_pause

    def acquire_nowait(self) -> bool:
        """Take a slot if one is free (no checkpoint); ``False`` when all are taken."""
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            return False
        return True

    async def acquire(self) -> None:
        """Wait for a slot and take it (after :meth:`acquire_nowait` said none is free)."""
        await self._slots.acquire()

    def release(self) -> None:
        """Give back the slot :meth:`acquire_nowait` or :meth:`acquire` took."""
        self._slots.release()

    def pause(self, seconds: float, *, tell: bool = True) -> None:
        """Hold every request for ``seconds``; ``tell=False``: the pause came from elsewhere."""
        self._paused_until = max(self._paused_until, anyio.current_time() + seconds)
        if tell and self.on_pause is not None:
            self.on_pause(seconds)

    async def wait_open(self) -> float:
        """Wait while the gate is paused; return the seconds waited (0.0 when open)."""
        if not self._paused_until:
            return 0.0  # never paused: no clock read on the hot path
        start = anyio.current_time()
        if self._paused_until <= start:
            self._paused_until = 0.0
            return 0.0
        # The pause may grow while we wait (another 429), so re-check after each sleep.
        while (left := self._paused_until - anyio.current_time()) > 0:  # noqa: ASYNC110
            await anyio.sleep(left)
        return anyio.current_time() - start

    def statistics(self) -> GateStatistics:
        stats = self._slots.statistics()
        return GateStatistics(
            in_flight=self._limit - self._slots.value,
            waiting=stats.tasks_waiting,
            paused_for_s=max(0.0, self._paused_until - anyio.current_time()),
        )
