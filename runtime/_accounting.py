"""A run's accounting: charges, the ``max_tokens`` clamp, budgets and ceilings.

Usage is charged as it streams in, to the run's meter and to every budget the
run answers to (its own, and the Runtime's shared one). Every charge is also
recorded as one ``UsageCharged`` event per source and attempt, so a run's
usage always equals the sum of its charges, also when a call is cut short.

The clamp keeps every budget whole: a call's output is capped at what the
tightest budget has left (in tokens, and in cost at the model's output
price), so a call can overshoot a ceiling only by its own input.

Ceilings are outcomes: a check returns the :class:`~._limits.Termination` it
implies (after recording a ``CeilingHit``), never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tether.runtime._events as ev
from tether.actors import ToolOutput
from tether.providers import Price, TokenUsage

from ._budget import Budget, Hit, least
from ._limits import Limits, Termination, UsageMeter
from ._trail import Trail


class Accounts:
    """Charges and ceilings for one run."""

    __slots__ = (
        "_budgets",
        "_default_max",
        "_limits",
        "_on_shared_hit",
        "_shared",
        "_trail",
        "meter",
        "price",
    )

    def __init__(
        self,
        *,
        meter: UsageMeter,
        limits: Limits,
        price: Price | None,
        trail: Trail,
        shared: Budget | None = None,
        on_shared_hit: Callable[[Hit], None] | None = None,
        default_max_tokens: int | None = None,
    ) -> None:
        self.meter = meter
        self.price = price
        self._limits = limits
        self._trail = trail
        self._shared = shared
        self._on_shared_hit = on_shared_hit
        self._default_max = default_max_tokens
        own = Budget(max_total_tokens=limits.max_total_tokens, max_cost_usd=limits.max_cost_usd)
        self._budgets: Sequence[Budget] = [b for b in (own, shared) if b is not None and b.bounded]

    # --------------------------------------------------------------- the clamp

    def clamp(self) -> int | None:
        """The output cap that keeps every budget whole (``None``: no cap)."""
        cap: int | None = None
        price = self.price
        for budget in self._budgets:
            left = budget.remaining_tokens()
            if left is not None:
                cap = left if cap is None else min(cap, left)
            money = budget.remaining_cost()
            if money is not None and price is not None and price.output > 0:
                by_cost = int(money * 1_000_000 / price.output)
                cap = by_cost if cap is None else min(cap, by_cost)
        if cap is not None and self._default_max is not None:
            cap = min(cap, self._default_max)
        return cap

    def remaining(self) -> tuple[int | None, float | None]:
        """Tokens and cost the tightest budgets have left (``None``: unbounded)."""
        budgets = self._budgets
        if not budgets:
            return None, None
        return (
            least(b.remaining_tokens() for b in budgets),
            least(b.remaining_cost() for b in budgets),
        )

    # -------------------------------------------------------------- ceilings

    def before_call(self) -> Termination | None:
        """The ceiling that forbids another model call: steps, or a spent budget."""
        limits, meter = self._limits, self.meter
        if meter.steps >= limits.max_steps:
            self.record_hit("max_steps", limits.max_steps, meter.steps)
            return Termination.MAX_STEPS
        for budget in self._budgets:
            hit = budget.exhausted()
            if hit is None and budget.max_cost_usd is not None and self.clamp() == 0:
                # The budget cannot buy one output token.
                hit = Hit(
                    f"{budget.name}max_cost_usd",
                    budget.max_cost_usd,
                    budget.cost_usd,
                    Termination.COST_CEILING,
                )
            if hit is not None:
                return self._hit(hit, budget)
        return None

    def crossed(self) -> Termination | None:
        """The ceiling a charge just pushed past, if any (checked as usage streams in)."""
        for budget in self._budgets:
            hit = budget.crossed()
            if hit is not None:
                return self._hit(hit, budget)
        return None

    def _hit(self, hit: Hit, budget: Budget) -> Termination:
        self.record_hit(hit.ceiling, hit.limit, hit.used)
        if budget is self._shared and self._on_shared_hit is not None:
            self._on_shared_hit(hit)
        return hit.termination

    def record_hit(self, ceiling: str, limit: float, used: float) -> None:
        """Record a ceiling as reached (``CeilingHit``)."""
        trail = self._trail
        trail.add(ev.CeilingHit(**trail.head(), ceiling=ceiling, limit=limit, used=used))

    # -------------------------------------------------------------- charges

    def add(self, input_tokens: int, output_tokens: int, cost: float | None, shared: bool) -> None:
        """Charge the run's meter and budgets; ``shared`` also charges the Runtime's."""
        self.meter.charge(input_tokens, output_tokens, cost)
        for budget in self._budgets:
            if shared or budget is not self._shared:
                budget.charge(input_tokens + output_tokens, cost)

    def charge_stream(self, usage: TokenUsage, seen: TokenUsage) -> None:
        """Charge what ``usage`` adds to ``seen`` (a stream's usage reports are cumulative)."""
        fresh = max(0, usage.input_tokens - seen.input_tokens)
        output = max(0, usage.output_tokens - seen.output_tokens)
        cache_read = max(0, usage.cache_read_tokens - seen.cache_read_tokens)
        cache_write = max(0, usage.cache_write_tokens - seen.cache_write_tokens)
        input_tokens = fresh + cache_read + cache_write
        if input_tokens or output:
            added = TokenUsage(
                input_tokens=fresh,
                output_tokens=output,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            )
            self.add(input_tokens, output, self.cost(added), shared=True)

    def cost(self, usage: TokenUsage) -> float | None:
        """``usage`` at the model's price (``None`` for an unpriced model)."""
        price = self.price
        return None if price is None else price.cost(usage)

    def record(self, source: ev.ChargeSource, usage: TokenUsage, cost: float | None) -> None:
        """Record one charge as an event; the run's usage is the sum of these."""
        input_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if input_tokens or usage.output_tokens:
            trail = self._trail
            trail.add(
                ev.UsageCharged(
                    **trail.head(),
                    source=source,
                    input_tokens=input_tokens,
                    output_tokens=usage.output_tokens,
                    cost_usd=cost,
                )
            )

    def charge_judge(self, usage: TokenUsage, cost: float | None) -> None:
        """Charge a judge's provider calls (an LLM judge) to the run and the Runtime."""
        input_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self.add(input_tokens, usage.output_tokens, cost, shared=True)
        self.record("judge", usage, cost)

    def charge_child(self, output: ToolOutput) -> None:
        """Charge what a sub-agent's run spent to this run.

        The child run already charged the Runtime's budget itself, so only the
        run's own budget is charged here.
        """
        if output.input_tokens or output.output_tokens or output.cost_usd:
            self.add(output.input_tokens, output.output_tokens, output.cost_usd, shared=False)
            usage = TokenUsage(input_tokens=output.input_tokens, output_tokens=output.output_tokens)
            self.record("subagent", usage, output.cost_usd)
