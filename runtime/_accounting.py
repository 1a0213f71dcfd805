"""A run's accounting: charges, the ``max_tokens`` clamp, budgets and ceilings.

Usage is charged as it streams in, to the run's meter and to every budget the
run answers to (its own, and the Runtime's shared one). Every charge is also
recorded as one ``UsageCharged`` event per source and attempt, so a run's
usage always equals the sum of its charges, also when a call is cut short.

The clamp keeps every budget whole: a call's output is capped at what the
tightest budget has left (in tokens, and in cost at the model's output
price), so a call can overshoot a ceiling only by its own input.

The Runtime's budget is shared by runs whose calls are in flight at once, so
a clamp alone would promise the same remainder to each of them. There, each
call *holds* its clamped output (tokens and their cost) before it is sent:
the next call is clamped to what is neither charged nor held, and waits for
room when nothing is left but others' reservations. A call's streamed output
turns its reservation into a charge; the rest is released when the call ends,
however it ends. So the Runtime's overshoot is bounded as a run's is: by the
input of the calls that crossed it.

Ceilings are outcomes: a check returns the :class:`~._limits.Termination` it
implies (after recording a ``CeilingHit``), never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import anyio
import attrs

import tether.runtime._events as ev
from tether.actors import ToolOutput
from tether.providers import ModelRequest, Price, TokenUsage

from ._budget import Budget, Hit, least
from ._limits import Limits, Termination, UsageMeter
from ._trail import Trail

if TYPE_CHECKING:  # imported where a fleet's budget is used: not by import tether
    from ._fleetbudget import SlicedBudget as Sliced

#: The least a call with no output cap of its own is sent with on a fleet's budget
#: (see :meth:`Accounts._estimate`): a quarter of the HTTP providers' default ``max_tokens``.
FLEET_OUTPUT_FLOOR = 1_024


class Accounts:
    """Charges and ceilings for one run."""

    __slots__ = (
        "_asked",
        "_budgets",
        "_call_out",
        "_default_max",
        "_held_cost",
        "_held_tokens",
        "_largest_out",
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
        asked_max_tokens: int | None = None,
    ) -> None:
        self.meter = meter
        self.price = price
        self._limits = limits
        self._trail = trail
        self._shared = shared
        self._on_shared_hit = on_shared_hit
        self._default_max = default_max_tokens
        # The run's ModelSettings.max_tokens: sent as is when no budget bounds the call.
        self._asked = asked_max_tokens
        own = Budget(max_total_tokens=limits.max_total_tokens, max_cost_usd=limits.max_cost_usd)
        # A tuple: no tracked object for the common case of no budget at all.
        self._budgets: Sequence[Budget] = tuple(
            b for b in (own, shared) if b is not None and b.bounded
        )
        # What this run's call in flight holds of the shared budget.
        self._held_tokens = 0
        self._held_cost = 0.0
        # The output of this run's call in flight so far, and the largest of its calls.
        self._call_out = 0
        self._largest_out = 0

    # --------------------------------------------------------------- the clamp

    def clamp(self, *, held: bool = True) -> int | None:
        """The output cap that keeps every budget whole (``None``: no cap).

        Bounded by ``default_max_tokens`` (the settings' ``max_tokens``, else the
        provider's); with no budget it is the settings' ``max_tokens`` (or ``None``).
        ``held=False`` ignores what calls in flight hold of the shared budget.
        """
        cap: int | None = None
        price = self.price
        for budget in self._budgets:
            left = budget.remaining_tokens(held=held)
            if left is not None:
                cap = left if cap is None else min(cap, left)
            money = budget.remaining_cost(held=held)
            if money is not None and price is not None and price.output > 0:
                by_cost = int(money * 1_000_000 / price.output)
                cap = by_cost if cap is None else min(cap, by_cost)
        if cap is None:
            return self._asked
        if self._default_max is not None:
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

    def retarget(self, price: Price | None, default_max_tokens: int | None) -> None:
        """Charge and clamp at another provider's price, and bound the clamp by its
        ``max_tokens``, from now on (a fallback). A ``max_tokens`` the run's model
        settings asked for still wins over the provider's."""
        self.price = price
        # getattr: the asked cap is a slot only where the run has model settings.
        asked = self._asked
        self._default_max = asked if asked is not None else default_max_tokens
        if price is None:
            self.meter.unpriced = True  # its calls cannot be priced: the run's cost is unknown

    # -------------------------------------------------------- reservations

    @property
    def holds(self) -> bool:
        """Calls must hold their output against a bounded shared budget."""
        return self._shared is not None and self._shared in self._budgets

    async def hold(self, request: ModelRequest) -> ModelRequest | Termination:
        """Hold ``request``'s output against the shared budget (re-clamped), before sending.

        Waits while the shared budget has no room left but what other calls
        hold; a ceiling that is reached meanwhile is returned instead.
        """
        shared = self._shared
        assert shared is not None
        cap = self.clamp()
        if shared.sliced and cap != self._default_max:
            # A host's slice of a fleet's budget: ask its ledger for more first.
            topped = await self._top_up(shared, cap)
            if isinstance(topped, Termination):
                return topped
            cap = topped
        if cap == 0:
            started = anyio.current_time()
            while cap == 0 and shared.holding:
                await shared.wait_for_room()
                ceiling = self.before_call()
                if ceiling is not None:
                    return ceiling
                cap = self.clamp()
            trail = self._trail
            waited = anyio.current_time() - started
            why = "the Runtime's budget was held by other calls in flight"
            trail.add(ev.ProviderWait(**trail.head(), wait_s=waited, reason=why))
        tokens = cap if cap is not None and shared.max_total_tokens is not None else 0
        cost = 0.0
        if cap is not None and shared.max_cost_usd is not None:
            cost = self._output_cost(cap)
        self._held_tokens, self._held_cost = tokens, cost
        self._call_out = 0
        shared.hold(tokens, cost)
        if cap != request.max_tokens:
            request = attrs.evolve(request, max_tokens=cap)
        return request

    async def _top_up(self, shared: Budget, cap: int | None) -> int | Termination | None:
        """``cap`` once the host's slice of a fleet's budget has room for the whole call.

        The call wants what it would be sent with were the slice unbounded (its
        own budget and ``max_tokens``; without either, a slice). It waits while
        the ledger grants more; once an ask is answered with nothing, it takes
        what room there is (any at all); while the ledger is dry only this
        host's calls in flight can free room, as on one Runtime (see
        :mod:`._fleetbudget`).
        """
        from ._fleetbudget import SlicedBudget

        assert isinstance(shared, SlicedBudget)
        if cap is None:  # nothing of the slice bounds this call (an unpriced one, say)
            return cap
        want = self._wanted(shared)
        empty = shared.empty_answers
        started = anyio.current_time()
        waited = False
        while True:
            if shared.final:
                if cap > 0 or not shared.holding:
                    break
                await shared.wait_for_room()
            elif cap == 0 or (cap < want and shared.empty_answers == empty):
                cost = self._output_cost(want) if shared.max_cost_usd is not None else 0.0
                await shared.top_up(want if shared.max_total_tokens is not None else 0, cost)
            else:
                break
            waited = True
            ceiling = self.before_call()
            if ceiling is not None:
                return ceiling
            cap = self.clamp()
            if cap is None:
                return cap
        if waited:
            trail = self._trail
            waited_s = anyio.current_time() - started
            why = "the host waited for more of the fleet's budget"
            trail.add(ev.ProviderWait(**trail.head(), wait_s=waited_s, reason=why))
        if cap == 0:
            # The ledger is dry and nothing is held here: the fleet's budget is spent.
            ceiling = self.before_call()
            assert ceiling is not None, "a spent slice of a dry fleet is a ceiling"
            return ceiling
        if self._own_cap(shared) is None:
            cap = min(cap, want)  # no cap of its own: the estimate bounds it (_wanted)
        return cap

    def _wanted(self, shared: Sliced) -> int:
        """The output cap were ``shared`` unbounded: the run's own budget and ``max_tokens``;
        without either, an estimate of the call's output (:meth:`_estimate`)."""
        own = self._own_cap(shared)
        return self._estimate(shared) if own is None else own

    def _estimate(self, shared: Sliced) -> int:
        """What a call with no output cap of its own is sent with, and holds, on a fleet's
        budget: twice the largest output of this run's calls or of this host's recent
        ones, at least :data:`FLEET_OUTPUT_FLOOR` tokens. Asking for (and holding) a whole
        slice per call would make a burst of such calls mark the fleet short early, and
        the calls after them would get scraps (and end ``max_continues``). A call cut
        at the estimate (it stops ``max_tokens``) raises it for the next: twice as much."""
        largest = max(self._largest_out, shared.largest_output)
        return max(FLEET_OUTPUT_FLOOR, 2 * largest)

    def _own_cap(self, shared: Sliced) -> int | None:
        """The call's output cap from the run's own budget and ``max_tokens`` (``None``:
        nothing but ``shared`` bounds it)."""
        cap: int | None = None
        price = self.price
        for budget in self._budgets:
            if budget is shared:
                continue
            left = budget.remaining_tokens()
            if left is not None:
                cap = left if cap is None else min(cap, left)
            money = budget.remaining_cost()
            if money is not None and price is not None and price.output > 0:
                by_cost = int(money * 1_000_000 / price.output)
                cap = by_cost if cap is None else min(cap, by_cost)
        if self._default_max is not None:
            cap = self._default_max if cap is None else min(cap, self._default_max)
        return cap

    def _output_cost(self, tokens: int) -> float:
        """``tokens`` output tokens at the model's price (0 when it has none)."""
        price = self.price
        return 0.0 if price is None else tokens * price.output / 1_000_000

    def release(self) -> None:
        """Give back what the call in flight held and did not use."""
        out = self._call_out
        if out:
            self._largest_out = max(self._largest_out, out)
            from ._fleetbudget import SlicedBudget  # a Runtime-wide budget only: loaded then

            if isinstance(self._shared, SlicedBudget):
                self._shared.largest_output = max(self._shared.largest_output, out)
        if self._shared is not None and (self._held_tokens or self._held_cost):
            self._shared.unhold(self._held_tokens, self._held_cost)
            self._held_tokens, self._held_cost = 0, 0.0

    # -------------------------------------------------------------- ceilings

    def before_call(self) -> Termination | None:
        """The ceiling that forbids another model call: steps, or a spent budget."""
        limits, meter = self._limits, self.meter
        if meter.steps >= limits.max_steps:
            self.record_hit("max_steps", limits.max_steps, meter.steps)
            return Termination.MAX_STEPS
        for budget in self._budgets:
            hit = budget.exhausted()
            if (
                hit is None
                and budget.max_cost_usd is not None
                and self.clamp(held=False) == 0
                and budget.final  # a host's slice of a fleet's budget can grow
            ):
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
        if shared:
            self._call_out += output_tokens
        if shared and output_tokens > 0 and (self._held_tokens or self._held_cost):
            # Streamed output was held: the charge replaces that much of the hold.
            tokens = min(self._held_tokens, output_tokens)
            money = min(self._held_cost, self._output_cost(output_tokens))
            self._held_tokens -= tokens
            self._held_cost -= money
            assert self._shared is not None
            self._shared.unhold(tokens, money)

    def charge_stream(self, usage: TokenUsage, seen: TokenUsage) -> None:
        """Charge what ``usage`` adds to ``seen`` (a stream's usage reports are cumulative).

        When ``seen`` was an estimate, ``usage`` replaces it exactly: the
        difference is charged even where it is negative.
        """
        fresh = usage.input_tokens - seen.input_tokens
        output = usage.output_tokens - seen.output_tokens
        cache_read = usage.cache_read_tokens - seen.cache_read_tokens
        cache_write = usage.cache_write_tokens - seen.cache_write_tokens
        if not seen.estimated:  # a report never takes back what an earlier one counted
            fresh, output = max(0, fresh), max(0, output)
            cache_read, cache_write = max(0, cache_read), max(0, cache_write)
        input_tokens = fresh + cache_read + cache_write
        if input_tokens or output:
            added = TokenUsage(
                input_tokens=fresh,
                output_tokens=output,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            )
            self.add(input_tokens, output, self.cost(added), shared=True)

    @property
    def bounded(self) -> bool:
        """Some token or cost budget applies to this run's calls."""
        return bool(self._budgets)

    def cost(self, usage: TokenUsage) -> float | None:
        """``usage`` at the model's price (``None`` for an unpriced model)."""
        price = self.price
        return None if price is None else price.cost(usage)

    def record(self, source: ev.ChargeSource, usage: TokenUsage, cost: float | None) -> None:
        """Record one charge as an event; the run's usage is the sum of these."""
        cache_read, cache_write = usage.cache_read_tokens, usage.cache_write_tokens
        input_tokens = usage.input_tokens + cache_read + cache_write
        if input_tokens or usage.output_tokens:
            meter = self.meter
            if usage.estimated:
                meter.estimated = True
            if cache_read or cache_write:
                # Counted here, with the events: the meter's cache counts are their sum.
                meter.cache_read_tokens += cache_read
                meter.cache_write_tokens += cache_write
            self._trail.note(
                ev.UsageCharged,
                source=source,
                input_tokens=input_tokens,
                output_tokens=usage.output_tokens,
                cost_usd=cost,
                estimated=usage.estimated,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            )

    def charge_judge(self, usage: TokenUsage, cost: float | None) -> None:
        """Charge a judge's provider calls (an LLM judge) to the run and the Runtime."""
        input_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self.add(input_tokens, usage.output_tokens, cost, shared=True)
        self.record("judge", usage, cost)

    def charge_child(self, output: ToolOutput) -> None:
        """Charge what a sub-agent's run (or a remote agent) spent to this run.

        A child run here already charged the Runtime's budget itself, so only the
        run's own budget is charged for it; usage a tool reports without a child
        run (a remote A2A agent's) is charged to the Runtime's budget too.
        """
        if output.input_tokens or output.output_tokens or output.cost_usd:
            shared = output.child_run_id is None
            self.add(output.input_tokens, output.output_tokens, output.cost_usd, shared=shared)
            usage = TokenUsage(input_tokens=output.input_tokens, output_tokens=output.output_tokens)
            self.record("subagent", usage, output.cost_usd)
