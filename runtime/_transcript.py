"""A run's transcript: the history it starts from, and what it hands back.

:class:`Transcript` is the Run's room for the messages that outlive one run:
the ``history=`` a caller passed in. A run that has none gets no Transcript,
and its round loop pays nothing for the feature.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio.lowlevel

from tether.providers import Message

from ._state import Decision, RunState
from ._trail import Trail


class Transcript:
    """What a run's transcript starts from and where it goes when the run ends."""

    __slots__ = ("_history",)

    def __init__(self, history: Sequence[Message]) -> None:
        self._history = tuple(history)

    @classmethod
    def of(cls, history: Sequence[Message] = ()) -> Transcript | None:
        """The run's transcript room, or ``None`` when it has nothing to do."""
        return cls(history) if history else None

    async def begin(self, state: RunState, trail: Trail) -> None:
        """Before the run's first stage: put the history in front of the run's messages."""
        await anyio.lowlevel.checkpoint()
        state.messages[:0] = self._history

    async def finish(self, decision: Decision | None) -> Decision | None:
        """When the run has decided (or was cut short): keep what must be kept."""
        return decision


__all__ = ["Transcript"]
