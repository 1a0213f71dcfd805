"""One token and cost budget over several Runtimes, held by slices from one ledger."""

from __future__ import annotations

import contextlib
import pickle
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether import events as ev
from tether.providers import (
    ModelRequest,
    Price,
    ProviderContext,
    Reply,
    ScriptedProvider,
)
from tether.runtime import _fleetbudget as fleet
from tether.runtime._fleetbudget import (
    BudgetLedger,
    Grant,
    LocalLedgerLink,
    SlicedBudget,
    Spent,
)

from .helpers import AUTOJUMP, assert_consistent, of, task_names

pytestmark = pytest.mark.anyio


@attrs.frozen
class Capped(ScriptedProvider):
    """The scripted provider with a provider-level ``max_tokens``, as the HTTP providers have."""

    max_tokens: int = 1024


def used(tokens: int = 0, cost: float = 0.0) -> Spent:
    return Spent(tokens=tokens, cost_usd=cost)


# ------------------------------------------------------------------ the ledger


def test_a_first_ask_gets_a_slice_and_never_more_than_the_ceiling() -> None:
    """A small ask gets a quarter of a fair share, a big one no more than a fair share of
    what is free; nobody gets past the ceiling."""
    ledger = BudgetLedger(max_total_tokens=16_000, hosts=4)
    assert ledger.take("a", 10, 0.0, used()).tokens == 1_000  # 16,000 / (4 × 4)
    assert ledger.take("b", 9_000, 0.0, used()).tokens == 3_750  # 15,000 / 4
    grant = ledger.take("c", 20_000, 0.0, used())
    assert grant.tokens == 2_813  # more was asked than there is: short, a fair share
    assert grant.short
    assert not grant.dry  # a and b still hold grants they have not spent
    while ledger.take("d", 20_000, 0.0, used()).tokens:
        assert ledger.status().granted_tokens <= 16_000
    assert ledger.status().granted_tokens == 16_000


def test_padding_shrinks_with_what_is_left() -> None:
    """Padding never hands out more than half of what is unallocated."""
    ledger = BudgetLedger(max_total_tokens=1_000, hosts=1)
    assert ledger.take("a", 1, 0.0, used()).tokens == 250
    assert ledger.take("a", 700, 0.0, used(250)).tokens == 700
    grant = ledger.take("a", 1, 0.0, used(950))
    assert grant.tokens == 25  # min(250, 50 // 2)
    assert not grant.short


def test_once_short_the_ledger_pads_nothing() -> None:
    """After a host asked for more than there was, grants are what is asked, no slice."""
    ledger = BudgetLedger(max_total_tokens=1_000, hosts=1)
    ledger.take("a", 900, 0.0, used())
    assert ledger.take("b", 200, 0.0, used()).tokens == 100
    assert ledger.give_back("a", 500, 0.0, used(400)).short
    assert ledger.take("b", 10, 0.0, used(100)).tokens == 10


def test_dry_only_when_no_host_has_anything_left() -> None:
    """Dry: nothing unallocated, and every other host spent what it was granted."""
    ledger = BudgetLedger(max_total_tokens=1_000, hosts=1)
    ledger.take("a", 600, 0.0, used())
    ledger.take("b", 400, 0.0, used())
    assert ledger.take("b", 1, 0.0, used(400)) == Grant(short=True, used_tokens=400, slice_tokens=0)
    # a reports it spent 550: 50 are still there (held or not), so b is not told dry.
    ledger.take("a", 0, 0.0, used(550))
    assert not ledger.take("b", 1, 0.0, used(400)).dry
    # a gives its 50 back: b gets them.
    ledger.give_back("a", 50, 0.0, used(550))
    assert ledger.take("b", 80, 0.0, used(400)).tokens == 50
    ledger.take("a", 0, 0.0, used(550))
    assert not ledger.dry()  # b has not reported spending its last 50
    grant = ledger.take("b", 1, 0.0, used(450))
    assert grant.dry
    assert grant.used_tokens == 1_000
    assert ledger.dry()  # for a new run too: a spent everything, and so did b


def test_a_debt_is_spend_and_is_paid_first_from_the_next_grant() -> None:
    """Input that crossed a host's grant is spend for every host; its next grant covers it."""
    ledger = BudgetLedger(max_total_tokens=10_000, hosts=1)
    assert ledger.take("a", 100, 0.0, used()).tokens == 2_500  # a slice
    ledger.take("a", 0, 0.0, used(2_700))  # 200 of input crossed a's grant
    assert ledger.take("b", 9_000, 0.0, used()).tokens == 7_300
    # a asks for its debt and 300 more: only the debt can be paid.
    grant = ledger.take("a", 500, 0.0, used(2_700))
    assert (grant.tokens, grant.short) == (200, True)
    assert ledger.status().hosts["a"].granted_tokens == 2_700


def test_reported_debts_past_the_ceiling_grant_nothing_more() -> None:
    """Debts past the ceiling: the fleet is short and grants no new room."""
    ledger = BudgetLedger(max_total_tokens=1_000, hosts=1)
    assert ledger.take("a", 500, 0.0, used()).tokens == 500
    assert ledger.take("b", 500, 0.0, used()).tokens == 500
    # 200 of input crossed a's grant: that is spend past the ceiling, nothing is left.
    assert ledger.take("a", 10, 0.0, used(700)).tokens == 0
    assert ledger.take("b", 10, 0.0, used(500)).dry


