"""The provider gate: shared by every run on one provider endpoint in a Runtime."""

from __future__ import annotations

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

    __slots__ = ("_limiter", "_paused_until")

    def __init__(self, limit: int) -> None:
        self._limiter = anyio.CapacityLimiter(limit)
        self._paused_until = 0.0

    def slot(self) -> anyio.CapacityLimiter:
        return self._limiter

    def pause(self, seconds: float) -> None:
        self._paused_until = max(self._paused_until, anyio.current_time() + seconds)

    async def wait_open(self) -> float:
        """Wait while the gate is paused; return the seconds waited (0.0 when open)."""
        start = anyio.current_time()
        if self._paused_until <= start:
            return 0.0
        # The pause may grow while we wait (another 429), so re-check after each sleep.
        while (left := self._paused_until - anyio.current_time()) > 0:  # noqa: ASYNC110
            await anyio.sleep(left)
        return anyio.current_time() - start

    def statistics(self) -> GateStatistics:
        stats = self._limiter.statistics()
        return GateStatistics(
            in_flight=stats.borrowed_tokens,
            waiting=stats.tasks_waiting,
            paused_for_s=max(0.0, self._paused_until - anyio.current_time()),
        )
