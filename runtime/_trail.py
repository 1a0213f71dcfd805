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

Stage events are most of a round's events, and most runs' events are never
read one by one. So unless a sink takes every event as it comes, a stage event
is recorded compactly, as one number the garbage collector does not track
(:data:`_Compact`), and becomes its event object when it is first read: by a
follower, by ``RunResult.events``, by a summary. What a reader sees is the same
either way. (With thousands of runs in flight, the collector's time is most of
the wall time, and it grows with the tracked objects the runs keep.) The other
events of every round whose fields are plain values (a model call started, a
tool call started and finished, the transition, a usage charge) are recorded
the same way, as a tuple of their values (:data:`_Noted`), with
:meth:`Trail.note`::

    trail.note(ev.Transition, kind="continue", reason="tool_use")

and ``ModelCallFinished``, whose fields are read off the response, keeps the
response and the function that reads them until it is read
(:meth:`Trail.note_from`).

The collector stops tracking such a tuple at its first pass when it holds only
plain values (a tool call's arguments, a dict, keep it tracked: one object then,
not an event and its fields).

Deltas (see docs/guides/streaming.md) pass through the trail without being kept: :meth:`delta`
hands one to each reader that asked (see :mod:`._deltas`) and to the sink's
delta channel, if one asked. ``streaming`` says whether anyone did; the model
client reads it before building a delta, so a run nobody streams builds none.
"""

from __future__ import annotations

import operator
import time
import typing
import weakref
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypedDict, TypeVar, overload

import anyio
import attrs

import tether.runtime._events as ev

from ._deltas import Delta, DeltaBuffer

T = TypeVar("T")


class Head(TypedDict):
    """The fields every event carries, stamped by the trail."""

    run_id: str
    seq: int
    round: int
    at: float


class Trail:
    """A run's events: appended while it runs, frozen into a tuple when it ends."""

    __slots__ = (
        "_delta_sink",
        "_events",
        "_finished",
        "_next",
        "_open",
        "_readers",
        "_sink",
        "_waiter",
        "round",
        "run_id",
        "streaming",
    )

    def __init__(
        self,
        run_id: str,
        sink: Callable[[ev.Event], object] | None = None,
        delta_sink: Callable[[Delta], object] | None = None,
    ) -> None:
        self.run_id = run_id
        #: The round the next events belong to (0 during preparation).
        self.round = 0
        # Event objects, and events recorded compactly (see the module docstring).
        self._events: list[ev.Event | _Compact | _Noted] = []
        self._finished: EventLog | None = None
        self._sink = sink
        self._waiter: anyio.Event | None = None
        # The stages open now, innermost last; and the one stage() names next.
        self._open: list[ev.Stage] = []
        self._next: ev.Stage = "input"
        #: Someone wants this run's deltas (a reader, or the sink): build them.
        self.streaming = delta_sink is not None
        self._delta_sink = delta_sink
        # The delta readers' buffers; no list until the first reader (most runs have none).
        self._readers: list[weakref.ref[DeltaBuffer]] | None = None

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

    def note(self, kind: type[ev.Event], /, **fields: Any) -> None:
        """Record an event of a kind kept compactly (:data:`NOTED`), given its own fields
        (every one of them): as :meth:`add` would, without building it until it is read.

        Not checked here, on the hot path: a missing field raises ``KeyError``, an
        unknown one is dropped (with a sink it is the event's ``TypeError``, which
        ``tests/test_trail.py`` relies on to catch a misspelt field).
        """
        if self._sink is not None:
            self.add(kind(**self.head(), **fields))
            return
        code = _NOTE_CODE[kind]
        self._events.append((code, self.round, time.time(), *_NOTE_VALUES[code](fields)))
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    def note_from(
        self, kind: type[ev.Event], fields: Callable[[T], dict[str, Any]], source: T
    ) -> None:
        """Record an event whose own fields are ``fields(source)``, called when the event
        is first read (with a sink, at once). ``source`` must not change: a frozen value."""
        if self._sink is not None:
            self.add(kind(**self.head(), **fields(source)))
            return
        self._events.append((_DERIVED, self.round, time.time(), kind, fields, source))
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    def delta_head(self) -> Head:
        """The header of a delta: the ``seq`` of the last kept event (deltas take no number)."""
        return {
            "run_id": self.run_id,
            "seq": len(self._events) - 1,
            "round": self.round,
            "at": time.time(),
        }

    def delta(self, delta: Delta) -> None:
        """Hand ``delta`` to every reader that asked for deltas, and to the sink's channel.

        Never kept, never blocks: a reader behind gets it joined (see :mod:`._deltas`).
        """
        if self._delta_sink is not None:
            self._delta_sink(delta)
        pos, dead = len(self._events), False
        for ref in self._readers or ():
            buffer = ref()
            if buffer is None:
                dead = True
            else:
                buffer.push(pos, delta)
        if dead:
            self._prune()
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    def listen(self, buffer: DeltaBuffer) -> DeltaBuffer:
        """Subscribe ``buffer`` to the run's deltas from now on (none once it has ended)."""
        if self._finished is None:
            # The callback unsubscribes a reader dropped without aclose() (a break,
            # a cancelled task) at once. It refers back to the trail: finish()
            # drops the refs, so a finished run is still freed by reference counting.
            if self._readers is None:
                self._readers = []
            self._readers.append(weakref.ref(buffer, self._dropped))
            self.streaming = True
        return buffer

    def forget(self, buffer: DeltaBuffer) -> None:
        """Unsubscribe ``buffer``."""
        self._readers = [r for r in self._readers or () if r() not in (None, buffer)]
        self.streaming = bool(self._readers) or self._delta_sink is not None

    def _dropped(self, ref: weakref.ref[DeltaBuffer]) -> None:
        self._prune()

    def _prune(self) -> None:
        self._readers = [r for r in self._readers or () if r() is not None]
        self.streaming = bool(self._readers) or self._delta_sink is not None

    def stage(self, stage: ev.Stage) -> Trail:
        """A bracket around one stage of the run (see the module docstring)."""
        self._next = stage
        return self

    # Stage events are most of a round's events: recorded inline, no helper call.
    def __enter__(self) -> None:
        stage = self._next
        self._open.append(stage)
        if self._sink is not None:
            at = time.time()
            self.add(
                ev.StageEntered(
                    run_id=self.run_id, seq=len(self._events), round=self.round, at=at, stage=stage
                )
            )
            return
        self._events.append(complex(time.time(), (self.round << 5) | _STAGE_CODE[stage] | 1))
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stage = self._open.pop()
        if exc_type is not None:
            return
        if self._sink is not None:
            at = time.time()
            self.add(
                ev.StageExited(
                    run_id=self.run_id, seq=len(self._events), round=self.round, at=at, stage=stage
                )
            )
            return
        self._events.append(complex(time.time(), (self.round << 5) | _STAGE_CODE[stage]))
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    def enter(self, stage: ev.Stage) -> None:
        """Open ``stage`` for a block whose end is not one ``with`` statement's."""
        self.stage(stage).__enter__()

    def exit(self) -> None:
        """Close the stage :meth:`enter` opened (on every path)."""
        self.__exit__(None, None, None)

    def restore(self, events: Sequence[ev.Event]) -> None:
        """Start from a durable run's stored events (a resumed run, before it runs)."""
        assert not self._events, "restore() is for a trail that has no events yet"
        self._events = list(events)

    def finish(self) -> EventLog:
        """Freeze the trail (the run has ended) and wake every follower."""
        frozen = self._finished = EventLog(self.run_id, self._events)
        self._events = []
        # Readers drain what their buffers hold; nothing more comes.
        self._readers = None
        self.streaming = False
        self._delta_sink = None
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None
        return frozen

    # ----------------------------------------------------------------- reading

    @property
    def events(self) -> Sequence[ev.Event]:
        """Every event so far."""
        if self._finished is not None:
            return self._finished
        return [self.event(i) for i in range(len(self._events))]

    def event(self, seq: int) -> ev.Event:
        """The event numbered ``seq``."""
        if self._finished is not None:
            return self._finished[seq]
        return _built(self.run_id, self._events, seq)

    def dumped(self, start: int) -> list[dict[str, Any]]:
        """The events from ``start`` on, as :func:`~._events.dump` makes them (a run store's).

        A compact stage event is dumped as it is, without becoming an object.
        """
        items = self._events if self._finished is None else self._finished._items
        run_id, out = self.run_id, []
        for seq in range(start, len(items)):
            item = items[seq]
            if isinstance(item, tuple):
                item = _built(run_id, items, seq)
            if isinstance(item, complex):
                code = int(item.imag)
                out.append(
                    {
                        "run_id": run_id,
                        "seq": seq,
                        "round": code >> 5,
                        "at": item.real,
                        "stage": _STAGES[(code & 31) >> 1],
                        "type": "StageEntered" if code & 1 else "StageExited",
                    }
                )
            else:
                out.append(ev.dump(item))
        return out

    @property
    def finished(self) -> bool:
        return self._finished is not None

    def __len__(self) -> int:
        return len(self._events) if self._finished is None else len(self._finished)

    async def wait_beyond(self, count: int) -> None:
        """Wait until the trail has more than ``count`` events or is finished."""
        while self._finished is None and len(self._events) <= count:
            if self._waiter is None:
                self._waiter = anyio.Event()
            await self._waiter.wait()

    async def wait_change(self) -> None:
        """Wait for the next kept event, delta, or the end of the trail."""
        if self._finished is None:
            if self._waiter is None:
                self._waiter = anyio.Event()
            await self._waiter.wait()

    def follow(self) -> EventStream:
        """Every event from the first, then live ones, until the trail is finished."""
        return EventStream(self)

    def follow_live(self) -> LiveEventStream:
        """:meth:`follow`, with the live deltas from now on between the kept events."""
        return LiveEventStream(self)

    def stream_text(self) -> TextStream:
        """The text of the run's model calls from now on, as it arrives."""
        return TextStream(self)


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
        if self._index >= len(trail):
            await trail.wait_beyond(self._index)
            if self._index >= len(trail):
                raise StopAsyncIteration
        event = trail.event(self._index)
        self._index += 1
        return event


