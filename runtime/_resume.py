"""Where a run claimed from a run store goes on: its resume point (docs/guides/durable.md).

A :class:`~._durable.Durable` made from a claim hands its run a
:class:`ResumePoint`; the run restores itself from it (:meth:`ResumePoint.restore`)
and continues through the same round code a live run uses:

* no checkpoint yet (the owner died during preparation): the run starts over;
* a checkpoint at a round boundary: the run goes on with the next round, the
  one that was in flight at the crash;
* a parked run, answered: the run first finishes the held tool round
  (:class:`HeldRound`), from its approvals on: the calls are not decided again,
  their ``ToolCallStarted`` and ``ApprovalRequested`` are in the trail already.

In every case the first tool round the run runs (:attr:`ResumePoint.round`)
answers the calls whose results were recorded from the records, by call id
(:meth:`~._durable.Durable.recall`): a recorded call never runs twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

import tether.runtime._events as ev
from tether.providers import ModelResponse

if TYPE_CHECKING:
    from ._state import RunState
    from ._trail import Head, Trail


@attrs.frozen(kw_only=True)
class Admission:
    """How a tool round had decided its calls when it parked (kept in the checkpoint).

    ``settled``: the calls answered at admission (denied, nudged, unknown),
    call id → (content, is_error); ``admitted``: the ids of the calls let
    through; ``asks``: (call id, reason) of the held calls; ``budget_hit``:
    whether the tool-call budget refused a call.
    """

    settled: Mapping[str, tuple[str, bool]]
    admitted: tuple[str, ...]
    asks: tuple[tuple[str, str], ...]
    budget_hit: bool

    def dump(self) -> dict[str, Any]:
        """JSON-ready (for the park's checkpoint)."""
        return {
            "settled": {i: [content, error] for i, (content, error) in self.settled.items()},
            "admitted": list(self.admitted),
            "asks": [list(ask) for ask in self.asks],
            "budget_hit": self.budget_hit,
        }

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> Admission:
        """What :meth:`dump` made ``data`` from."""
        return cls(
            settled={i: (str(c), bool(e)) for i, (c, e) in data["settled"].items()},
            admitted=tuple(data["admitted"]),
            asks=tuple((str(i), str(reason)) for i, reason in data["asks"]),
            budget_hit=bool(data["budget_hit"]),
        )


@attrs.frozen(kw_only=True)
class HeldRound:
    """A parked run's held tool round, answered: the run finishes it first."""

    #: The model's response whose calls were held (its usage was charged before the park).
    response: ModelResponse
    #: The hosts' answers, by call id: (approved, note).
    answers: Mapping[str, tuple[bool, str | None]]
    #: How the round had decided its calls; ``None`` for a checkpoint written before
    #: admissions were kept: the round decides its calls again.
    admission: Admission | None


@attrs.frozen(kw_only=True)
class ResumePoint:
    """Where a claimed run goes on (see the module docstring)."""

    #: The owner the run was claimed from (``RunResumed.previous_owner``).
    previous_owner: str | None
    #: The checkpoint's state (``None``: the run starts over, preparation included).
    state: RunState | None
    #: The stored events, the trail's first ones.
    events: Sequence[Any] = ()
    #: The first round the run runs: its recorded tool results are reused.
    round: int = 1
    #: A cancel requested through the store before the claim (the run ends with it).
    cancel: str | None = None
    held: HeldRound | None = None

    def seam(self, head: Head, round: int) -> ev.RunResumed:
        """The event that marks where the run goes on (``head``: the trail's next)."""
        return ev.RunResumed(**head, from_round=round, previous_owner=self.previous_owner)

    def restore(self, state: RunState, trail: Trail) -> None:
        """Make a freshly built run's ``state`` and ``trail`` the checkpoint's and the store's."""
        loaded = self.state
        if loaded is None:
            return
        trail.restore(list(self.events))
        for field in attrs.fields(type(state)):
            if field.name in ("usage", "approvals"):  # the Run's rooms hold these two
                continue
            setattr(state, field.name, getattr(loaded, field.name))
        for field in attrs.fields(type(state.usage)):  # the Accounts hold this meter
            setattr(state.usage, field.name, getattr(loaded.usage, field.name))
        trail.round = state.round


__all__ = ["Admission", "HeldRound", "ResumePoint"]
