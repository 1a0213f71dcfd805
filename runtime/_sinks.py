"""Event sinks: where a Runtime sends every event of every run as it happens.

``Runtime(event_sink=...)`` takes any callable ``(event) -> object``. The
runs never call it themselves: they hand each event to a :class:`SinkThread`,
a queue and one daemon thread of the Runtime's own, which calls the sink with
every event, in order, in the context (``contextvars``) of the run that emitted
it. So a slow sink, or one that blocks for good, never holds up a run. A sink
that must reach the event loop does it as any thread does
(``anyio.from_thread``, or ``loop.call_soon_threadsafe``); to follow a run
from async code, use ``RunHandle.events()`` instead. The queue is bounded
(``Runtime(sink_backlog=...)``): past the bound, events for the sink are
dropped and counted, never silently: a
``RuntimeWarning`` at the first drop and when the Runtime closes, and
``Runtime.sink_status`` at any time. When the Runtime exits it waits (at most
``shutdown_grace_s``) for the sink to catch up; what it could not deliver by
then is counted as dropped. A sink that raises is reported once (a
``RuntimeWarning``) and skipped from then on, and never ends a run.

:class:`JsonlSink` writes one JSON object per line, through
:func:`tether.events.dump`, for ``tether trace`` and for any JSONL tool.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Literal, cast

import anyio
import attrs

import tether.runtime._events as ev

from ._deltas import Delta, Pending
from ._log import sink_dropped

EventSink = Callable[[ev.Event], object]

_write = os.write  # JsonlSink's one way to the file (a test makes it fail)


def wants_deltas(sink: object) -> bool:
    """Whether ``sink`` asks for the live deltas too (a ``deltas = True`` attribute)."""
    return getattr(sink, "deltas", False) is True


class _Combined:
    """Calls each sink in turn; a sink that raises is reported once and skipped."""

    __slots__ = ("_failed", "_live", "deltas", "sinks")

    def __init__(self, sinks: Sequence[EventSink]) -> None:
        self.sinks = tuple(sinks)
        self._failed: set[int] = set()
        self._live = tuple(wants_deltas(s) for s in self.sinks)
        #: Some sink asks for the live deltas (each gets them only if it asked).
        self.deltas = any(self._live)

    def __call__(self, event: ev.Event) -> None:
        delta = self.deltas and isinstance(event, ev.DELTA_TYPES)
        for i, sink in enumerate(self.sinks):
            if i in self._failed or (delta and not self._live[i]):
                continue
            try:
                sink(event)
            except Exception as exc:
                self._failed.add(i)
                # Its type only: a sink's message may quote the event (its content).
                sink_dropped(
                    event.run_id, sink, f"raised {type(exc).__name__}; skipped from now on"
                )
                warnings.warn(
                    f"tether: event sink {sink!r} failed and will be skipped from now on: {exc!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def __repr__(self) -> str:
        return f"combine({', '.join(repr(s) for s in self.sinks)})"


@attrs.frozen
class SinkStatus:
    """How the Runtime's event sink keeps up (``Runtime.sink_status``)."""

    #: Events the sink has been called with.
    delivered: int
    #: Events the sink will never see: the backlog was full, or the Runtime
    #: closed before the sink caught up.
    dropped: int
    #: Events waiting for the sink now.
    backlog: int


_STOP = object()


