"""``python -m benchmarks.gc_share [--backend asyncio|trio|both] [--runs 5000]
[--threshold 50000,20,20] [--freeze]``.

What the garbage collector costs B3's workload: ``--runs`` runs of R=5 rounds
with L=50 ms start at once on one warm Runtime, and every collection is timed
through ``gc.callbacks``. It prints the wall time, its ratio to the ideal (R·L),
and per generation the number of collections and the seconds they took. With
``--threshold`` and ``--freeze`` the Runtime is made with
``gc=tether.GcTuning(threshold=..., freeze=...)``, as a host running that many
agents may choose to do (docs/guides/performance.md); a Runtime without
``gc=`` never changes the collector.
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

import anyio

import tether

from . import _workload as w
from ._cases import _tether_batch

ROUNDS = 5
LATENCY_S = 0.05


class _Collections:
    """Counts and times the collector's runs per generation (a ``gc.callbacks`` entry)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        generation = info["generation"]
        self.count[generation] += 1
        self.seconds[generation] += time.perf_counter() - self._start


async def _measure(runs: int, tuning: tether.GcTuning | None) -> tuple[float, _Collections]:
    agent = w.agent(ROUNDS, LATENCY_S)
    collections = _Collections()
    async with tether.Runtime(provider_concurrency=max(64, runs), gc=tuning) as rt:
        await rt.run(agent, w.QUESTION)  # warm every lazy cache and import
        gc.collect()
        gc.callbacks.append(collections)
        try:
            start = time.perf_counter()
            results = await _tether_batch(rt, agent, runs)
            elapsed = time.perf_counter() - start
        finally:
            gc.callbacks.remove(collections)
    for result in results:
        problem = w.check_answered(result, ROUNDS)
        if problem is not None:
            raise SystemExit(problem)
    return elapsed, collections


def _threshold(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not 1 <= len(values) <= 3 or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("give one to three whole numbers ≥ 0, e.g. 50000,20,20")
    return values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gc_share", description=__doc__)
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    parser.add_argument("--runs", type=int, default=5_000)
    parser.add_argument("--threshold", type=_threshold, default=None)
    parser.add_argument("--freeze", action="store_true", help="GcTuning(freeze=True)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    tuning = None
    threshold = gc.get_threshold()
    if args.threshold is not None or args.freeze:
        if args.threshold is not None:  # the thresholds not given stay as they are
            threshold = (*args.threshold, *threshold[len(args.threshold) :])
        tuning = tether.GcTuning(
            threshold=threshold if args.threshold is not None else None, freeze=args.freeze
        )
    print(f"{args.runs:,} runs at once, R={ROUNDS}, L={LATENCY_S * 1000:.0f} ms;", end=" ")
    print(f"gc thresholds {threshold}, freeze {args.freeze}")
    backends = ("asyncio", "trio") if args.backend == "both" else (args.backend,)
    for backend in backends:
        elapsed, seen = anyio.run(_measure, args.runs, tuning, backend=backend)
        ideal = ROUNDS * LATENCY_S
        parts = ", ".join(f"gen{g}: {seen.count[g]} in {seen.seconds[g]:.2f} s" for g in range(3))
        share = sum(seen.seconds) / elapsed
        print(
            f"{backend}: {elapsed:.2f} s, {elapsed / ideal:.1f}× ideal; "
            f"collections {parts} ({share:.0%} of the wall time)"
        )


if __name__ == "__main__":
    main()
