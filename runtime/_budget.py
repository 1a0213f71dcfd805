"""Token and cost budgets: a run's own, and the Runtime's shared by all its runs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, TypeVar

import anyio
import attrs
from anyio.abc import TaskGroup

from ._limits import Termination

N = TypeVar("N", int, float)


def least(values: Iterable[N | None]) -> N | None:
    """The smallest of the limits given (``None`` is no limit), or ``None``."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


@attrs.frozen
class Hit:
    """A ceiling crossed (or reached): which one, its limit, what was used."""

    ceiling: str
    limit: float
    used: float
    termination: Termination


@attrs.define(kw_only=True)
class Budget:
    """Token and cost ceilings with what has been charged against them.

    ``max_total_tokens`` counts input plus output tokens. An unpriced charge
    (cost ``None``) cannot be held against ``max_cost_usd``; it is counted
    in ``unpriced`` so the owner can say the cost is unknown.

    A budget shared by several runs also holds reservations: a call in flight
    holds its clamped ``max_tokens`` (and their cost), so that no two calls
    can both be promised the same remainder. What a call streams turns its
    reservation into a charge; what it did not use is released at its end.
    ``remaining_*`` count reservations as spent unless ``held=False``.
    """

    name: str = ""
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0
    reserved_tokens: int = 0
    reserved_cost: float = 0.0
    _released: anyio.Event | None = attrs.field(default=None, init=False, repr=False, eq=False)
    #: Its ceilings grow on demand (a host's slice of a fleet's budget: ``_fleetbudget``).
    sliced: ClassVar[bool] = False

    @property
    def bounded(self) -> bool:
        return self.max_total_tokens is not None or self.max_cost_usd is not None

    @property
    def final(self) -> bool:
        """Its ceilings are final: reaching them ends the runs (a slice's may still grow)."""
        return True

    # A budget that keeps a task (a host's slice of a fleet's budget) starts it in the
    # Runtime's task group, stops it when the Runtime closes, and reports last.

    def bind(self, tg: TaskGroup) -> None:
        """Start what the budget keeps running while the Runtime runs (nothing here)."""

    def close(self) -> None:
        """Stop what ``bind`` started (the Runtime is closing)."""

    async def aclose(self) -> None:
        """Last words, once every run has ended (nothing here)."""

    def charge(self, tokens: int, cost_usd: float | None) -> None:
        self.tokens += tokens
        if cost_usd is None:
            self.unpriced += 1
        else:
            self.cost_usd += cost_usd

    def remaining_tokens(self, *, held: bool = True) -> int | None:
        if self.max_total_tokens is None:
            return None
        return max(0, self.max_total_tokens - self.tokens - (self.reserved_tokens if held else 0))

    def remaining_cost(self, *, held: bool = True) -> float | None:
        if self.max_cost_usd is None:
            return None
        return max(0.0, self.max_cost_usd - self.cost_usd - (self.reserved_cost if held else 0.0))

    # ---------------------------------------------------------- reservations

    @property
    def holding(self) -> bool:
        """Some call in flight holds a reservation (it will release what it does not use)."""
        return self.reserved_tokens > 0 or self.reserved_cost > 0

    def hold(self, tokens: int, cost: float) -> None:
        self.reserved_tokens += tokens
        self.reserved_cost += cost

    def unhold(self, tokens: int, cost: float) -> None:
        """Drop part of a reservation (spent, or released); wakes whoever waits for room."""
        self.reserved_tokens = max(0, self.reserved_tokens - tokens)
        self.reserved_cost = max(0.0, self.reserved_cost - cost)
        self._wake()

    async def wait_for_room(self) -> None:
        """Wait until some reservation is released or the ceilings change."""
        if self._released is None:
            self._released = anyio.Event()
        await self._released.wait()

    def _wake(self) -> None:
        if self._released is not None:
            self._released.set()
            self._released = None

    def crossed(self) -> Hit | None:
        """The ceiling now strictly exceeded, if any (checked as usage streams in)."""
        return self._check(strict=True)

    def exhausted(self) -> Hit | None:
        """The ceiling reached or exceeded, if any (checked before sending a call)."""
        return self._check(strict=False)

    def _check(self, *, strict: bool) -> Hit | None:
        limit = self.max_total_tokens
        if limit is not None and (self.tokens > limit or (not strict and self.tokens >= limit)):
            return Hit(
                f"{self.name}max_total_tokens", limit, self.tokens, Termination.TOKEN_CEILING
            )
        cost = self.max_cost_usd
        if cost is not None and (self.cost_usd > cost or (not strict and self.cost_usd >= cost)):
            return Hit(f"{self.name}max_cost_usd", cost, self.cost_usd, Termination.COST_CEILING)
        return None

    def reset(self) -> None:
        """Zero what was charged (reservations of calls in flight stay theirs)."""
        self.tokens, self.cost_usd, self.unpriced = 0, 0.0, 0
        self._wake()