class SinkThread:
    """Calls ``sink`` with every event from a daemon thread of its own (see the module).

    With ``deltas=True`` it also takes the runs' live deltas (:meth:`delta`).
    They go through the same queue, in order with the events; a delta that
    finds the previous one of the same call still waiting (with no event
    queued after it) is joined to it, so a slow sink gets fewer, longer deltas,
    not a backlog filled by them.
    """

    __slots__ = (
        "_closed",
        "_lock",
        "_open",
        "_queue",
        "_thread",
        "_warned",
        "delivered",
        "dropped",
        "sink",
    )

    def __init__(self, sink: EventSink, backlog: int) -> None:
        self.sink = sink
        # The newest queued delta while no event is queued after it: joinable.
        self._open: Pending | None = None
        self._lock = threading.Lock()
        self._queue: queue.Queue[object] = queue.Queue(backlog)
        self.delivered = 0
        self.dropped = 0
        self._warned = False
        self._closed = False
        self._thread = threading.Thread(target=self._deliver, name="tether-event-sink", daemon=True)
        self._thread.start()

    def __call__(self, event: ev.Event) -> None:
        """Queue ``event`` for the sink; never blocks (a full backlog drops it, counted)."""
        self._open = None  # a delta after this event must not join one before it
        self._put(event)

    def delta(self, delta: Delta) -> None:
        """Queue a live delta for the sink, joined to the one waiting before it if it can."""
        with self._lock:
            waiting = self._open
            if waiting is not None and waiting.joins(delta):
                waiting.join(delta)
                return
            pending = Pending(0, delta)
            self._open = pending if self._put(pending) else None

    def _put(self, event: ev.Event | Pending) -> bool:
        try:
            # With the emitting run's context: contextvars (an OpenTelemetry
            # span, say) read in the sink are the run's, as if it were called inline.
            self._queue.put_nowait((contextvars.copy_context(), event))
        except queue.Full:
            self._count_drop()
            return False
        return True

    def _count_drop(self) -> None:
        self.dropped += 1
        if not self._warned:
            self._warned = True
            sink_dropped(
                None,
                self.sink,
                f"{self._queue.maxsize} events behind: its events are dropped (and counted) "
                "until it catches up",
            )
            warnings.warn(
                f"tether: event sink {self.sink!r} is {self._queue.maxsize} events behind; "
                "events for it are dropped (and counted: Runtime.sink_status) until it "
                "catches up",
                RuntimeWarning,
                stacklevel=4,
            )

    @property
    def status(self) -> SinkStatus:
        return SinkStatus(self.delivered, self.dropped, 0 if self._closed else self._queue.qsize())

    def _deliver(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            context, event = cast("tuple[contextvars.Context, ev.Event | Pending]", item)
            if isinstance(event, Pending):
                with self._lock:  # taken: no later delta joins it now
                    if self._open is event:
                        self._open = None
                event = event.event()
            context.run(self.sink, event)
            self.delivered += 1

    async def aclose(self, grace_s: float) -> None:
        """Let the sink catch up for at most ``grace_s`` seconds; count the rest as dropped."""
        await anyio.to_thread.run_sync(self._close, grace_s, abandon_on_cancel=True)

    def _close(self, grace_s: float) -> None:
        self._closed = True
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=grace_s)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            while True:  # what the sink will never get
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    self.dropped += 1
            # The thread ends (it is a daemon: it never holds the process) if the
            # sink ever returns.
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_STOP)
        if self.dropped:
            sink_dropped(
                None, self.sink, f"missed {self.dropped} events ({self.delivered} delivered)"
            )
            warnings.warn(
                f"tether: event sink {self.sink!r} missed {self.dropped} events "
                f"({self.delivered} delivered)",
                RuntimeWarning,
                stacklevel=2,
            )


def combine(*sinks: EventSink | None) -> EventSink:
    """One sink that passes every event to each of ``sinks``, in order (``None``s skipped).

    A sink that raises is reported once (a ``RuntimeWarning``) and skipped from
    then on; the others go on receiving events.
    """
    kept = [s for s in sinks if s is not None]
    for sink in kept:
        if not callable(sink):
            raise TypeError(f"combine() takes callables of one event, got {sink!r}")
    return _Combined(kept)