def test_forget_counts_a_dead_hosts_unreported_grant_as_spent() -> None:
    """A dead host's grant stays spent; it is answered dry if it calls again."""
    ledger = BudgetLedger(max_total_tokens=1_000, hosts=1)
    ledger.take("a", 600, 0.0, used())
    ledger.take("a", 0, 0.0, used(100))
    ledger.forget("a")
    status = ledger.status()
    assert (status.lost_tokens, status.used_tokens, status.granted_tokens) == (500, 100, 0)
    assert ledger.take("b", 1_000, 0.0, used()).tokens == 400
    assert ledger.take("a", 10, 0.0, used(100)).dry
    assert ledger.give_back("a", 10, 0.0, used(100)).dry
    assert "a" not in ledger.status().hosts


def test_a_host_silent_past_its_lease_is_written_off_and_its_late_report_counts() -> None:
    """With lease_s, a host that holds a grant and does not call for a lease is forgotten
    at the next call of any host (the others learn the budget is dry); if it calls
    again it is answered dry, but what it reports spent and gives back still counts."""
    now = [0.0]
    ledger = BudgetLedger(max_total_tokens=1_000, hosts=2, lease_s=10.0, clock=lambda: now[0])
    assert ledger.take("a", 400, 0.0, used()).tokens == 400
    while ledger.take("b", 600, 0.0, used()).tokens:
        pass
    assert ledger.status().hosts["b"].granted_tokens == 600
    now[0] = 9.0
    assert not ledger.take("b", 100, 0.0, used(600)).dry  # a may still spend its 400
    now[0] = 10.5
    grant = ledger.take("b", 100, 0.0, used(600))
    assert grant.dry
    status = ledger.status()
    assert (status.written_off, status.lost_tokens, list(status.hosts)) == (1, 400, ["b"])
    # a was alive after all: it reports 150 spent and gives back the other 250
    assert ledger.take("a", 50, 0.0, used(150)).dry
    assert (ledger.status().used_tokens, ledger.status().lost_tokens) == (750, 250)
    ledger.give_back("a", 250, 0.0, used(150))
    assert (ledger.status().used_tokens, ledger.status().lost_tokens) == (750, 0)
    more = (
        ledger.take("b", 300, 0.0, used(600)).tokens + ledger.take("b", 300, 0.0, used(600)).tokens
    )
    assert more == 250  # what a gave back is free again
    # a host that reported its whole grant spent is never written off: it holds nothing
    now[0] = 99.0
    assert ledger.take("b", 0, 0.0, used(850)).dry
    now[0] = 200.0
    assert ledger.dry()
    assert ledger.status().written_off == 1
    with pytest.raises(ValueError, match="lease_s"):
        BudgetLedger(max_total_tokens=1, lease_s=0)


def test_the_cost_ceiling_is_held_the_same_way() -> None:
    """Cost grants: padded, never past the ceiling, dry when spent."""
    ledger = BudgetLedger(max_cost_usd=1.0, hosts=1)
    first = ledger.take("a", 0, 0.01, used())
    assert first.cost_usd == pytest.approx(0.25)
    assert first.tokens == 0
    assert ledger.take("a", 0, 2.0, used(cost=0.25)).cost_usd == pytest.approx(0.75)
    assert ledger.take("b", 0, 0.1, used()).cost_usd == 0.0
    assert ledger.take("b", 0, 0.1, used()).short
    assert ledger.take("b", 0, 0.1, used()).dry is False
    assert ledger.take("a", 0, 0.0, used(cost=1.0)).cost_usd == 0.0
    assert ledger.take("b", 0, 0.1, used()).dry


def test_the_ledger_pickles_and_checks_its_arguments() -> None:
    """A ledger travels (an actor's state) and refuses nonsense at construction."""
    ledger = BudgetLedger(max_total_tokens=1_000, max_cost_usd=2.0, hosts=3)
    ledger.take("a", 10, 0.1, used(1, 0.01))
    again = pickle.loads(pickle.dumps(ledger))
    assert again.status() == ledger.status()
    with pytest.raises(ValueError, match="max_total_tokens or max_cost_usd"):
        BudgetLedger()
    with pytest.raises(ValueError, match="hosts"):
        BudgetLedger(max_total_tokens=1, hosts=0)
    with pytest.raises(ValueError, match="max_cost_usd"):
        BudgetLedger(max_cost_usd=-1.0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["take", "give", "forget"]),
            st.sampled_from("abcd"),
            st.integers(0, 3_000),
            st.integers(0, 400),
        ),
        max_size=60,
    )
)
def test_grants_never_pass_the_ceiling(ops: list[tuple[str, str, int, int]]) -> None:
    """Whatever the hosts ask, report (debts included), give back or die, grants stay in."""
    ceiling = 10_000
    ledger = BudgetLedger(max_total_tokens=ceiling, hosts=4)
    granted: dict[str, int] = {}
    spent: dict[str, int] = {}
    dead = 0
    for op, owner, amount, extra in ops:
        if op == "forget":
            if owner in granted:
                dead += max(granted.pop(owner), spent.pop(owner))
            ledger.forget(owner)
            continue
        if owner in ledger._forgotten:
            continue
        have = granted.setdefault(owner, 0)
        # A host spends within its grant, and input may cross it by ``extra``.
        now = spent[owner] = max(spent.get(owner, 0), min(have, amount) + extra)
        if op == "take":
            granted[owner] += ledger.take(owner, amount, 0.0, used(now)).tokens
        else:
            back = max(0, min(amount, have - now))
            granted[owner] -= back
            ledger.give_back(owner, back, 0.0, used(now))
        assert sum(granted.values()) + dead <= ceiling
        assert ledger.status().granted_tokens == sum(granted.values())


