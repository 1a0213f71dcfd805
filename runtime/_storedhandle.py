"""Handles on runs that live in the run store, not in this process (see docs/guides/durable.md).

``rt.handle(run_id)`` gives one for a run this Runtime does not have in
flight: started by another process, resumed elsewhere, parked, or finished.
It reads everything from the store: :meth:`StoredEventStream.__anext__`
replays the stored trail and then follows it as the owner commits, round by
round; :meth:`StoredRunHandle.result` waits for the stored result. Waiting is
the store's :meth:`~.RunStore.wait` (SQLite polls every ``poll_s``).
``cancel()`` and ``stop()`` are requests through the store, which the owner
picks up at its next round boundary or lease renewal.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import tether.runtime._events as ev

from ._agent import Agent
from ._result import RunResult
from ._runstore import RunNotFound, RunStore

#: How long one wait on the store lasts before the follower looks again.
WAIT_S = 1.0


class StoredEventStream:
    """The events of a stored run: the stored trail, then the owner's commits, until it ends."""

    __slots__ = ("_buffer", "_run_id", "_seen", "_store")

    def __init__(self, store: RunStore, run_id: str) -> None:
        self._store, self._run_id = store, run_id
        self._seen = 0
        self._buffer: deque[ev.Event] = deque()

    def __aiter__(self) -> StoredEventStream:
        return self

    async def __anext__(self) -> ev.Event:
        store, run_id = self._store, self._run_id
        while not self._buffer:
            batch = await store.events(run_id, start=self._seen)
            if batch:
                self._seen += len(batch)
                self._buffer.extend(ev.load(e) for e in batch)
                break
            run = await store.get(run_id)
            if run is None:
                raise RunNotFound(f"the run store has no run {run_id!r}")
            if run.status == "finished" and run.events <= self._seen:
                raise StopAsyncIteration
            await store.wait(run_id, seen=self._seen, timeout_s=WAIT_S)
        return self._buffer.popleft()


class StoredRun:
    """What a :class:`~._runtime.RunHandle` on a stored run reads and asks through."""

    __slots__ = ("agents", "result", "resume", "run_id", "spawn", "store")

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        agents: dict[str, Agent[Any, Any]],
        spawn: Callable[[Callable[[], Coroutine[Any, Any, Any]]], object],
        resume: Callable[[str], Coroutine[Any, Any, Any]] | None = None,
    ) -> None:
        self.store, self.run_id, self.agents = store, run_id, agents
        #: Starts a request in the Runtime's task group (handles' methods are sync).
        self.spawn = spawn
        #: Continues a run here (``Runtime.resume``): a parked run asked to cancel.
        self.resume = resume
        self.result: RunResult[Any] | None = None

    async def wait_result(self) -> RunResult[Any]:
        """The stored result, once the run has finished (wherever it ran)."""
        store, run_id = self.store, self.run_id
        while self.result is None:
            run = await store.get(run_id)
            if run is None:
                raise RunNotFound(f"the run store has no run {run_id!r}")
            if run.status == "finished" and run.result is not None:
                data = dict(run.result)
                data["events"] = await store.events(run_id)
                agent = self.agents.get(run.agent)
                output_type: Any = str if agent is None else agent.output_type
                self.result = RunResult.load(data, output_type)
                break
            await store.wait(run_id, seen=run.events, timeout_s=WAIT_S)
        return self.result

    def request(self, *, cancel: str | None = None, stop: bool = False) -> None:
        """Ask the owner, through the store; a parked run asked to cancel ends here."""
        self.spawn(lambda: self._request(cancel, stop))

    async def _request(self, cancel: str | None, stop: bool) -> None:
        try:
            await self.store.request(self.run_id, cancel=cancel, stop=stop)
        except KeyError:
            # Made from a sync handle method, in the Runtime's task group: an unknown
            # run must not end the Runtime. Its readers get RunNotFound.
            warnings.warn(
                f"cannot cancel or stop run {self.run_id!r}: the run store has no such run",
                RuntimeWarning,
                stacklevel=1,
            )
            return
        run = await self.store.get(self.run_id)
        if self.resume is not None and run is not None and run.status == "ready":
            # A parked run is nobody's: end it here if this Runtime knows its agent.
            with contextlib.suppress(ValueError, KeyError):
                await self.resume(self.run_id)


async def stored_result(
    store: RunStore, run_id: str, agents: Mapping[str, Agent[Any, Any]]
) -> RunResult[Any]:
    """The result of run ``run_id`` once ``store`` has it (wherever the run ran);
    ``agents`` by name give its output type (``str`` for an agent not among them).
    A ``KeyError`` if the store has no such run."""
    stored = StoredRun(store, run_id, dict(agents), _no_spawn)
    return await stored.wait_result()


def _no_spawn(job: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    raise RuntimeError("a StoredRun that only waits for its result makes no requests")


__all__ = ["StoredEventStream", "StoredRun", "stored_result"]
