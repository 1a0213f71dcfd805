"""``python -m benchmarks.overshoot [--runs 200] [--budget 20000] [--backend asyncio|trio|both]``.

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
"""

from __future__ import annotations

import argparse
import random
import sys

import anyio
import attrs

import tether
from tether.providers import ModelRequest, ProviderContext, Reply, ScriptedProvider


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--budget", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    args = parser.parse_args(argv)
    backends = ("asyncio", "trio") if args.backend == "both" else (args.backend,)
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


if __name__ == "__main__":
    sys.exit(main())