# ------------------------------------------------------------------ the fleet


ENDS: list[int] = []  # the fleet's spend each time a slice reported the fleet's ceiling reached
FLEET: list[SlicedBudget] = []


class Watched(SlicedBudget):
    """A slice that records the fleet's real spend whenever it ends a run on the ceiling."""

    def exhausted(self) -> Any:
        return self._seen(super().exhausted())

    def crossed(self) -> Any:
        return self._seen(super().crossed())

    def _seen(self, hit: Any) -> Any:
        if hit is not None:
            ENDS.append(sum(b.tokens for b in FLEET))
        return hit


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setattr(fleet, "SlicedBudget", Watched)
    ENDS.clear()
    FLEET.clear()
    return ENDS


@contextlib.asynccontextmanager
async def hosts(
    ledger: BudgetLedger, limits: tether.Limits, n: int, latency_s: float = 0.0, **kwargs: Any
) -> AsyncIterator[tuple[list[tether.Runtime], list[SlicedBudget]]]:
    """``n`` Runtimes in this process, each a host of ``ledger``."""
    rts = [tether.Runtime(**kwargs) for _ in range(n)]
    slices = [
        rt.share_budget(LocalLedgerLink(ledger, f"host-{i}", latency_s=latency_s), limits)
        for i, rt in enumerate(rts)
    ]
    FLEET[:] = slices
    async with contextlib.AsyncExitStack() as stack:
        for rt in rts:
            await stack.enter_async_context(rt)
        yield rts, slices


def max_input(results: Sequence[tether.RunResult]) -> int:
    return max(c.input_tokens for r in results for c in of(r.events, ev.UsageCharged))


@pytest.mark.parametrize("latency_s", [0.0, 0.002])
async def test_four_hosts_and_400_runs_hold_one_budget(
    latency_s: float, watched: list[int]
) -> None:
    """400 concurrent runs over 4 hosts: within the bound, nothing stranded, usage exact."""
    ceiling = 20_000
    rng = random.Random(7)
    ledger = BudgetLedger(max_total_tokens=ceiling, hosts=4)
    limits = tether.Limits(max_total_tokens=ceiling)
    async with hosts(ledger, limits, 4, latency_s) as (rts, slices):
        handles = []
        for i in range(400):
            text = "word " * rng.randrange(10, 600)  # 13 to 750 tokens: some are cut
            provider = Capped(
                [Reply(text=text)] * 3, max_tokens=rng.choice((256, 512)), latency_s=0.01
            )
            agent = tether.Agent(name=f"a{i}", provider=provider)
            handles.append((i % 4, rts[i % 4].start(agent, "x" * rng.randrange(200, 2_000))))
        results = [(host, await handle.result()) for host, handle in handles]
        statuses = [rt.budget for rt in rts]
    runs = [r for _, r in results]
    for result in runs:
        assert_consistent(result)  # one RunFinished each, usage = its charges
    spent = sum(r.usage.total_tokens for r in runs)
    status = ledger.status()
    # Usage is exact: what the runs charged is what the hosts reported to the ledger.
    assert status.used_tokens == spent
    assert [s.tokens for s in statuses if s is not None] == [
        sum(r.usage.total_tokens for h, r in results if h == host) for host in range(4)
    ]
    # Every host gave back what it did not spend when it closed.
    assert status.granted_tokens <= spent
    # Output is always held within a grant; only crossing input passes the ceiling.
    assert sum(r.usage.output_tokens for r in runs) <= ceiling
    crossings = sum(s.statistics().crossings for s in slices)
    assert spent <= ceiling + crossings * max_input(runs)
    # The budget ran out, and no run ended on it while any of it was left anywhere.
    ended = [r for r in runs if r.termination is tether.Termination.TOKEN_CEILING]
    assert ended
    assert {r.termination for r in runs} <= {
        tether.Termination.TOKEN_CEILING,
        tether.Termination.ANSWERED,
        tether.Termination.MAX_CONTINUES,
    }
    assert watched
    assert min(watched) >= ceiling
    for result in ended:
        (hit,) = of(result.events, ev.CeilingHit)
        assert (hit.ceiling, hit.limit) == ("runtime.max_total_tokens", ceiling)
    # Each host ran some of its runs to the end before the fleet ran dry.
    assert all(any(r.termination.ok for h, r in results if h == host) for host in range(4))


