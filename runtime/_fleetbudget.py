"""One token and cost budget for a fleet of Runtimes ("hosts"), held by slices.

A fleet (``tether.ray``'s hosts, or any set of Runtimes) shares one budget. One
:class:`BudgetLedger` holds its ceilings; each host's Runtime spends from a
:class:`SlicedBudget`, whose ceilings are what the ledger granted that host so
far. The host reaches the ledger through a :class:`LedgerLink` (an actor call
over Ray; :class:`LocalLedgerLink` in one process). Install it with
:meth:`~tether.Runtime.share_budget` before entering the Runtime::

    ledger = BudgetLedger(max_total_tokens=1_000_000, hosts=4)
    rt = tether.Runtime()
    rt.share_budget(LocalLedgerLink(ledger, "host-1"), tether.Limits(max_total_tokens=1_000_000))
    async with rt: ...

**On the host.** Every model call holds its clamped ``max_tokens`` (and its
cost) against the host's slice, as on one Runtime (:mod:`._accounting`). A
call the slice cannot cover in full asks for more first: it tells the slice
what it wants and waits; the slice's *keeper* (one task per host, the only one
that talks to the ledger, one contact at a time) asks the ledger for what the
waiting calls want beyond the room left, and wakes them when the answer comes.
The host's runs do not end when the host's slice is used up: only when the
ledger is *dry* and nothing is left here. Then the usual path ends them all
(``token_ceiling`` / ``cost_ceiling``, a ``CeilingHit`` named
``runtime.max_total_tokens``) and ``Runtime.start`` raises ``BudgetExhausted``.
Input that crosses the slice (input is charged, never held) is a debt: the
slice's spend passes its ceiling, and the next grant pays it first.

**Slices.** The ledger decides their size. A host asks for what its waiting
calls want beyond its room (its debt included). It gets that, but no more
than its debt and a fair share (``free / hosts``, or a first slice if that
is more) of what is unallocated, so the first host to ask cannot take it
all; and while the fleet is not short, at least a pad of
``min(ceiling / (4 × hosts), free / (2 × hosts))``: a quarter of a fair share
at first, so that a host asks a few times per quarter
of the budget, and smaller as the unallocated budget shrinks, so that padding
alone never allocates it all. A call waits while the ledger keeps granting
(each round trip adds to the host's room); once an ask made since it began to
wait is answered with nothing, it goes with whatever room there is.

**The end of the budget: no stranding.** Once a host asks for more than the
ledger has unallocated (or the ledger hands out its last), the fleet is *short*
for good, and every answer says so. A host that knows the fleet is short gives
back the room it does not hold (its unheld remainder) whenever no call of its
own waits, and asks for what its calls need, no padding. Its keeper contacts
the ledger every ``poll_s`` while it has a debt or a waiting call, or, once
short, unheld room or a charge it has not reported; with either of those it
calls every ``idle_poll_s`` before it knows, to learn that the fleet is short
(so a call may wait that long for what an idle host holds, once). The ledger answers *dry*
only when it has nothing unallocated and every other host's last report
shows nothing left there (spent at least its grant: nothing held, nothing
unheld). So no run ends on the fleet's ceiling while any host still holds
budget, held or not: a call that finds nothing waits, as on one Runtime it
waits while other calls hold the rest. When a run ends on the ceiling, the
fleet has spent its whole token ceiling; for cost, each host may keep less
than the price of one output token (it cannot buy one). A host that learnt
the ledger is dry while its calls still held their slice reports what they
spent when they end, unasked (its keeper wakes at the next charge or
release), so the ledger does go dry.

**Nothing waits forever (the lease).** With ``lease_s`` (the ledger's and
each slice's; ``RayRuntime`` passes its own), a host holding a grant it has
not reported spent calls the ledger at least every ``lease_s / 3``; the
ledger forgets a host that holds a grant and has been silent for
``lease_s`` (a host stopped, or cut off by the network: its grant is
written off as spent, as a dead host's), at the next call of any host; and
a host the ledger has not answered for ``lease_s`` counts the budget as
spent (*cut off*) until it answers again. So once the budget is spent, a
run that needs more ends within ``poll_s`` and one round trip (a host with
a waiting call asks every ``poll_s``) after the ledger can say so, and a
silent host delays that by at most its lease.

**The bound.** The ledger never lets the hosts' grants add up to more than
the ceiling (a grant is only made within ``ceiling − Σ max(granted, reported
used)`` over the hosts, and what a forgotten host was granted stays counted).
On each host, a call holds its output within what the host was granted and
not already spent or held, so only input (and a provider that streams past
``max_tokens``) can take a host's spend past its grant. Hence:

    fleet spend ≤ max_total_tokens + Σ over hosts of the input tokens of the
    calls that crossed that host's grant

(the same bound as one Runtime's), and likewise for ``max_cost_usd`` with the
cost of that input. A debt paid from a later grant is counted in that grant,
so it is not counted twice. As on one Runtime, judge calls are charged
unheld (their whole usage counts as crossing input), and a server that
ignores ``max_tokens`` adds what it streams past its hold until its host
learns the ledger is dry (a crossed slice nudges the keeper: one contact).

**A dead host** (:meth:`BudgetLedger.forget`): what it was granted and did not
report used is counted as spent. It may have spent it before dying and its
runs resume elsewhere; counting it is the choice that keeps the bound
(counting only its reported spend could let the fleet spend its grant
twice). A better estimate needs the dead host's checkpointed usage from the
run store; left for later. A forgotten owner that calls again is answered
dry, so a host restarted under the same id must use a new owner id.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import ClassVar, Protocol

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup

from ._budget import Budget, Hit
from ._limits import Limits, Termination

#: Cost below this (USD) is nothing: float sums must not keep a fleet from being dry.
EPSILON_USD = 1e-9


# ------------------------------------------------------------------ messages


@attrs.frozen(kw_only=True)
class Spent:
    """What a host has spent so far (its slice's charges), reported at every contact."""

    tokens: int = 0
    cost_usd: float = 0.0
    #: Charges that could not be priced (their cost is unknown).
    unpriced: int = 0


@attrs.frozen(kw_only=True)
class Grant:
    """The ledger's answer to a host: what it adds to the host's slice, and the fleet's state."""

    tokens: int = 0
    cost_usd: float = 0.0
    #: The fleet has no unallocated budget left: give back what you do not hold, pad nothing.
    short: bool = False
    #: Nothing is left anywhere but here: end the runs once your own slice is spent.
    dry: bool = False
    #: The ledger's current slice (what a host asks for when a call asks for no limit).
    slice_tokens: int = 0
    #: The fleet's spend as reported to the ledger (for ``CeilingHit`` and status).
    used_tokens: int = 0
    used_cost_usd: float = 0.0


@attrs.frozen(kw_only=True)
class HostShare:
    """One host's line in the ledger: what it was granted, and what it reported used."""

    granted_tokens: int
    granted_cost_usd: float
    used_tokens: int
    used_cost_usd: float
    unpriced: int


@attrs.frozen(kw_only=True)
class LedgerStatus:
    """The fleet's budget: ceilings, what is granted and used, and each host's share."""

    max_total_tokens: int | None
    max_cost_usd: float | None
    #: Granted to live hosts, net of what they gave back.
    granted_tokens: int
    granted_cost_usd: float
    #: Reported used by every host, forgotten ones included.
    used_tokens: int
    used_cost_usd: float
    unpriced: int
    #: What forgotten hosts were granted and never reported used: counted as spent.
    lost_tokens: int
    lost_cost_usd: float
    short: bool
    hosts: dict[str, HostShare]
    #: Hosts forgotten because they held a grant and were silent for a lease.
    written_off: int = 0
    #: When the ledger first answered that the budget is spent (its clock), or ``None``.
    dry_since: float | None = None


# ------------------------------------------------------------------ the ledger


@attrs.define
class _Share:
    granted_tokens: int = 0
    granted_cost: float = 0.0
    used_tokens: int = 0
    used_cost: float = 0.0
    unpriced: int = 0

    #: When the host last called (the ledger's clock).
    seen: float = 0.0

    def report(self, spent: Spent) -> None:
        # Monotonic: a late report (messages may cross) never takes back spend.
        self.used_tokens = max(self.used_tokens, spent.tokens)
        self.used_cost = max(self.used_cost, spent.cost_usd)
        self.unpriced = max(self.unpriced, spent.unpriced)

    def committed_tokens(self) -> int:
        return max(self.granted_tokens, self.used_tokens)

    def committed_cost(self) -> float:
        return max(self.granted_cost, self.used_cost)

    def holds_grant(self) -> bool:
        """It was granted more than it reported used: it may be spending it now."""
        return (
            self.granted_tokens > self.used_tokens
            or self.granted_cost > self.used_cost + EPSILON_USD
        )


@attrs.define(kw_only=True)
class BudgetLedger:
    """The fleet's budget: its ceilings, and each host's grant and reported spend.

    Plain and synchronous (and picklable), so that an actor can wrap each
    method one-to-one: over Ray, one actor holds it and hosts call ``take``
    and ``give_back``; every call is applied whole, one at a time.

    Invariant: the hosts' grants, counted as ``max(granted, reported used)``
    (a debt is spend), plus what forgotten hosts were granted, never exceed a
    ceiling because of a grant (a late report of crossing input may).
    ``hosts`` sizes the slices (see the module docstring); the owners are
    whatever strings the hosts call with.

    ``lease_s``: a host that holds a grant it has not reported spent and has
    not called for this long is forgotten (its grant written off as spent, as
    for a dead host) at the next call of any host: a host alive but out of
    reach (stopped, partitioned) cannot keep the others from learning that
    the budget is spent. Hosts holding a grant call at least every third of
    it (:class:`SlicedBudget` ``lease_s``). ``None``: never. ``clock`` is
    the ledger's own (one clock, wherever the hosts are).
    """

    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    hosts: int = 1
    #: Once short, always (until a new ledger): hosts keep only what they hold.
    short: bool = False
    _shares: dict[str, _Share] = attrs.field(factory=dict)
    _lost_tokens: int = 0
    _lost_cost: float = 0.0
    _dead_used_tokens: int = 0
    _dead_used_cost: float = 0.0
    _dead_unpriced: int = 0
    #: Forgotten hosts, with their share when forgotten (a late report still counts).
    _forgotten: dict[str, _Share] = attrs.field(factory=dict)
    lease_s: float | None = None
    clock: Callable[[], float] = time.monotonic
    _written_off: int = 0
    _dry_since: float | None = None

    def __attrs_post_init__(self) -> None:
        tokens, cost = self.max_total_tokens, self.max_cost_usd
        if tokens is not None and (not isinstance(tokens, int) or tokens < 0):
            raise ValueError(f"BudgetLedger(max_total_tokens=...) must be an int >= 0: {tokens!r}")
        if cost is not None and not cost >= 0:
            raise ValueError(f"BudgetLedger(max_cost_usd=...) must be >= 0: {cost!r}")
        if tokens is None and cost is None:
            raise ValueError("BudgetLedger needs max_total_tokens or max_cost_usd")
        if not isinstance(self.hosts, int) or self.hosts < 1:
            raise ValueError(f"BudgetLedger(hosts=...) must be a positive int: {self.hosts!r}")
        if self.lease_s is not None and not self.lease_s > 0:
            raise ValueError(f"BudgetLedger(lease_s=...) must be > 0 or None: {self.lease_s!r}")

    # ------------------------------------------------------------ the calls

    def take(self, owner: str, want_tokens: int, want_cost_usd: float, used: Spent) -> Grant:
        """Grant ``owner`` up to what it wants (padded to a slice while the fleet is not
        short), never past the ceilings; ``used`` is its spend so far.

        ``want_*`` is what the host's calls need beyond the room it has left
        (its debt included); zero for both is a report that only asks for news.
        """
        if owner in self._forgotten:
            return self._late(owner, 0, 0.0, used)
        share = self._met(owner)
        share.report(used)
        tokens = self._grant_tokens(owner, share, max(0, want_tokens))
        cost = self._grant_cost(owner, share, max(0.0, want_cost_usd))
        share.granted_tokens += tokens
        share.granted_cost += cost
        free_tokens, free_cost = self._free()
        if (free_tokens is not None and free_tokens <= 0) or (
            free_cost is not None and free_cost <= EPSILON_USD
        ):
            self.short = True
        return self._answer(owner, tokens, cost)

    def give_back(self, owner: str, tokens: int, cost_usd: float, used: Spent) -> Grant:
        """``owner`` returns room it does not hold (already taken off its own slice)."""
        if owner in self._forgotten:
            return self._late(owner, tokens, cost_usd, used)
        share = self._met(owner)
        share.report(used)
        share.granted_tokens -= min(max(0, tokens), share.granted_tokens)
        share.granted_cost = max(0.0, share.granted_cost - max(0.0, cost_usd))
        return self._answer(owner, 0, 0.0)

    def forget(self, owner: str) -> None:
        """``owner`` is dead: what it was granted, reported used or not, is spent for good.

        Conservative: the host may have spent its whole grant before it died
        (and its runs resume elsewhere, charging their new host). An owner
        forgotten is answered dry if it ever calls again; what it reports then
        still counts (it moves from lost to used, and what it gives back
        leaves the lost), so a host written off while alive but silent keeps
        the ledger's account exact.
        """
        if owner in self._forgotten:
            return
        share = self._shares.pop(owner, None) or _Share()
        self._forgotten[owner] = share
        self._count_dead(share, 1)

    def _count_dead(self, share: _Share, sign: int) -> None:
        self._lost_tokens += sign * max(0, share.granted_tokens - share.used_tokens)
        self._lost_cost += sign * max(0.0, share.granted_cost - share.used_cost)
        self._dead_used_tokens += sign * share.used_tokens
        self._dead_used_cost += sign * share.used_cost
        self._dead_unpriced += sign * share.unpriced

    def _late(self, owner: str, tokens: int, cost_usd: float, used: Spent) -> Grant:
        """A forgotten host calls: its report counts, what it gives back is free; dry."""
        share = self._forgotten[owner]
        self._count_dead(share, -1)
        share.report(used)
        share.granted_tokens -= min(max(0, tokens), share.granted_tokens)
        share.granted_cost = max(0.0, share.granted_cost - max(0.0, cost_usd))
        self._count_dead(share, 1)
        return self._answer(owner, 0, 0.0, dry=True)

    def _met(self, owner: str) -> _Share:
        """``owner``'s share, as it calls now; hosts silent past their lease are forgotten."""
        now = self.clock()
        share = self._shares.setdefault(owner, _Share())
        share.seen = now  # it calls: it is not silent
        self._expire(now)
        return share

    def _expire(self, now: float) -> None:
        lease = self.lease_s
        if lease is None:
            return
        for owner, share in list(self._shares.items()):
            if share.holds_grant() and now - share.seen > lease:
                self._written_off += 1
                self.forget(owner)

    def dry(self) -> bool:
        """Nothing unallocated and nothing left on any host: a new run cannot be served
        (``RayRuntime.start`` raises ``BudgetExhausted``)."""
        self._expire(self.clock())
        return self._answer("", 0, 0.0).dry

    def status(self) -> LedgerStatus:
        """The fleet's budget now (as the hosts last reported it)."""
        shares = self._shares.values()
        return LedgerStatus(
            max_total_tokens=self.max_total_tokens,
            max_cost_usd=self.max_cost_usd,
            granted_tokens=sum(s.granted_tokens for s in shares),
            granted_cost_usd=sum(s.granted_cost for s in shares),
            used_tokens=self._dead_used_tokens + sum(s.used_tokens for s in shares),
            used_cost_usd=self._dead_used_cost + sum(s.used_cost for s in shares),
            unpriced=self._dead_unpriced + sum(s.unpriced for s in shares),
            lost_tokens=self._lost_tokens,
            lost_cost_usd=self._lost_cost,
            short=self.short,
            written_off=self._written_off,
            dry_since=self._dry_since,
            hosts={
                owner: HostShare(
                    granted_tokens=s.granted_tokens,
                    granted_cost_usd=s.granted_cost,
                    used_tokens=s.used_tokens,
                    used_cost_usd=s.used_cost,
                    unpriced=s.unpriced,
                )
                for owner, s in self._shares.items()
            },
        )

    # ------------------------------------------------------------- policy

    def _free(self) -> tuple[int | None, float | None]:
        """What no host holds a grant for (negative: reported debts passed the ceiling)."""
        tokens = cost = None
        shares = self._shares.values()
        if self.max_total_tokens is not None:
            committed = sum(s.committed_tokens() for s in shares)
            tokens = self.max_total_tokens - committed - self._lost_tokens - self._dead_used_tokens
        if self.max_cost_usd is not None:
            committed_cost = sum(s.committed_cost() for s in shares)
            cost = self.max_cost_usd - committed_cost - self._lost_cost - self._dead_used_cost
        return tokens, cost

    def _grant_tokens(self, owner: str, share: _Share, want: int) -> int:
        ceiling = self.max_total_tokens
        if ceiling is None or want <= 0:
            return 0
        free, _ = self._free()
        assert free is not None
        # Room for this owner: the free budget, plus its debt (already counted as spend).
        debt = share.committed_tokens() - share.granted_tokens
        room = free + debt
        if room < want:
            self.short = True
        # The debt, then no more than a fair share of what is free (so that the first
        # host to ask cannot take it all), padded to a slice while the fleet is not short.
        ask = min(want, debt + self._fair_tokens(free))
        if not self.short:
            ask = max(self._pad_tokens(free), ask)
        return max(0, min(ask, room))

    def _grant_cost(self, owner: str, share: _Share, want: float) -> float:
        ceiling = self.max_cost_usd
        if ceiling is None or want <= 0:
            return 0.0
        _, free = self._free()
        assert free is not None
        debt = share.committed_cost() - share.granted_cost
        room = free + debt
        if room < want:
            self.short = True
        free = max(0.0, free)
        first_slice = ceiling / (4 * self.hosts)
        ask = min(want, debt + max(free / self.hosts, min(free, first_slice)))
        if not self.short:
            ask = max(min(first_slice, free / (2 * self.hosts)), ask)
        granted = max(0.0, min(ask, room))
        return granted if granted > EPSILON_USD else 0.0

    def _fair_tokens(self, free: int) -> int:
        """The most one ask gets beyond its debt: a fair share of what is free, or,
        once that is less than a first slice, a first slice (so the end takes no
        more round trips than the start)."""
        ceiling = self.max_total_tokens
        assert ceiling is not None
        free = max(0, free)
        return max(math.ceil(free / self.hosts), min(free, math.ceil(ceiling / (4 * self.hosts))))

    def _pad_tokens(self, free: int) -> int:
        ceiling = self.max_total_tokens
        assert ceiling is not None
        return max(0, min(math.ceil(ceiling / (4 * self.hosts)), free // (2 * self.hosts)))

    def _answer(self, owner: str, tokens: int, cost: float, *, dry: bool = False) -> Grant:
        free_tokens, free_cost = self._free()
        others = [s for o, s in self._shares.items() if o != owner]
        if self.short and not dry:
            dry_tokens = (
                free_tokens is not None
                and free_tokens <= 0
                and all(s.used_tokens >= s.granted_tokens for s in others)
            )
            dry_cost = (
                free_cost is not None
                and free_cost <= EPSILON_USD
                and all(s.used_cost >= s.granted_cost - EPSILON_USD for s in others)
            )
            dry = dry_tokens or dry_cost
        status_tokens = self._dead_used_tokens + sum(s.used_tokens for s in self._shares.values())
        status_cost = self._dead_used_cost + sum(s.used_cost for s in self._shares.values())
        if dry and owner not in self._forgotten and self._dry_since is None:
            self._dry_since = self.clock()
        pad = 0
        if self.max_total_tokens is not None and free_tokens is not None:
            pad = self._pad_tokens(max(0, free_tokens))
        return Grant(
            tokens=tokens,
            cost_usd=cost,
            short=self.short,
            dry=dry,
            slice_tokens=pad,
            used_tokens=status_tokens,
            used_cost_usd=status_cost,
        )


# ------------------------------------------------------------------ the link


class LedgerLink(Protocol):
    """How a host reaches the ledger: its calls, with the host's owner id bound in.

    Over Ray: an actor handle and the host's id, each method one
    ``await ledger.<method>.remote(owner, ...)``. Answers may be late; the
    host makes one call at a time.
    """

    async def take(self, want_tokens: int, want_cost_usd: float, used: Spent) -> Grant: ...

    async def give_back(self, tokens: int, cost_usd: float, used: Spent) -> Grant: ...


@attrs.define
class LocalLedgerLink:
    """A link to a ledger in this process; ``latency_s`` is waited each way (tests)."""

    ledger: BudgetLedger
    owner: str
    latency_s: float = 0.0

    async def take(self, want_tokens: int, want_cost_usd: float, used: Spent) -> Grant:
        await self._travel()
        grant = self.ledger.take(self.owner, want_tokens, want_cost_usd, used)
        await self._travel()
        return grant

    async def give_back(self, tokens: int, cost_usd: float, used: Spent) -> Grant:
        await self._travel()
        grant = self.ledger.give_back(self.owner, tokens, cost_usd, used)
        await self._travel()
        return grant

    async def _travel(self) -> None:
        if self.latency_s:
            await anyio.sleep(self.latency_s)
        else:
            await anyio.lowlevel.checkpoint()


# ------------------------------------------------------------------ the host's side


@attrs.frozen(kw_only=True)
class SliceStatistics:
    """A host's slice: its traffic with the ledger and the charges that crossed its grant."""

    takes: int
    give_backs: int
    link_errors: int
    #: Charges that took the host's spend and holds past its grant, or further past it
    #: (a call's input; the measured side of the bound).
    crossings: int
    short: bool
    dry: bool
    #: The ledger has not answered for a lease: the host counts the budget as spent.
    cut_off: bool = False


@attrs.define(kw_only=True)
class SlicedBudget(Budget):
    """A host's Runtime-wide budget, whose ceilings are what its ledger granted it.

    ``max_total_tokens`` / ``max_cost_usd`` are the host's grant so far (net
    of what it gave back; ``None`` where the fleet has no such ceiling). It
    differs from a :class:`Budget` in three ways: reaching its ceilings ends
    nothing until the ledger is dry (``exhausted`` and ``crossed`` say so only
    then); a call that wants more than is left asks for it (``top_up``); and a
    keeper task, started with the Runtime, does all the talking to the ledger.
    """

    sliced: ClassVar[bool] = True

    link: LedgerLink
    poll_s: float = 0.05
    #: How often a host with unheld room asks for news before the fleet is short.
    idle_poll_s: float = 1.0
    #: How long one contact with the ledger may take before its answer is given up
    #: (no more than a third of ``lease_s``).
    contact_timeout_s: float = 10.0
    #: The host's lease with its ledger (``None``: none). While it holds a grant it has
    #: not reported spent, it calls at least every ``lease_s / 3`` (the ledger forgets a
    #: host silent for ``lease_s``: ``BudgetLedger.lease_s``); once the ledger has not
    #: answered for ``lease_s``, it counts the fleet's budget as spent (*cut off*):
    #: its runs spend what its slice holds, then end on the ceiling, until the
    #: ledger answers again. So no call waits for a grant forever.
    lease_s: float | None = None
    cut_off: bool = False
    fleet_max_tokens: int | None = None
    fleet_max_cost: float | None = None
    short: bool = False
    dry: bool = False
    #: Asks the ledger answered with nothing: a call that saw one since it began to
    #: wait takes what room there is.
    empty_answers: int = 0
    slice_tokens: int = 0
    #: The largest output of one call on this host so far (for the calls with no cap
    #: of their own: ``Accounts._estimate``).
    largest_output: int = 0
    fleet_used_tokens: int = 0
    fleet_used_cost: float = 0.0
    takes: int = 0
    give_backs: int = 0
    link_errors: int = 0
    crossings: int = 0
    #: What the waiting calls want in all (each adds its own while it waits).
    _waiting: int = 0
    _wanting_tokens: int = 0
    _wanting_cost: float = 0.0
    _reported: Spent = attrs.field(factory=Spent)
    #: When the ledger last answered (or the keeper started), and when it was last asked.
    _answered_at: float = 0.0
    _asked_at: float = 0.0
    _over: int = 0
    _over_cost: float = 0.0
    _nudged: anyio.Event | None = attrs.field(default=None, repr=False, eq=False)
    #: The keeper waits with nothing to say: the next charge or release may give it news.
    _idle: bool = False
    #: Nudges by calls (a wake by a charge or a release is not one).
    _nudges: int = 0
    _keeper: anyio.CancelScope | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def final(self) -> bool:
        return self.dry

    @property
    def holding(self) -> bool:
        # A release can leave a float's residue of a cost hold: that holds nothing.
        return self.reserved_tokens > 0 or self.reserved_cost > EPSILON_USD

    def statistics(self) -> SliceStatistics:
        return SliceStatistics(
            takes=self.takes,
            give_backs=self.give_backs,
            link_errors=self.link_errors,
            crossings=self.crossings,
            short=self.short,
            dry=self.dry,
            cut_off=self.cut_off,
        )

    # ------------------------------------------------------- budget overrides

    def _excess(self) -> tuple[int, float]:
        """How far spend and holds are past the grant (0 when within it)."""
        tokens, cost = self._room()
        return max(0, -tokens), max(0.0, -cost)

    def charge(self, tokens: int, cost_usd: float | None) -> None:
        super().charge(tokens, cost_usd)
        self._changed()

    def unhold(self, tokens: int, cost: float) -> None:
        super().unhold(tokens, cost)
        self._changed()
        # A release lowers the excess: a charge that raises it again crosses again.
        tokens_over, cost_over = self._excess()
        self._over = min(self._over, tokens_over)
        self._over_cost = min(self._over_cost, cost_over)

    def exhausted(self) -> Hit | None:
        if not self.dry:
            return None
        return self._fleet(super().exhausted())

    def crossed(self) -> Hit | None:
        # Measured, for the bound: a charge (a call's input, an unheld judge call) that
        # took spend and holds past the grant, or further past it. Checked here, after
        # the charge's output has replaced its hold (Accounts.add).
        tokens_over, cost_over = self._excess()
        if tokens_over > self._over or cost_over > self._over_cost + EPSILON_USD:
            self.crossings += 1
        self._over, self._over_cost = tokens_over, cost_over
        hit = super().crossed()
        if hit is None:
            return None
        if self.dry:
            return self._fleet(hit)
        self._nudge()  # a debt: the keeper pays it from the next grant (or learns it is dry)
        return None

    def _fleet(self, hit: Hit | None) -> Hit | None:
        """``hit`` as the fleet's: its ceiling and its spend as last reported."""
        if hit is None:
            return None
        if hit.termination is Termination.TOKEN_CEILING and self.fleet_max_tokens is not None:
            used = max(self.fleet_used_tokens, self.tokens)
            return Hit(hit.ceiling, self.fleet_max_tokens, used, hit.termination)
        if hit.termination is Termination.COST_CEILING and self.fleet_max_cost is not None:
            used_cost = max(self.fleet_used_cost, self.cost_usd)
            return Hit(hit.ceiling, self.fleet_max_cost, used_cost, hit.termination)
        return hit

    def reset(self) -> None:
        raise ValueError(
            "a host's slice of a fleet's budget cannot be reset here: use a new ledger"
        )

    # ------------------------------------------------------- the calls' side

    async def top_up(self, tokens: int, cost: float) -> None:
        """Tell the keeper a call wants ``tokens`` (and ``cost``) of room; wait for news.

        Returns after the next change: a grant, a release, the ledger's answer.
        The caller checks again (and calls again if it still wants).
        """
        self._waiting += 1
        self._wanting_tokens += tokens
        self._wanting_cost += cost
        try:
            self._nudge()
            await self.wait_for_room()
        finally:
            self._waiting -= 1
            self._wanting_tokens -= tokens
            self._wanting_cost -= cost
            if not self._waiting:  # no float residue: nobody wants anything
                self._wanting_tokens, self._wanting_cost = 0, 0.0

    def _nudge(self) -> None:
        self._nudges += 1
        self._wake_keeper()

    def _wake_keeper(self) -> None:
        if self._nudged is not None:
            self._nudged.set()

    def _changed(self) -> None:
        """A charge or a release: news for a keeper that had none (see ``_wait_for_reason``)."""
        if self._idle:
            self._idle = False
            self._wake_keeper()

    # ------------------------------------------------------- the keeper

    def bind(self, tg: TaskGroup) -> None:
        self._nudged = anyio.Event()
        self._keeper = anyio.CancelScope()
        self._answered_at = anyio.current_time()
        tg.start_soon(self._keep, name="tether-fleet-budget")

    def close(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()

    async def aclose(self) -> None:
        """The last contact, once every run has ended: report, and give back all room."""
        self._nudged = None
        await self._contact(closing=True)

    async def _keep(self) -> None:
        assert self._keeper is not None
        with self._keeper:
            while True:
                await self._wait_for_reason()
                fruitless = await self._contact()
                if fruitless:  # nothing granted for calls that wait: ask again later
                    await anyio.sleep(self.poll_s)

    async def _wait_for_reason(self) -> None:
        """Until a call nudges, or a poll is due (see the module docstring).

        With nothing to say (``_poll_in`` is ``None``) the keeper waits for a
        call's nudge, or for the next charge or release, after which it looks
        again: a host that learnt the ledger is dry while its calls still held
        their slice must report what they spent when they end, unasked, or the
        ledger never sees that host's grant spent and the others' last calls
        wait for it forever (issue 28).
        """
        while True:
            nudged = self._nudged
            assert nudged is not None
            if nudged.is_set():
                break
            interval = self._poll_in()
            # Nothing to say but, maybe, the lease's beat: a charge or a release may
            # bring news before the beat (issue 28: a host whose calls held its grant
            # when it learnt the ledger was dry waited for the beat, lease_s / 3, to
            # report them spent, and the other hosts' last runs with it).
            idle = self._news_in() is None
            nudges = self._nudges
            woke = False
            self._idle = idle
            try:
                with anyio.move_on_after(math.inf if interval is None else interval):
                    await nudged.wait()
                    woke = True
            finally:
                self._idle = False
            if not (woke and idle) or self._nudges != nudges:
                break  # a poll or the beat is due, or a call nudged: contact now
            self._nudged = anyio.Event()  # news, maybe: look again
        self._nudged = anyio.Event()

    def _room(self) -> tuple[int, float]:
        """Room neither spent nor held (negative: a debt)."""
        tokens = (
            0
            if self.max_total_tokens is None
            else (self.max_total_tokens - self.tokens - self.reserved_tokens)
        )
        cost = (
            0.0
            if self.max_cost_usd is None
            else (self.max_cost_usd - self.cost_usd - self.reserved_cost)
        )
        return tokens, cost

    def _poll_in(self) -> float | None:
        """When to call the ledger unasked (``None``: only when a call asks).

        Soon (``poll_s``) with a debt or a waiting call (unless the ledger is
        dry), and, once the fleet is short, with unheld room to give back or a
        charge not reported yet (others' calls wait on it: the ledger is dry
        only when every host reported it has nothing left); now and then
        (``idle_poll_s``) with either of those before it knows the fleet is
        short, to learn that it is (a host that spent its slice to the last
        token and went quiet would keep the others waiting). With a lease,
        at least every ``lease_s / 3`` while it holds a grant it has not
        reported spent, and every ``idle_poll_s`` while cut off.
        """
        interval = self._news_in()
        lease = self.lease_s
        if lease is None:
            return interval
        if self.cut_off:
            return self.idle_poll_s if interval is None else min(interval, self.idle_poll_s)
        reported = self._reported
        grant_tokens = self.max_total_tokens or 0
        grant_cost = self.max_cost_usd or 0.0
        if grant_tokens > reported.tokens or grant_cost > reported.cost_usd + EPSILON_USD:
            beat = max(0.0, self._asked_at + lease / 3 - anyio.current_time())
            interval = beat if interval is None else min(interval, beat)
        return interval

    def _news_in(self) -> float | None:
        tokens, cost = self._room()
        if not self.dry and (tokens < 0 or cost < -EPSILON_USD or self._waiting):
            return self.poll_s
        reported = self._reported
        news = (
            tokens > 0
            or cost > EPSILON_USD
            or (reported.tokens, reported.cost_usd) != (self.tokens, self.cost_usd)
        )
        if not news:
            return None
        if self.short or (tokens <= 0 and cost <= EPSILON_USD and not self.holding):
            # Short, or its slice is spent to the last token: others may wait for its report.
            return self.poll_s
        return self.idle_poll_s

    def _spent(self) -> Spent:
        return Spent(tokens=self.tokens, cost_usd=self.cost_usd, unpriced=self.unpriced)

    async def _contact(self, *, closing: bool = False) -> bool:
        """One exchange with the ledger; true when calls want and nothing came."""
        room_tokens, room_cost = self._room()
        need_tokens = 0
        if self.max_total_tokens is not None:
            need_tokens = max(0, self._wanting_tokens - room_tokens)
        need_cost = 0.0
        if self.max_cost_usd is not None:
            need_cost = max(0.0, self._wanting_cost - room_cost)
            if need_cost <= EPSILON_USD:
                need_cost = 0.0
        spent = self._spent()
        give_tokens, give_cost = 0, 0.0
        asking = not closing and (need_tokens > 0 or need_cost > 0)
        if not asking and (self.short or closing) and not self._waiting:
            # Keep only what calls hold: the rest may be what another host waits for.
            give_tokens = max(0, room_tokens)
            give_cost = room_cost if room_cost > EPSILON_USD else 0.0
            if self.max_total_tokens is not None:
                self.max_total_tokens -= give_tokens
            if self.max_cost_usd is not None:
                self.max_cost_usd -= give_cost
            if give_tokens or give_cost > EPSILON_USD:
                self.dry = False  # what it gives back is the fleet's again
        timeout = self.contact_timeout_s
        if self.lease_s is not None:
            timeout = min(timeout, self.lease_s / 3)
        self._asked_at = anyio.current_time()
        try:
            with anyio.CancelScope(shield=True), anyio.fail_after(timeout):
                if give_tokens or give_cost:
                    self.give_backs += 1
                    grant = await self.link.give_back(give_tokens, give_cost, spent)
                else:
                    self.takes += 1
                    grant = await self.link.take(need_tokens, need_cost, spent)
        except Exception:
            # The ledger is out of reach (a dead actor, a timeout). Not the runs'
            # failure: what was given back stays given (the ledger may count it
            # twice, never zero times); calls that wait ask again later. Out of
            # reach for a lease: the budget counts as spent here (cut off).
            self.link_errors += 1
            lease = self.lease_s
            silent = anyio.current_time() - self._answered_at
            if lease is not None and silent >= lease and not self.cut_off:
                self.cut_off = self.dry = True
                self._wake()
            return True
        self._answered_at = anyio.current_time()
        self.cut_off = False
        self._reported = spent
        if self.max_total_tokens is not None:
            self.max_total_tokens += grant.tokens
        if self.max_cost_usd is not None:
            self.max_cost_usd += grant.cost_usd
        if asking and not (grant.tokens or grant.cost_usd):
            self.empty_answers += 1
        self.short = self.short or grant.short
        self.dry = grant.dry  # not for good: a host that gave back room may get it again
        self.slice_tokens = grant.slice_tokens
        self.fleet_used_tokens, self.fleet_used_cost = grant.used_tokens, grant.used_cost_usd
        self._over, self._over_cost = self._excess()
        self._wake()
        return asking and not (grant.tokens or grant.cost_usd) and not self.dry


# ------------------------------------------------------------------ the seam


def slice_of(
    link: LedgerLink,
    limits: Limits,
    *,
    poll_s: float = 0.05,
    idle_poll_s: float = 1.0,
    lease_s: float | None = 30.0,
) -> SlicedBudget:
    """A host's slice of a fleet's budget, reaching the ledger through ``link``
    (:meth:`tether.Runtime.share_budget` installs it in a Runtime not yet entered).

    ``limits`` are the fleet's ceilings, as its ledger holds them (only
    ``max_total_tokens`` and ``max_cost_usd`` apply). ``rt.budget`` then
    shows the host's slice: its grant so far as the ceilings, its own spend.
    ``poll_s`` is how often the host's keeper calls the ledger while it has
    something to say, ``idle_poll_s`` while it only holds unheld room before
    the fleet is short (see :meth:`SlicedBudget._poll_in`). ``lease_s``: the
    host's lease with its ledger (see :attr:`SlicedBudget.lease_s`; use the
    ledger's ``lease_s``; ``share_budget`` leaves the default, set
    ``lease_s`` on the slice it returns to change it), ``None`` for none:
    then a call may wait for a ledger out of reach for as long as it is.
    """
    if not isinstance(limits, Limits):
        raise TypeError(f"share_budget(limits=...) must be a tether.Limits, got {limits!r}")
    if limits.max_total_tokens is None and limits.max_cost_usd is None:
        raise ValueError("share_budget() needs limits with max_total_tokens or max_cost_usd")
    for name, value in (("poll_s", poll_s), ("idle_poll_s", idle_poll_s), ("lease_s", lease_s)):
        if value is not None and not value > 0:
            raise ValueError(f"share_budget({name}=...) must be > 0, got {value!r}")
    return SlicedBudget(
        name="runtime.",
        max_total_tokens=None if limits.max_total_tokens is None else 0,
        max_cost_usd=None if limits.max_cost_usd is None else 0.0,
        link=link,
        poll_s=poll_s,
        idle_poll_s=idle_poll_s,
        lease_s=lease_s,
        fleet_max_tokens=limits.max_total_tokens,
        fleet_max_cost=limits.max_cost_usd,
    )
