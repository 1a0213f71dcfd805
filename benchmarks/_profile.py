"""Profile tether's hot path with cProfile, in µs per round.

``python -m benchmarks._profile [B1|B2|B5] [--backend asyncio|trio] [--runs N] [--rounds R]
[--sort tottime|cumtime] [--limit K] [--dump FILE]``

B1 runs ``N`` runs one after another (L=0); B2 starts ``N`` runs at once
(L=0); B5 parks ``N`` runs in their model call and profiles cancelling them
all until every result is in (per cancelled run, not per round). Only the
timed batch is profiled (the Runtime is warm). The first line also gives the
total of Python calls a round (or a cancelled run): exact and repeatable on
asyncio, within a few percent on trio (its scheduler shuffles ready tasks), so
a measure of regressions that a timing on a noisy machine cannot be. Each line is a
function: its calls per round, its own time (tottime) and its time with
callees (cumtime) per round. cProfile slows everything down several times;
compare functions with each other, and against the unprofiled µs per round
printed first. A coroutine's "calls" count every resumption.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
from pathlib import Path

import anyio

import tether

from . import _workload as w
from ._cases import _runtime

DEFAULTS = {"B1": (300, 10), "B2": (1_000, 5), "B5": (300, 1)}


async def _park(rt: tether.Runtime, n: int) -> list[tether.RunHandle]:
    """Start ``n`` runs that park in their model call; their handles once all have."""
    parking = w.Parking(n)
    agent = w.parking_agent(parking)
    handles = [rt.start(agent, w.QUESTION) for _ in range(n)]
    await parking.all_parked.wait()
    return handles


async def _cancel_parked(runs: int, profile: cProfile.Profile | None) -> float:
    """B5: park ``runs`` runs in their model call, then cancel them all (only that profiled)."""
    async with _runtime(runs) as rt:
        for handle in await _park(rt, 20):  # warms every lazy cache and import
            handle.cancel("benchmark: warm-up")
            await handle.result()
        handles = await _park(rt, runs)
        gc.collect()
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        for handle in handles:
            handle.cancel("benchmark: cancel every parked run")
        results = [await handle.result() for handle in handles]
        if profile is not None:
            profile.disable()
        elapsed = time.perf_counter() - start
    for result in results:
        problem = w.check_cancelled(result)
        if problem is not None:
            raise AssertionError(problem)
    return elapsed


async def _batch(case: str, runs: int, rounds: int, profile: cProfile.Profile | None) -> float:
    if case == "B5":
        return await _cancel_parked(runs, profile)
    agent = w.agent(rounds, 0.0)
    async with _runtime(runs) as rt:
        for _ in range(5):
            await rt.run(agent, w.QUESTION)
        gc.collect()
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        if case == "B1":
            results = [await rt.run(agent, w.QUESTION) for _ in range(runs)]
        else:
            handles = [rt.start(agent, w.QUESTION) for _ in range(runs)]
            results = [await h.result() for h in handles]
        if profile is not None:
            profile.disable()
        elapsed = time.perf_counter() - start
    for result in results:
        problem = w.check_answered(result, rounds)
        if problem is not None:
            raise AssertionError(problem)
    return elapsed


def _label(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    parts = Path(filename).parts
    for anchor in ("tether", "runtime", "actors", "providers", "anyio", "trio", "asyncio"):
        if anchor in parts:
            i = len(parts) - 1 - parts[::-1].index(anchor)
            return f"{'/'.join(parts[i:])}:{line}({name})"
    return f"{'/'.join(parts[-2:])}:{line}({name})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._profile")
    parser.add_argument("case", choices=sorted(DEFAULTS), nargs="?", default="B1")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--sort", choices=("tottime", "cumtime"), default="tottime")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--dump", type=Path, help="also write the raw pstats here")
    args = parser.parse_args(argv)
    runs, rounds = DEFAULTS[args.case]
    runs, rounds = args.runs or runs, args.rounds or rounds
    total_rounds = runs * rounds

    plain = anyio.run(_batch, args.case, runs, rounds, None, backend=args.backend)
    profile = cProfile.Profile()
    profiled = anyio.run(_batch, args.case, runs, rounds, profile, backend=args.backend)
    stats = pstats.Stats(profile)
    table = getattr(stats, "stats", {})
    calls = sum(row[1] for row in table.values())
    unit = "cancelled run" if args.case == "B5" else "round"
    print(
        f"{args.case} on {args.backend}: {runs} runs × {rounds} rounds; "
        f"{plain / total_rounds * 1e6:.1f} µs/{unit} unprofiled, "
        f"{profiled / total_rounds * 1e6:.1f} µs/{unit} under cProfile; "
        f"{calls / total_rounds:.1f} Python calls a {unit}\n"
    )
    if args.dump is not None:
        stats.dump_stats(str(args.dump))
    index = 3 if args.sort == "cumtime" else 2
    rows = sorted(table.items(), key=lambda item: item[1][index], reverse=True)
    print(f"| function | calls/{unit} | tottime µs/{unit} | cumtime µs/{unit} |")
    print("|---|---:|---:|---:|")
    for key, (_, calls, tottime, cumtime, _) in rows[: args.limit]:
        print(
            f"| {_label(key)} | {calls / total_rounds:.2f} | "
            f"{tottime / total_rounds * 1e6:.2f} | {cumtime / total_rounds * 1e6:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