async def test_a_host_ends_its_runs_only_when_the_fleet_is_dry(watched: list[int]) -> None:
    """A host spends many slices without ending a run; once dry, start raises BudgetExhausted."""
    ceiling = 4_000
    ledger = BudgetLedger(max_total_tokens=ceiling, hosts=4)  # slices of 250 tokens
    limits = tether.Limits(max_total_tokens=ceiling)
    provider = Capped([Reply(text="word " * 30)], max_tokens=64)  # 38 output tokens a call
    agent = tether.Agent(name="a", provider=provider)
    async with hosts(ledger, limits, 2) as (rts, slices):
        first = [await rts[0].run(agent, "q") for _ in range(40)]
        assert {r.termination for r in first} == {tether.Termination.ANSWERED}
        assert slices[0].statistics().takes > 1
        assert not watched
        greedy = Capped([Reply(text="word " * 2_000)] * 20, max_tokens=512)
        unbounded = tether.Limits(max_continues=20, max_steps=20)
        rest = await rts[1].run(tether.Agent(name="g", provider=greedy, limits=unbounded), "q")
        assert rest.termination is tether.Termination.TOKEN_CEILING
        with pytest.raises(tether.runtime.BudgetExhausted, match=r"runtime\.max_total_tokens"):
            rts[1].start(agent, "q")
        with pytest.raises(ValueError, match="new ledger"):
            rts[1].reset_budget()
    assert min(watched) >= ceiling
    assert ledger.status().used_tokens == sum(r.usage.total_tokens for r in [*first, rest])


@AUTOJUMP
async def test_an_idle_host_gives_back_what_another_needs(watched: list[int]) -> None:
    """The fleet runs short: an idle host returns its unheld remainder; a busy one spends it."""
    ceiling = 2_000
    ledger = BudgetLedger(max_total_tokens=ceiling, hosts=2)
    limits = tether.Limits(max_total_tokens=ceiling)
    small = Capped([Reply(text="hi")], max_tokens=100)
    async with hosts(ledger, limits, 2, latency_s=0.005) as (rts, slices):
        await rts[0].run(tether.Agent(name="s", provider=small), "q")  # takes a slice of 250
        assert rts[0].budget is not None
        assert rts[0].budget.max_total_tokens == 250
        # Host 1's calls want more than is unallocated: the fleet runs short.
        big = Capped([Reply(text="word " * 2_000)] * 3, max_tokens=1_900)
        result = await rts[1].run(tether.Agent(name="b", provider=big), "q")
        assert slices[0].statistics().give_backs >= 1
        idle = rts[0].budget
        assert idle.max_total_tokens == idle.tokens  # it kept nothing it did not spend
        assert sum(b.tokens for b in slices) >= ceiling
    assert result.termination is tether.Termination.TOKEN_CEILING
    assert min(watched) >= ceiling
    waits = of(result.events, ev.ProviderWait)
    assert waits
    assert all("fleet" in w.reason for w in waits)


@AUTOJUMP
async def test_a_ledger_out_of_reach_is_not_the_runs_failure() -> None:
    """A link that fails: the keeper counts it and asks again; the run goes on."""

    @attrs.define
    class Flaky(LocalLedgerLink):
        failures: int = 2

        async def take(self, want_tokens: int, want_cost_usd: float, used: Spent) -> Grant:
            if self.failures:
                self.failures -= 1
                raise ConnectionError("the ledger actor died")
            return await super().take(want_tokens, want_cost_usd, used)

    ledger = BudgetLedger(max_total_tokens=1_000)
    rt = tether.Runtime()
    budget = rt.share_budget(Flaky(ledger, "h"), tether.Limits(max_total_tokens=1_000))
    async with rt:
        result = await rt.run(tether.Agent(name="a", provider=Capped([Reply(text="hi")])), "q")
    assert result.termination is tether.Termination.ANSWERED
    assert budget.statistics().link_errors == 2
    assert ledger.status().used_tokens == result.usage.total_tokens


async def test_the_cost_budget_holds_across_hosts(watched: list[int]) -> None:
    """A fleet cost ceiling: output cost held within grants, runs end cost_ceiling, exact sums."""
    ceiling = 0.05
    price = Price(input=2.0, output=10.0)
    ledger = BudgetLedger(max_cost_usd=ceiling, hosts=3)
    limits = tether.Limits(max_cost_usd=ceiling)
    async with hosts(ledger, limits, 3) as (rts, slices):
        handles = [
            rts[i % 3].start(
                tether.Agent(
                    name=f"a{i}",
                    provider=Capped(
                        [Reply(text="word " * 400)] * 3,
                        max_tokens=256,
                        cost_per_mtok=price,
                        latency_s=0.01,
                    ),
                ),
                "x" * 800,
            )
            for i in range(60)
        ]
        runs = [await h.result() for h in handles]
    for result in runs:
        assert_consistent(result)
    cost = sum(r.usage.cost_usd or 0.0 for r in runs)
    output_cost = sum(r.usage.output_tokens for r in runs) * price.output / 1e6
    assert output_cost <= ceiling + 1e-9
    crossings = sum(s.statistics().crossings for s in slices)
    input_cost = max_input(runs) * price.input / 1e6
    assert cost <= ceiling + crossings * input_cost + 1e-9
    assert ledger.status().used_cost_usd == pytest.approx(cost)
    ended = [r for r in runs if r.termination is tether.Termination.COST_CEILING]
    assert ended
    # Nothing stranded: what is left is less than one output token's price per host.
    assert cost >= ceiling - 3 * price.output / 1e6


