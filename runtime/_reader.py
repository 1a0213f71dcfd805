"""A batched reader of one run's trail, for carrying it across a process boundary.

``RunHandle.reader(kind, start=...)`` gives one. An integration that serves a
run to a reader in another process (``tether.ray``'s hosts; a web view) keeps
one :class:`TrailReader` per remote reader and answers each poll with
:meth:`TrailReader.drain`: everything since the last poll, in the events'
JSON forms (:func:`tether.events.dump`), at most :data:`MAX_BATCH` items. A
reader costs one call per batch rather than one per event, and the run never
waits for it: unread deltas are joined per call, never dropped (see
:mod:`._deltas`).

Kinds: ``"events"`` the kept events; ``"live"`` the kept events with the live
deltas between them (from the moment the reader is made); ``"text"`` the text
of the model calls, as ``str`` chunks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

import tether.runtime._events as ev

from ._deltas import DeltaBuffer

if TYPE_CHECKING:
    from ._trail import Trail

#: What a reader reads: the kept events; the kept events with the live deltas; the text.
ReaderKind = Literal["events", "live", "text"]
#: The most items one :meth:`TrailReader.drain` returns.
MAX_BATCH = 2_000


class TrailReader:
    """One reader's cursor on one run's trail (see the module docstring).

    Call :meth:`close` when the reader goes away (a reader of deltas holds
    them until read or closed).
    """

    __slots__ = ("_buffer", "_index", "_trail", "kind")

    #: The most items one :meth:`drain` returns.
    MAX_BATCH: ClassVar[int] = MAX_BATCH

    def __init__(
        self, trail: Trail, kind: ReaderKind, start: int = 0, after_seam: int = -1
    ) -> None:
        if kind not in ("events", "live", "text"):
            raise ValueError(f"reader kind must be 'events', 'live' or 'text', got {kind!r}")
        self._trail, self.kind = trail, kind
        if kind != "text":
            # A reader coming over from a process that died may have read events past
            # the checkpoint the run was resumed from: it goes on from the first seam
            # (RunResumed) after the last one it saw, if that comes before ``start``.
            for seq in range(after_seam + 1, min(start, len(trail))):
                if isinstance(trail.event(seq), ev.RunResumed):
                    start = seq
                    break
        self._index = start
        self._buffer: DeltaBuffer | None = None
        if kind != "events":
            self._buffer = trail.listen(DeltaBuffer(text_only=kind == "text"))

    @property
    def finished(self) -> bool:
        """The run's trail is over in this Runtime (it ended, or left for the store)."""
        return self._trail.finished

    async def wait_change(self) -> None:
        """Until the trail has something new (an event, a delta, its end)."""
        await self._trail.wait_change()

    def drain(self) -> list[Any]:
        """What there is to read now, in order: events' JSON forms (or text chunks)."""
        trail, buffer = self._trail, self._buffer
        if buffer is not None and buffer.text_only:
            texts: list[Any] = []
            while len(buffer) and len(texts) < MAX_BATCH:
                delta = buffer.pop()
                assert isinstance(delta, ev.TextDelta)
                texts.append(delta.text)
            return texts
        if buffer is None or not len(buffer):
            end = min(len(trail), self._index + MAX_BATCH)
            out = trail.dumped(self._index)[: end - self._index]
            self._index = end
            return out
        out = []
        while len(out) < MAX_BATCH:
            if buffer.ready(self._index):
                out.append(ev.dump(buffer.pop()))
            elif self._index < len(trail):
                out.append(ev.dump(trail.event(self._index)))
                self._index += 1
            else:
                break
        return out

    def done(self) -> bool:
        """The trail is over here and this reader has read all of it."""
        trail, buffer = self._trail, self._buffer
        if buffer is not None and len(buffer):
            return False
        return trail.finished and (self.kind == "text" or self._index >= len(trail))

    def close(self) -> None:
        """Stop reading: the trail forgets this reader's deltas."""
        if self._buffer is not None:
            self._trail.forget(self._buffer)
            self._buffer = None


__all__ = ["MAX_BATCH", "ReaderKind", "TrailReader"]