class JsonlSink:
    """Writes events to a JSON Lines file, one :func:`tether.events.dump` per line.

    Lines are buffered in memory and written, then flushed to the OS, at round
    boundaries (a :class:`~tether.events.Transition`), at every
    :class:`~tether.events.RunFinished`, when ``max_buffered`` lines are
    waiting, and on :meth:`close`. So a reader of the file sees every complete
    round of a run in flight, and a crash loses at most the round in progress.
    The file is opened at construction (a bad path fails there, not mid-run),
    in append mode by default: run ids differ between Runtimes, so one file can
    collect several sessions (``mode="w"`` starts it afresh).

    The file only ever holds whole lines. A write that fails (a full disk)
    is undone (the file is cut back to where the write began) and the sink
    fails for good: the Runtime reports it and skips it, and :meth:`close`
    is quiet. Opening a file in append mode whose last line a crash cut short
    removes that torn line (with a ``RuntimeWarning``), so the next line is not
    glued to it. One writer per file: two processes appending to one file may
    interleave their batches.

    Events must dump to JSON types: a field that is not (a tool argument the
    model could never have sent, say, or a NaN, which strict JSON readers
    such as ``jq`` refuse) raises ``TypeError`` instead of being written as
    some string, and the Runtime then reports the sink as failed.

    With ``deltas=True`` it also writes the runs' live deltas (see docs/guides/streaming.md),
    which are otherwise in no trail; they share the ``seq`` of the event
    before them.

    Use it as a context manager, or call :meth:`close` when the Runtime is
    done::

        with JsonlSink("runs.jsonl") as sink:
            async with tether.Runtime(event_sink=sink) as rt:
                ...
    """

    __slots__ = ("_buffer", "_failed", "_fd", "deltas", "max_buffered", "path")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: Literal["a", "w"] = "a",
        max_buffered: int = 1024,
        deltas: bool = False,
    ) -> None:
        if mode not in ("a", "w"):
            raise ValueError(f"JsonlSink(mode=...) must be 'a' or 'w', got {mode!r}")
        if max_buffered < 1:
            raise ValueError(f"JsonlSink(max_buffered=...) must be >= 1, got {max_buffered!r}")
        self.path = os.fspath(path)
        self.max_buffered = max_buffered
        #: Also write the live deltas (``TextDelta``, ``ToolCallDelta``).
        self.deltas = bool(deltas)
        self._buffer: list[str] = []
        self._failed: BaseException | None = None
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if mode == "w" else 0)
        self._fd: int | None = os.open(self.path, flags, 0o666)
        try:
            self._cut_torn_line()
        except OSError:
            os.close(self._fd)
            raise

    def _cut_torn_line(self) -> None:
        assert self._fd is not None
        size = os.lseek(self._fd, 0, os.SEEK_END)
        if size == 0:
            return
        with open(self.path, "rb") as file:
            end = size
            tail = b""
            while end > 0 and b"\n" not in tail:
                start = max(0, end - 4096)
                file.seek(start)
                tail = file.read(end - start) + tail
                end = start
        if tail.endswith(b"\n"):
            return
        keep = size - (len(tail) - tail.rfind(b"\n") - 1)
        os.ftruncate(self._fd, keep)
        warnings.warn(
            f"JsonlSink: the last line of {self.path!r} was cut short ({size - keep} bytes, "
            "a crash mid-write, likely); it was removed",
            RuntimeWarning,
            stacklevel=3,
        )

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __call__(self, event: ev.Event) -> None:
        if self._fd is None:
            raise RuntimeError(f"JsonlSink({self.path!r}) is closed")
        data = ev.dump(event)
        try:
            line = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"event {data.get('type')} seq={event.seq} of run {event.run_id!r} "
                f"does not dump to JSON: {exc}"
            ) from exc
        self._buffer.append(line)
        if (
            isinstance(event, ev.Transition | ev.RunFinished)
            or len(self._buffer) >= self.max_buffered
        ):
            self.flush()

    def flush(self) -> None:
        """Write the buffered lines, whole, to the OS.

        A write that fails is undone and closes the sink; the error is raised.
        """
        fd = self._fd
        if fd is None or not self._buffer:
            return
        lines, self._buffer = self._buffer, []
        data = memoryview(("\n".join(lines) + "\n").encode("utf-8"))
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[_write(fd, data) :]
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)  # no half line left behind
            self._failed = exc
            self._fd = None
            os.close(fd)
            raise

    def close(self) -> None:
        """Write what is buffered and close the file; closing twice, or after a failed
        write (already reported), is fine."""
        fd = self._fd
        if fd is None:
            return
        try:
            self.flush()
        finally:
            if self._fd is not None:
                self._fd = None
                os.close(fd)

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._failed is not None:
            state = f"failed: {self._failed!r}"
        else:
            state = "closed" if self._fd is None else f"{len(self._buffer)} buffered"
        return f"<JsonlSink {self.path!r} {state}>"


__all__ = ["JsonlSink", "SinkStatus", "SinkThread"]
