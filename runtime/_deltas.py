"""Live deltas for the readers that ask for them (see docs/guides/streaming.md).

A run's kept events live in its :class:`~._trail.Trail`; its deltas
(:class:`~._events.TextDelta`, :class:`~._events.ToolCallDelta`,
:class:`~._events.ReasoningDelta`) are kept
nowhere. Each reader that asks for them gets a :class:`DeltaBuffer` of its
own, which the trail fills as deltas arrive and the reader empties at its own
pace. A reader that falls behind never holds up the run and never loses text:
a delta that finds the previous one of the same call still unread (with no
kept event between them) is joined to it, so its buffer holds at most one
entry per call and kept event, however slow it is.

The streams that read them (``LiveEventStream``, ``TextStream``) are in
:mod:`._trail`. The trail holds buffers by weak reference: a reader that stops reading (a
``break``, a cancelled task) and drops its stream unsubscribes with it, and
:meth:`aclose` does it at once. A run nobody streams has no buffer, and its
model client builds no delta (``Trail.streaming`` is false).
"""

from __future__ import annotations

from collections import deque

import attrs

import tether.runtime._events as ev

Delta = ev.TextDelta | ev.ToolCallDelta | ev.ReasoningDelta | ev.ToolOutputDelta


class Pending:
    """One unread delta, or several of one call joined: the first and the pieces."""

    __slots__ = ("first", "parts", "pos")

    def __init__(self, pos: int, first: Delta) -> None:
        #: How many kept events came before it: it is read after those.
        self.pos = pos
        self.first = first
        self.parts: list[str] | None = None

    def joins(self, delta: Delta) -> bool:
        first = self.first
        if delta.run_id != first.run_id:  # a sink's deltas come from every run
            return False
        if isinstance(first, ev.TextDelta | ev.ReasoningDelta):
            return (
                type(delta) is type(first)
                and delta.call_index == first.call_index
                and delta.attempt == first.attempt
            )
        if isinstance(first, ev.ToolOutputDelta):
            return isinstance(delta, ev.ToolOutputDelta) and delta.call_id == first.call_id
        return (
            isinstance(delta, ev.ToolCallDelta)
            and delta.call_id == first.call_id
            and delta.attempt == first.attempt
        )

    def join(self, delta: Delta) -> None:
        if self.parts is None:
            self.parts = [_piece(self.first)]
        self.parts.append(_piece(delta))

    def event(self) -> Delta:
        if self.parts is None:
            return self.first
        joined = "".join(self.parts)
        if isinstance(self.first, ev.TextDelta | ev.ReasoningDelta | ev.ToolOutputDelta):
            return attrs.evolve(self.first, text=joined)
        return attrs.evolve(self.first, arguments_delta=joined)


def _piece(delta: Delta) -> str:
    return delta.arguments_delta if isinstance(delta, ev.ToolCallDelta) else delta.text


class DeltaBuffer:
    """One reader's unread deltas (see the module docstring)."""

    __slots__ = ("__weakref__", "_items", "text_only")

    def __init__(self, *, text_only: bool = False) -> None:
        #: Only text deltas, whatever the kept events between them (``stream_text``).
        self.text_only = text_only
        self._items: deque[Pending] = deque()

    def push(self, pos: int, delta: Delta) -> None:
        """Add ``delta``, emitted after ``pos`` kept events; never blocks, never drops."""
        if self.text_only:
            if not isinstance(delta, ev.TextDelta):
                return
            pos = 0  # a text reader reads no kept events: nothing to keep the deltas apart
        items = self._items
        if items:
            last = items[-1]
            if last.pos == pos and last.joins(delta):
                last.join(delta)
                return
        items.append(Pending(pos, delta))

    def ready(self, read: int) -> bool:
        """Whether a delta is due for a reader that has read ``read`` kept events."""
        items = self._items
        return bool(items) and items[0].pos <= read

    def pop(self) -> Delta:
        return self._items.popleft().event()

    def __len__(self) -> int:
        return len(self._items)
