"""A run's event trail: the events so far, their followers, and the stage brackets.

The trail is the only place a run's events are kept. It numbers them (``seq``,
gap-free from 0), wakes the readers that follow it, and hands every event to
the Runtime's sink. An event is built by its own class, typed, with the header
the trail stamps::

    trail.add(ev.ModelCallStarted(**trail.head(), attempt=1))

``head()`` is a :class:`Head` (a TypedDict), so mypy checks both the header
and the event's own fields. Stages are brackets::

    with trail.stage("model"):
        ...

A bracket emits ``StageEntered`` on entry and ``StageExited`` when its block
ends normally. A block left by an exception (a cancellation, a crash) leaves
the stage open: the trail then shows where the run was when it was cut short.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TypedDict

import anyio

import tether.runtime._events as ev


class Head(TypedDict):
    """The fields every event carries, stamped by the trail."""

    run_id: str
    seq: int
    round: int
    at: float


class Trail:
    """A run's events: appended while it runs, frozen into a tuple when it ends."""

    __slots__ = ("_events", "_finished", "_sink", "_stages", "_waiter", "round", "run_id")

    def __init__(self, run_id: str, sink: Callable[[ev.Event], object] | None = None) -> None:
        self.run_id = run_id
        #: The round the next events belong to (0 during preparation).
        self.round = 0
        self._events: list[ev.Event] = []
        self._finished: tuple[ev.Event, ...] | None = None
        self._sink = sink
        self._waiter: anyio.Event | None = None
        # Stage brackets, one per stage name; dropped by finish() (they refer back).
        self._stages: dict[str, Stage] = {}

    # ----------------------------------------------------------------- writing

    def head(self) -> Head:
        """The header of the next event."""
        return {
            "run_id": self.run_id,
            "seq": len(self._events),
            "round": self.round,
            "at": time.time(),
        }

    def add(self, event: ev.Event) -> None:
        """Append ``event`` (built with :meth:`head`), wake followers, feed the sink."""
        self._events.append(event)
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None
        if self._sink is not None:
            self._sink(event)

    def stage(self, stage: ev.Stage) -> Stage:
        """A bracket around one stage of the run (see the module docstring)."""
        bracket = self._stages.get(stage)
        if bracket is None:  # one per stage name and trail, made on first use
            bracket = self._stages[stage] = Stage(self, stage)
        return bracket

    def finish(self) -> tuple[ev.Event, ...]:
        """Freeze the trail (the run has ended) and wake every follower."""
        frozen = self._finished = tuple(self._events)
        self._events = []
        self._stages = {}
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None
        return frozen

    # ----------------------------------------------------------------- reading

    @property
    def events(self) -> Sequence[ev.Event]:
        """Every event so far."""
        return self._events if self._finished is None else self._finished

    @property
    def finished(self) -> bool:
        return self._finished is not None

    def __len__(self) -> int:
        return len(self.events)

    async def wait_beyond(self, count: int) -> None:
        """Wait until the trail has more than ``count`` events or is finished."""
        while self._finished is None and len(self._events) <= count:
            if self._waiter is None:
                self._waiter = anyio.Event()
            await self._waiter.wait()

    def follow(self) -> EventStream:
        """Every event from the first, then live ones, until the trail is finished."""
        return EventStream(self)


class Stage:
    """``with trail.stage(name):`` — see :meth:`Trail.stage`."""

    __slots__ = ("_stage", "_trail")

    def __init__(self, trail: Trail, stage: ev.Stage) -> None:
        self._trail = trail
        self._stage = stage

    # Stage events are most of a round's events: built directly, no keyword packing.
    def __enter__(self) -> None:
        trail = self._trail
        trail.add(
            ev.StageEntered(
                run_id=trail.run_id,
                seq=len(trail._events),
                round=trail.round,
                at=time.time(),
                stage=self._stage,
            )
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            trail = self._trail
            trail.add(
                ev.StageExited(
                    run_id=trail.run_id,
                    seq=len(trail._events),
                    round=trail.round,
                    at=time.time(),
                    stage=self._stage,
                )
            )

    # For a stage whose end is not one ``with`` block's (it closes on every path).
    enter = __enter__

    def exit(self) -> None:
        self.__exit__(None, None, None)


class EventStream:
    """An async iterator over a run's events: replay, then live.

    A plain iterator object rather than an async generator, so a reader may
    stop early (``break``) without leaving a generator to finalize.
    """

    __slots__ = ("_index", "_trail")

    def __init__(self, trail: Trail) -> None:
        self._trail = trail
        self._index = 0

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ev.Event:
        trail = self._trail
        if self._index >= len(trail.events):
            await trail.wait_beyond(self._index)
            if self._index >= len(trail.events):
                raise StopAsyncIteration
        event = trail.events[self._index]
        self._index += 1
        return event