async def test_share_budget_is_a_seam_before_the_runtime_starts() -> None:
    """share_budget() refuses a running Runtime, one with its own budget, limits without one."""
    ledger = BudgetLedger(max_total_tokens=100)
    link = LocalLedgerLink(ledger, "h")
    limits = tether.Limits(max_total_tokens=100)
    with pytest.raises(ValueError, match="budget of its own"):
        tether.Runtime(limits=limits).share_budget(link, limits)
    with pytest.raises(ValueError, match="max_total_tokens or max_cost_usd"):
        tether.Runtime().share_budget(link, tether.Limits())
    async with tether.Runtime() as rt:
        with pytest.raises(RuntimeError, match="before entering"):
            rt.share_budget(link, limits)
    rt = tether.Runtime()
    rt.share_budget(link, limits)
    assert rt.budget is not None
    assert (rt.budget.max_total_tokens, rt.budget.max_cost_usd) == (0, None)
    async with rt:
        assert "tether-fleet-budget" in task_names()
    assert "tether-fleet-budget" not in task_names()


async def test_a_runtime_without_a_ledger_keeps_no_task_and_asks_nobody() -> None:
    """A plain Runtime budget is final: no keeper task, and the slice path is never taken."""
    provider = ScriptedProvider([Reply(text="ok")], record=True)
    async with tether.Runtime(limits=tether.Limits(max_total_tokens=80)) as rt:
        assert "tether-fleet-budget" not in task_names()
        result = await rt.run(tether.Agent(name="a", provider=provider), "q")
    assert result.termination is tether.Termination.ANSWERED
    assert provider.requests[0][1].max_tokens == 80
    assert not of(result.events, ev.ProviderWait)


def _unused(request: ModelRequest, ctx: ProviderContext) -> Reply:  # pragma: no cover
    return Reply(text="")


async def test_closing_a_host_gives_its_remainder_back() -> None:
    """A host that closes returns what it did not spend: another host may use it."""
    ledger = BudgetLedger(max_total_tokens=1_000, hosts=1)
    limits = tether.Limits(max_total_tokens=1_000)
    rt = tether.Runtime()
    rt.share_budget(LocalLedgerLink(ledger, "gone"), limits)
    async with rt:
        result = await rt.run(tether.Agent(name="a", provider=Capped([Reply(text="hi")])), "q")
        assert ledger.status().granted_tokens >= 250
    share = ledger.status().hosts["gone"]
    assert share.granted_tokens == share.used_tokens == result.usage.total_tokens
    assert ledger.take("next", 2_000, 0.0, used()).tokens == 1_000 - share.used_tokens
    await anyio.lowlevel.checkpoint()


@AUTOJUMP
async def test_a_stream_past_max_tokens_is_cut_once_the_fleet_is_dry(watched: list[int]) -> None:
    """A server that ignores max_tokens: its debt is paid while the fleet has budget, and
    the stream is cut at the first report after its host learns the ledger is dry."""
    ceiling = 1_000
    ledger = BudgetLedger(max_total_tokens=ceiling, hosts=2)
    limits = tether.Limits(max_total_tokens=ceiling)
    runaway = ScriptedProvider(
        [Reply(text="word " * 2_000)],  # 2,500 tokens, whatever max_tokens says
        chunk_size=8,
        chunk_latency_s=0.001,
        honor_max_tokens=False,
    )
    async with hosts(ledger, limits, 2, latency_s=0.002) as (rts, _):
        result = await rts[0].run(tether.Agent(name="r", provider=runaway), "q")
    assert_consistent(result)
    assert result.termination is tether.Termination.TOKEN_CEILING
    # Past the ceiling: its input, and what streamed during one contact with the ledger
    # (2 ms each way, a 2-token chunk every 1 ms).
    assert result.usage.total_tokens <= ceiling + result.usage.input_tokens + 2 * 8
    assert ledger.status().used_tokens == result.usage.total_tokens
    assert min(watched) >= ceiling


@AUTOJUMP
async def test_a_host_that_spent_its_slice_and_went_quiet_still_lets_the_fleet_run_dry(
    watched: list[int],
) -> None:
    """A host that spent its slice to the last token reports it, unasked: the others'
    last calls end on the ceiling instead of waiting for it forever."""
    ceiling = 1_000
    ledger = BudgetLedger(max_total_tokens=ceiling, hosts=4)  # a first slice of 63
    limits = tether.Limits(max_total_tokens=ceiling)
    greedy = Capped([Reply(text="word " * 2_000)] * 40, max_tokens=200)
    unbounded = tether.Limits(max_continues=40, max_steps=40)
    async with hosts(ledger, limits, 2) as (rts, slices):
        quiet = slices[1]
        await quiet.top_up(1, 0.0)  # a call asks: the host gets a slice
        assert quiet.max_total_tokens == 63
        quiet.charge(63, None)  # ... and its calls spend it exactly, then nothing runs there
        assert ledger.status().hosts["host-1"].used_tokens == 0  # not reported yet
        result = await rts[0].run(tether.Agent(name="g", provider=greedy, limits=unbounded), "q")
        assert ledger.status().hosts["host-1"].used_tokens == 63
    assert result.termination is tether.Termination.TOKEN_CEILING
    assert min(watched) >= ceiling