#: A stage event recorded compactly (see the module docstring): one ``complex``,
#: whose real part is the event's time and whose imaginary part holds the
#: round, the stage and whether it was entered or exited, as the integer
#: ``round << 5 | stage_index << 1 | entered``. A complex number holds two floats
#: in one object that the garbage collector does not track, and a float holds
#: these integers exactly (rounds far beyond any run's).
_Compact = complex
_STAGES: tuple[ev.Stage, ...] = typing.get_args(ev.Stage)
_STAGE_CODE: dict[ev.Stage, int] = {stage: i << 1 for i, stage in enumerate(_STAGES)}
assert len(_STAGES) <= 16, "a stage index must fit in four bits"


#: An event of a kind in :data:`NOTED` recorded compactly: the tuple
#: ``(kind's index in NOTED, round, at, *its own fields' values in their order)``;
#: or one recorded with :meth:`Trail.note_from`: ``(_DERIVED, round, at, kind, fields, source)``.
_Noted = tuple[Any, ...]
_DERIVED = -1
#: The kinds :meth:`Trail.note` records compactly: every run or every round has
#: them, and their own fields hold plain values (str, int, float, bool, None, a tool
#: call's arguments).
NOTED: tuple[type[ev.Event], ...] = (
    ev.RunStarted,
    ev.ModelCallStarted,
    ev.ToolCallStarted,
    ev.ToolCallFinished,
    ev.Transition,
    ev.UsageCharged,
)
_NOTE_CODE: dict[type[ev.Event], int] = {kind: i for i, kind in enumerate(NOTED)}
_HEAD_FIELDS = frozenset(Head.__annotations__)
#: Each kind's own fields, in their order.
_NOTE_FIELDS = tuple(
    tuple(f.name for f in attrs.fields(kind) if f.name not in _HEAD_FIELDS) for kind in NOTED
)
assert all(len(names) >= 2 for names in _NOTE_FIELDS), "itemgetter must return a tuple"
#: Each kind's own fields' values, from the keyword arguments (a missing one: KeyError).
_NOTE_VALUES = tuple(operator.itemgetter(*names) for names in _NOTE_FIELDS)


