"""Event sinks: where a Runtime sends every event of every run as it happens.

``Runtime(event_sink=...)`` takes any callable ``(event) -> object``. The
runtime calls it synchronously from the run that emitted the event, so a sink
must be quick and must not await; a sink that raises is reported once (a
``RuntimeWarning``) and skipped from then on, and never ends a run.

:class:`JsonlSink` writes one JSON object per line, through
:func:`tether.events.dump`, for ``tether trace`` and for any JSONL tool.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import IO, Literal

import tether.runtime._events as ev

EventSink = Callable[[ev.Event], object]


class _Combined:
    """Calls each sink in turn; a sink that raises is reported once and skipped."""

    __slots__ = ("_failed", "sinks")

    def __init__(self, sinks: Sequence[EventSink]) -> None:
        self.sinks = tuple(sinks)
        self._failed: set[int] = set()

    def __call__(self, event: ev.Event) -> None:
        for i, sink in enumerate(self.sinks):
            if i in self._failed:
                continue
            try:
                sink(event)
            except Exception as exc:
                self._failed.add(i)
                warnings.warn(
                    f"tether: event sink {sink!r} failed and will be skipped from now on: {exc!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def __repr__(self) -> str:
        return f"combine({', '.join(repr(s) for s in self.sinks)})"


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

    Events must dump to JSON types: a field that is not (a tool argument the
    model could never have sent, say, or a NaN, which strict JSON readers
    such as ``jq`` refuse) raises ``TypeError`` instead of being written as
    some string, and the Runtime then reports the sink as failed.

    Use it as a context manager, or call :meth:`close` when the Runtime is
    done::

        with JsonlSink("runs.jsonl") as sink:
            async with tether.Runtime(event_sink=sink) as rt:
                ...
    """

    __slots__ = ("_buffer", "_file", "max_buffered", "path")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: Literal["a", "w"] = "a",
        max_buffered: int = 1024,
    ) -> None:
        if mode not in ("a", "w"):
            raise ValueError(f"JsonlSink(mode=...) must be 'a' or 'w', got {mode!r}")
        if max_buffered < 1:
            raise ValueError(f"JsonlSink(max_buffered=...) must be >= 1, got {max_buffered!r}")
        self.path = os.fspath(path)
        self.max_buffered = max_buffered
        self._buffer: list[str] = []
        self._file: IO[str] | None = open(self.path, mode, encoding="utf-8")  # noqa: SIM115

    @property
    def closed(self) -> bool:
        return self._file is None

    def __call__(self, event: ev.Event) -> None:
        if self._file is None:
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
        """Write the buffered lines and flush the file."""
        if self._file is None or not self._buffer:
            return
        lines, self._buffer = self._buffer, []
        self._file.write("\n".join(lines) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file; closing twice is fine."""
        if self._file is None:
            return
        try:
            self.flush()
        finally:
            self._file.close()
            self._file = None

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
        state = "closed" if self._file is None else f"{len(self._buffer)} buffered"
        return f"<JsonlSink {self.path!r} {state}>"


__all__ = ["JsonlSink"]