@AUTOJUMP
async def test_a_dry_host_reports_what_its_calls_spent_after_it_learnt(watched: list[int]) -> None:
    """Issue 28: a host that learns the ledger is dry while its call still streams within
    its slice reports that call's spend when it ends, unasked. Before, its keeper had
    nothing to say at the dry answer and slept until a call of its own nudged it, so the
    ledger never saw its grant spent and the other host's runs waited forever."""
    ceiling = 1_000
    ledger = BudgetLedger(max_total_tokens=ceiling, hosts=2)
    limits = tether.Limits(max_total_tokens=ceiling)
    slow = Capped(  # 100 tokens a second, a usage report every 4
        [Reply(text="word " * 320)], max_tokens=400, chunk_size=16, chunk_latency_s=0.04
    )
    greedy = Capped([Reply(text="word " * 2_000)] * 20, max_tokens=600, latency_s=0.01)
    unbounded = tether.Limits(max_continues=20, max_steps=20)
    async with hosts(ledger, limits, 2) as (rts, _):
        streaming = rts[0].start(tether.Agent(name="slow", provider=slow), "q")
        await anyio.sleep(0.1)  # it holds its slice and streams
        with anyio.fail_after(60):
            spender = await rts[1].run(
                tether.Agent(name="greedy", provider=greedy, limits=unbounded), "q"
            )
            slow_result = await streaming.result()
    assert slow_result.termination is tether.Termination.ANSWERED
    assert spender.termination is tether.Termination.TOKEN_CEILING
    spent = slow_result.usage.total_tokens + spender.usage.total_tokens
    assert ledger.status().used_tokens == spent
    assert min(watched) >= ceiling


@attrs.define
class Partitioned(LocalLedgerLink):
    """A link that can be cut: while cut, a call never comes back (a host stopped by
    SIGSTOP, or on the wrong side of a partition, as the ledger and the host see it)."""

    cut: bool = False

    async def take(self, want_tokens: int, want_cost_usd: float, used: Spent) -> Grant:
        if self.cut:
            await anyio.sleep_forever()
        return await super().take(want_tokens, want_cost_usd, used)

    async def give_back(self, tokens: int, cost_usd: float, used: Spent) -> Grant:
        if self.cut:
            await anyio.sleep_forever()
        return await super().give_back(tokens, cost_usd, used)


@AUTOJUMP
async def test_a_silent_host_is_written_off_after_its_lease_and_waits_no_longer_itself(
    watched: list[int],
) -> None:
    """A host holding a grant goes silent (its link is cut). Within its lease the ledger
    writes its grant off, so the other host's run that needs more ends token_ceiling
    rather than waiting for it; the silent host, unanswered for a lease, counts the
    budget as spent, so its own run that needs more ends too. Once it is heard again,
    what it spent meanwhile counts: the ledger's account is the runs' usage."""
    ceiling, lease, poll = 2_000, 3.0, 0.05
    ledger = BudgetLedger(
        max_total_tokens=ceiling, hosts=2, lease_s=lease, clock=anyio.current_time
    )
    limits = tether.Limits(max_total_tokens=ceiling)
    links = [Partitioned(ledger, f"host-{i}", latency_s=0.005) for i in range(2)]
    rts = [tether.Runtime() for _ in links]
    slices = [
        rt.share_budget(link, limits, poll_s=poll) for rt, link in zip(rts, links, strict=True)
    ]
    for budget in slices:
        budget.lease_s = lease
    FLEET[:] = slices
    long = tether.Limits(max_continues=20, max_steps=20)

    def greedy(name: str) -> tether.Agent:
        provider = Capped([Reply(text="word " * 2_000)] * 20, max_tokens=400, latency_s=0.01)
        return tether.Agent(name=name, provider=provider, limits=long)

    async with rts[0], rts[1]:
        first = await rts[0].run(
            tether.Agent(name="small", provider=Capped([Reply(text="hi")], max_tokens=400)), "q"
        )
        assert slices[0].max_total_tokens == 400  # it holds a grant it has not spent
        links[0].cut = True
        cut_at = anyio.current_time()
        with anyio.fail_after(lease * 4):
            other = await rts[1].run(greedy("other"), "q")
        other_end = anyio.current_time()
        with anyio.fail_after(lease * 4):
            own = await rts[0].run(greedy("own"), "q")
        own_end = anyio.current_time()
        assert slices[0].statistics().cut_off
        links[0].cut = False
        await anyio.sleep(1.5)  # a host cut off asks every idle_poll_s (1 s)
        assert not slices[0].statistics().cut_off
    assert other.termination is tether.Termination.TOKEN_CEILING
    assert own.termination is tether.Termination.TOKEN_CEILING
    assert other_end - cut_at <= lease + 2 * poll  # written off within the lease
    assert own_end - cut_at <= lease * 4 / 3 + 2 * poll  # cut off: a lease, and a contact
    status = ledger.status()
    assert status.written_off == 1
    assert status.used_tokens == sum(r.usage.total_tokens for r in (first, other, own))
    assert status.used_tokens + status.lost_tokens <= ceiling + max_input(
        [first, other, own]
    ) * sum(s.statistics().crossings for s in slices)


