"""``python -m benchmarks.overshoot [--runs 200] [--budget 20000] [--backend asyncio|trio|both]
[--hosts N [--latency-ms 2]]``.

The Runtime-wide budget's worst overshoot, measured: ``--runs`` runs start at
once on one Runtime whose ``max_total_tokens`` is ``--budget``. Every call is
answered with a long text in one piece, its usage reported only at the end (as
some OpenAI-compatible servers do), so nothing can cut a call short: only the
``max_tokens`` a call was sent with bounds what it adds. Inputs vary from run to
run (50 to 800 tokens), and so does the provider's own ``max_tokens``.

It prints what was spent, the overshoot past the budget, the bound the README
promises (the input of the calls that crossed it: here, conservatively, of
every call that was in flight when the budget was crossed), and the output
tokens, which must never exceed the budget. Exit status 1 if a bound fails.

With ``--hosts N`` the runs are spread over N Runtimes in this process, each a
host of one fleet budget (``Runtime.share_budget``: one ledger, slices,
``--latency-ms`` each way to reach it). The bound is then the fleet's: the
input of the calls that crossed their host's grant, here, conservatively, the
number of charges that took a host's spend and holds past its grant times the
largest input of a call on that host. It also prints how many round trips the
hosts made to the ledger, and the fleet's spend at the first run ended on the
ceiling (never less than the budget: nothing was stranded on a host).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys

import anyio
import attrs

import tether
from tether import events as ev
from tether.providers import ModelRequest, ProviderContext, Reply, ScriptedProvider
from tether.runtime import _fleetbudget as fleet


@attrs.frozen
class _Capped(ScriptedProvider):
    """The scripted provider with a provider-level ``max_tokens``, as the HTTP providers have."""

    max_tokens: int = 1024


async def measure(runs: int, budget: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)

    def answer(request: ModelRequest, ctx: ProviderContext) -> Reply:
        return Reply(text="word " * 4_000)  # 5,000 tokens: always cut by max_tokens

    async with tether.Runtime(limits=tether.Limits(max_total_tokens=budget)) as rt:
        handles = []
        for i in range(runs):
            agent = tether.Agent(
                name=f"a{i}",
                provider=_Capped(answer, max_tokens=rng.choice((256, 512, 1024)), latency_s=0.01),
            )
            handles.append(rt.start(agent, "x" * rng.randrange(200, 3_200)))
        results = []
        for handle in handles:
            results.append(await handle.result())
    spent = sum(r.usage.total_tokens for r in results)
    answered = [r for r in results if r.termination is tether.Termination.ANSWERED]
    cut = [r for r in results if r.termination is not tether.Termination.ANSWERED]
    crossing_inputs = sum(r.usage.input_tokens for r in cut if r.usage.output_tokens)
    return {
        "spent": spent,
        "overshoot": max(0, spent - budget),
        "bound": crossing_inputs,
        "output": sum(r.usage.output_tokens for r in results),
        "answered": len(answered),
        "ended_by_ceiling": len(cut),
    }


class _Watched(fleet.SlicedBudget):
    """A host's slice that records the fleet's spend when it ends a run on the ceiling."""

    fleet: list[fleet.SlicedBudget]
    ends: list[int]

    def exhausted(self) -> fleet.Hit | None:
        return self._seen(super().exhausted())

    def crossed(self) -> fleet.Hit | None:
        return self._seen(super().crossed())

    def _seen(self, hit: fleet.Hit | None) -> fleet.Hit | None:
        if hit is not None:
            self.ends.append(sum(b.tokens for b in self.fleet))
        return hit


async def measure_fleet(
    runs: int, budget: int, seed: int, hosts: int, latency_s: float
) -> dict[str, int]:
    rng = random.Random(seed)

    def answer(request: ModelRequest, ctx: ProviderContext) -> Reply:
        return Reply(text="word " * 4_000)  # 5,000 tokens: always cut by max_tokens

    limits = tether.Limits(max_total_tokens=budget)
    ledger = fleet.BudgetLedger(max_total_tokens=budget, hosts=hosts)
    rts = [tether.Runtime() for _ in range(hosts)]
    slices: list[fleet.SlicedBudget] = []
    ends: list[int] = []
    for i, rt in enumerate(rts):
        link = fleet.LocalLedgerLink(ledger, f"host-{i}", latency_s=latency_s)
        rt.share_budget(link, limits)
        watched = _Watched(**{a.alias: getattr(rt._budget, a.name) for a in _FIELDS})
        watched.fleet, watched.ends = slices, ends
        rt._budget = watched
        slices.append(watched)
    async with contextlib.AsyncExitStack() as stack:
        for rt in rts:
            await stack.enter_async_context(rt)
        handles = []
        for i in range(runs):
            agent = tether.Agent(
                name=f"a{i}",
                provider=_Capped(answer, max_tokens=rng.choice((256, 512, 1024)), latency_s=0.01),
            )
            handles.append(
                (i % hosts, rts[i % hosts].start(agent, "x" * rng.randrange(200, 3_200)))
            )
        results = [(host, await handle.result()) for host, handle in handles]
    spent = sum(r.usage.total_tokens for _, r in results)
    bound = 0
    for host, budget_slice in enumerate(slices):
        inputs = [
            c.input_tokens
            for h, r in results
            if h == host
            for c in r.events
            if isinstance(c, ev.UsageCharged)
        ]
        bound += budget_slice.statistics().crossings * max(inputs, default=0)
    return {
        "spent": spent,
        "ledger": ledger.status().used_tokens,
        "overshoot": max(0, spent - budget),
        "crossings": sum(b.statistics().crossings for b in slices),
        "bound": bound,
        "output": sum(r.usage.output_tokens for _, r in results),
        "contacts": sum(b.statistics().takes + b.statistics().give_backs for b in slices),
        "first_end": min(ends, default=0),
    }


_FIELDS = [a for a in attrs.fields(fleet.SlicedBudget) if a.init]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--budget", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    parser.add_argument("--hosts", type=int, default=0, help="N Runtimes, one fleet budget")
    parser.add_argument("--latency-ms", type=float, default=2.0, help="to the ledger, each way")
    args = parser.parse_args(argv)
    backends = ("asyncio", "trio") if args.backend == "both" else (args.backend,)
    if args.hosts:
        return _main_fleet(args, backends)
    failed = False
    print("| backend | seed | spent | overshoot | bound (inputs of crossing calls) | output |")
    print("|---|---|---|---|---|---|")
    for backend in backends:
        for seed in range(args.seeds):
            m = anyio.run(measure, args.runs, args.budget, seed, backend=backend)
            ok = m["overshoot"] <= m["bound"] and m["output"] <= args.budget
            failed |= not ok
            print(
                f"| {backend} | {seed} | {m['spent']:,} | {m['overshoot']:,} | {m['bound']:,} "
                f"| {m['output']:,}{'' if ok else ' FAILED'} |"
            )
    return 1 if failed else 0


def _main_fleet(args: argparse.Namespace, backends: tuple[str, ...]) -> int:
    failed = False
    print(
        "| backend | seed | hosts | spent | overshoot | crossing charges "
        "| bound (crossing charges × largest input) | output | ledger round trips "
        "| spent at the first ceiling end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for backend in backends:
        for seed in range(args.seeds):
            m = anyio.run(
                measure_fleet,
                args.runs,
                args.budget,
                seed,
                args.hosts,
                args.latency_ms / 1000,
                backend=backend,
            )
            ok = (
                m["overshoot"] <= m["bound"]
                and m["output"] <= args.budget
                and m["ledger"] == m["spent"]
                and m["first_end"] >= args.budget
            )
            failed |= not ok
            print(
                f"| {backend} | {seed} | {args.hosts} | {m['spent']:,} | {m['overshoot']:,} "
                f"| {m['crossings']:,} | {m['bound']:,} | {m['output']:,} | {m['contacts']:,} "
                f"| {m['first_end']:,}{'' if ok else ' FAILED'} |"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