def _built(run_id: str, items: list[ev.Event | _Compact | _Noted], seq: int) -> ev.Event:
    """``items[seq]`` as its event object, building it (once) if it is compact."""
    item = items[seq]
    if isinstance(item, tuple):
        code, round, at, *values = item
        if code == _DERIVED:
            kind, fields, source = values
            derived: ev.Event = kind(run_id=run_id, seq=seq, round=round, at=at, **fields(source))
            items[seq] = derived
            return derived
        noted = NOTED[code](
            run_id=run_id,
            seq=seq,
            round=round,
            at=at,
            **dict(zip(_NOTE_FIELDS[code], values, strict=True)),
        )
        items[seq] = noted
        return noted
    if not isinstance(item, complex):
        return item
    code = int(item.imag)
    cls = ev.StageEntered if code & 1 else ev.StageExited
    round, stage, at = code >> 5, _STAGES[(code & 31) >> 1], item.real
    event = items[seq] = cls(run_id=run_id, seq=seq, round=round, at=at, stage=stage)
    return event


class EventLog(Sequence[ev.Event]):
    """A finished run's events (``RunResult.events``): a read-only sequence.

    It behaves as the tuple of the run's events (indexing, slicing, iteration,
    ``==`` with any sequence of the same events); stage events recorded
    compactly become objects when first read (see the module docstring).
    """

    __slots__ = ("_items", "_run_id")

    def __init__(self, run_id: str, items: list[ev.Event | _Compact | _Noted]) -> None:
        self._run_id = run_id
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> ev.Event: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[ev.Event, ...]: ...
    def __getitem__(self, index: int | slice) -> ev.Event | tuple[ev.Event, ...]:
        items = self._items
        if isinstance(index, slice):
            return tuple(_built(self._run_id, items, i) for i in range(len(items))[index])
        if index < 0:
            index += len(items)
        if not 0 <= index < len(items):
            raise IndexError("event index out of range")
        return _built(self._run_id, items, index)

    def __iter__(self) -> Iterator[ev.Event]:
        for i in range(len(self._items)):
            yield _built(self._run_id, self._items, i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Sequence[ev.Event]) -> tuple[ev.Event, ...]:
        return (*self, *other)

    def __repr__(self) -> str:
        return f"EventLog({tuple(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles (and copies) as the plain tuple of its events.
        return (tuple, (tuple(self),))