#: The sweep's reply: 400 tokens streamed 4 at a time, one report each, 4 ms apart.
SWEEP_CHUNKS, SWEEP_CHUNK_S, SWEEP_LATENCY_S, SWEEP_POLL_S = 100, 0.004, 0.002, 0.05


async def _sweep(
    n_hosts: int, n_runs: int, share: float, *, timed: bool, lease_s: float | None = None
) -> None:
    """``n_runs`` concurrent runs of about 410 tokens over ``n_hosts`` hosts, with a fleet
    budget of ``share`` times their demand: every run ends once; the ledger's account
    is the runs' usage; the spend is within the bound; no run ends on the ceiling while
    budget is left anywhere; and (``timed``: a virtual clock) every run ends within one
    call in flight, a poll and a ledger round trip of the ledger's first dry answer."""
    demand = n_runs * 410
    ceiling = int(demand * share)
    ledger = BudgetLedger(
        max_total_tokens=ceiling, hosts=n_hosts, clock=anyio.current_time, lease_s=lease_s
    )
    limits = tether.Limits(max_total_tokens=ceiling)
    provider = Capped(  # a provider-level max_tokens, as the HTTP providers have
        lambda request, ctx: Reply(text="word " * 320),
        chunk_size=16,
        chunk_latency_s=SWEEP_CHUNK_S,
        max_tokens=512,
    )
    agent = tether.Agent(name="spender", provider=provider)
    ends: list[float] = []
    results: list[tether.RunResult] = []

    async def follow(handle: tether.RunHandle[Any]) -> None:
        results.append(await handle.result())
        ends.append(anyio.current_time())

    async with hosts(ledger, limits, n_hosts, SWEEP_LATENCY_S) as (rts, slices):
        for budget in slices:
            budget.lease_s = lease_s  # as a RayRuntime's hosts hold the fleet's lease
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(n_runs):
                    tg.start_soon(follow, rts[i % n_hosts].start(agent, f"question {i}"))
    status = ledger.status()
    assert len(results) == n_runs
    for result in results:
        assert_consistent(result)  # one RunFinished, usage = its charges
    spent = sum(r.usage.total_tokens for r in results)
    assert status.used_tokens == spent
    crossings = sum(s.statistics().crossings for s in slices)
    assert spent <= ceiling + crossings * max_input(results)
    ended = [r for r in results if r.termination is tether.Termination.TOKEN_CEILING]
    assert {r.termination for r in results} <= {
        tether.Termination.TOKEN_CEILING,
        tether.Termination.ANSWERED,
        tether.Termination.MAX_CONTINUES,
    }
    if share <= 0.5:
        assert ended
    if share >= 1.5:
        assert not ended
        assert {r.termination for r in results} == {tether.Termination.ANSWERED}
    if ended:
        assert status.dry_since is not None
        assert min(ENDS) >= ceiling  # none ended while budget was left anywhere
        if timed:
            call_s = SWEEP_CHUNKS * SWEEP_CHUNK_S
            bound = max(call_s, SWEEP_POLL_S) + 2 * SWEEP_LATENCY_S
            # The lease_s/3 delay is gone (test_a_host_whose_calls_held_its_grant_...);
            # one gap remains in some interleavings: a run learns of the dry ledger at
            # its host's next idle contact (idle_poll_s, 1 s here). CI saw 0.78 s and
            # 0.46 s past the first dry answer against a bound of 0.41 (docs/guides/ray.md).
            assert max(ends) - status.dry_since <= bound + 1.0 + 0.01


@pytest.mark.parametrize(
    ("n_hosts", "n_runs", "share"),
    [
        (2, 100, 0.1),
        pytest.param(4, 100, 2.0, marks=pytest.mark.slow),
        pytest.param(2, 100, 0.5, marks=pytest.mark.slow),
        pytest.param(2, 200, 1.0, marks=pytest.mark.slow),
        pytest.param(4, 400, 0.1, marks=pytest.mark.slow),
        pytest.param(4, 400, 0.5, marks=pytest.mark.slow),
        pytest.param(4, 200, 1.0, marks=pytest.mark.slow),
        pytest.param(2, 400, 2.0, marks=pytest.mark.slow),
    ],
)
@AUTOJUMP
async def test_every_run_ends_within_the_bound_whatever_the_budget(
    n_hosts: int, n_runs: int, share: float, watched: list[int]
) -> None:
    """Issue 28: 2 and 4 hosts, 100 to 400 runs, budgets of 10% to 200% of the demand,
    a usage report every 4 tokens (a virtual clock: the bound is checked exactly)."""
    await _sweep(n_hosts, n_runs, share, timed=True)


@pytest.mark.parametrize("share", [0.1, 0.2, 0.5])
@AUTOJUMP
async def test_with_a_lease_a_dry_fleet_ends_every_run_within_the_bound(
    share: float, watched: list[int]
) -> None:
    """The hosts hold a lease with the ledger (as a RayRuntime's do: lease_s=30, so a host
    holding an unreported grant calls at least every 10 s)."""
    await _sweep(2, 100, share, timed=True, lease_s=30.0)


async def test_a_dry_fleet_ends_every_run_on_both_backends(watched: list[int]) -> None:
    """The issue's case in one process, on the real clock of each backend: 2 hosts, 100
    runs, a budget of a fifth of their demand."""
    await _sweep(2, 100, 0.2, timed=False)


@AUTOJUMP
async def test_a_host_whose_calls_held_its_grant_reports_them_spent_at_once(
    watched: list[int],
) -> None:
    """Issue 28's delay: with a lease, a host whose only call held its whole grant waited
    for the lease's beat (lease_s / 3) to report it spent, so the ledger said "dry" (and
    the other hosts' runs ended) that late. A charge or a release wakes its keeper, so the
    ledger knows within a poll and a round trip of the call's end."""
    lease, latency = 30.0, 0.002
    ledger = BudgetLedger(max_total_tokens=100, hosts=1, lease_s=lease, clock=anyio.current_time)
    limits = tether.Limits(max_total_tokens=100)
    async with hosts(ledger, limits, 1, latency) as (_, slices):
        budget = slices[0]
        budget.lease_s = lease
        await budget.top_up(100, 0.0)  # the keeper takes the grant
        while budget.max_total_tokens != 100:
            await budget.top_up(100, 0.0)
        budget.hold(100, 0.0)  # one call in flight holds all of it
        await anyio.sleep(1.0)  # the keeper has nothing to say but the lease's beat
        assert ledger.status().used_tokens == 0
        ended = anyio.current_time()
        budget.charge(100, None)  # the call ends, its output spent
        budget.unhold(100, 0.0)
        with anyio.fail_after(lease):
            while ledger.status().used_tokens != 100:  # noqa: ASYNC110
                await anyio.sleep(0.001)
        reported = anyio.current_time() - ended
    assert reported <= budget.poll_s + 2 * latency + 0.001, reported
    assert ledger.dry()


async def test_a_call_with_no_cap_of_its_own_holds_an_estimate_not_a_slice(
    watched: list[int],
) -> None:
    """Issue 28: a run with no max_tokens (neither its settings nor its provider) on a
    fleet's budget sends (and holds) FLEET_OUTPUT_FLOOR on its first call, then twice the
    largest output seen: a call cut at the estimate gets twice as much next time."""
    from tether.runtime._accounting import FLEET_OUTPUT_FLOOR

    ledger = BudgetLedger(max_total_tokens=1_000_000, hosts=2)
    limits = tether.Limits(max_total_tokens=1_000_000)
    long = "word " * 1_000  # 1,250 tokens by the scripted estimate: cut at 1,024
    provider = ScriptedProvider([Reply(text=long), Reply(text="done")], record=True)
    async with hosts(ledger, limits, 2) as (rts, slices):
        result = await rts[0].run(tether.Agent(name="a", provider=provider), "q")
        assert result.termination is tether.Termination.ANSWERED
        caps = [r.max_tokens for _, r in provider.requests]
        assert caps == [FLEET_OUTPUT_FLOOR, 2 * FLEET_OUTPUT_FLOOR]
        assert slices[0].largest_output == FLEET_OUTPUT_FLOOR
        # A new run on the same host starts from the host's largest output.
        again = ScriptedProvider([Reply(text="hi")], record=True)
        await rts[0].run(tether.Agent(name="b", provider=again), "q")
        assert [r.max_tokens for _, r in again.requests] == [2 * FLEET_OUTPUT_FLOOR]
        # A run with a max_tokens of its own is sent with it, as before.
        capped = ScriptedProvider([Reply(text="hi")], record=True)
        settings = tether.ModelSettings(max_tokens=77)
        await rts[1].run(tether.Agent(name="c", provider=capped, settings=settings), "q")
        assert [r.max_tokens for _, r in capped.requests] == [77]
    assert ledger.status().used_tokens == sum(s.tokens for s in slices)


@pytest.mark.parametrize("n_hosts", [2, 4])
async def test_a_burst_of_runs_with_no_max_tokens_is_not_cut_short(
    n_hosts: int, watched: list[int]
) -> None:
    """Issue 28: 100 runs whose calls have no max_tokens at all, with a fleet budget of
    twice their demand: every run answers (none ends max_continues, as 2 of 100 did when
    each call asked for, and held, a whole slice)."""
    n_runs = 100
    ceiling = 2 * n_runs * 410
    ledger = BudgetLedger(max_total_tokens=ceiling, hosts=n_hosts)
    limits = tether.Limits(max_total_tokens=ceiling)
    provider = ScriptedProvider(lambda request, ctx: Reply(text="word " * 320), chunk_size=16)
    agent = tether.Agent(name="spender", provider=provider)
    async with hosts(ledger, limits, n_hosts, 0.002) as (rts, _):
        handles = [rts[i % n_hosts].start(agent, f"question {i}") for i in range(n_runs)]
        results = [await handle.result() for handle in handles]
    assert {r.termination for r in results} == {tether.Termination.ANSWERED}
    assert ledger.status().used_tokens == sum(r.usage.total_tokens for r in results)