class LiveEventStream:
    """``handle.events(deltas=True)``: the kept events (replayed, then live) with
    the live deltas between them, in the order they happened.

    Deltas from before the stream was made are not replayed. It subscribes
    when it is made, so ``rt.start(...)`` followed by ``handle.events(deltas=True)``
    sees every delta of the run.
    """

    __slots__ = ("_buffer", "_index", "_trail")

    def __init__(self, trail: Trail) -> None:
        self._trail = trail
        self._index = 0
        self._buffer = trail.listen(DeltaBuffer())

    def __aiter__(self) -> LiveEventStream:
        return self

    async def __anext__(self) -> ev.Event:
        trail, buffer = self._trail, self._buffer
        while True:
            if buffer.ready(self._index):
                return buffer.pop()
            if self._index < len(trail):
                event = trail.event(self._index)
                self._index += 1
                return event
            if trail.finished:
                raise StopAsyncIteration
            await trail.wait_change()

    async def aclose(self) -> None:
        """Stop following: the run keeps no deltas for this stream any more."""
        self._trail.forget(self._buffer)


class TextStream:
    """``handle.stream_text()``: the text of the run's model calls as it arrives,
    until the run ends. A slow reader gets the text joined, never less of it."""

    __slots__ = ("_buffer", "_trail")

    def __init__(self, trail: Trail) -> None:
        self._trail = trail
        self._buffer = trail.listen(DeltaBuffer(text_only=True))

    def __aiter__(self) -> TextStream:
        return self

    async def __anext__(self) -> str:
        trail, buffer = self._trail, self._buffer
        while True:
            if len(buffer):
                delta = buffer.pop()
                assert isinstance(delta, ev.TextDelta)
                return delta.text
            if trail.finished:
                raise StopAsyncIteration
            await trail.wait_change()

    async def aclose(self) -> None:
        """Stop following: the run keeps no text for this stream any more."""
        self._trail.forget(self._buffer)
