"""The benchmarks B1–B6, B8 and B9, each for tether and for the bare loop (B7: :mod:`._wire`).

A :class:`Job` names one benchmark, one side (``tether`` or ``bare``), one
backend and its sizes; :func:`run_job` runs it with ``anyio.run`` and returns
a JSON-ready dict of measurements, the verification problems, and whether it
ran out of time. Jobs that measure memory run in a child process of their own
(see :mod:`benchmarks._child`), so one job's peak never shows in another's.
"""

from __future__ import annotations

import gc
import math
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

import tether

from . import _workload as w

Result = dict[str, Any]

#: Runs done before any timing, so lazy imports and caches are warm.
WARMUP_RUNS = 5
#: How long to wait for tasks to exit after their runs finished (leak check).
SETTLE_S = 2.0


@dataclass(frozen=True, slots=True)
class Job:
    """One benchmark, one side, one backend."""

    case: str  # "B1" .. "B8"
    impl: str  # "tether" or "bare"
    backend: str  # "asyncio" or "trio"
    n: int  # runs (B1: runs one after another; others: at once)
    rounds: int
    latency_s: float
    repeats: int = 1
    timeout_s: float = 60.0
    reader_delay_s: float = 0.001  # B6: the slow reader's sleep per event
    wire: str = "anthropic"  # B7: "anthropic", "openai" or "gemini"


class Outcome:
    """What one job measured, found wrong, and whether it finished in time."""

    __slots__ = ("best_s", "metrics", "problems", "verified")

    def __init__(self) -> None:
        self.best_s = math.inf
        self.metrics: Result = {}
        self.problems = w.Problems()
        self.verified = 0

    def timed(self, elapsed: float) -> None:
        self.best_s = min(self.best_s, elapsed)

    def answered(self, results: Sequence[tether.RunResult], rounds: int) -> None:
        for result in results:
            self.problems.add(w.check_answered(result, rounds))
        self.problems.add(w.check_tally(len(results) * (rounds - 1)))
        self.verified += len(results)

    def bare(self, problems: Sequence[str | None], rounds: int) -> None:
        for problem in problems:
            self.problems.add(problem)
        self.problems.add(w.check_tally(len(problems) * (rounds - 1)))
        self.verified += len(problems)

    def done(self, scope: anyio.CancelScope, job: Job) -> Result:
        if scope.cancelled_caught:
            self.problems.add(f"timed out after {job.timeout_s:g} s")
        return {
            **self.metrics,
            "best_s": self.best_s if math.isfinite(self.best_s) else None,
            "verified_runs": self.verified,
            "problems": self.problems.as_list(),
            "timed_out": scope.cancelled_caught,
        }


def _runtime(n: int, store: tether.RunStore | None = None) -> tether.Runtime:
    # The provider gate would otherwise hold all but 64 model calls: a limit
    # meant for a real API, not for a scripted provider (see docs/concepts/actors.md).
    return tether.Runtime(provider_concurrency=max(64, n), store=store)


async def _tether_batch(rt: tether.Runtime, agent: tether.Agent, n: int) -> list[tether.RunResult]:
    handles = [rt.start(agent, w.QUESTION) for _ in range(n)]
    return [await handle.result() for handle in handles]


async def _bare_batch(n: int, steps: Sequence[w.BareStep], latency_s: float) -> list[str | None]:
    problems: list[str | None] = [None] * n

    async def one(i: int) -> None:
        problems[i] = await w.bare_run(steps, latency_s)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return problems


# ---------------------------------------------------------------- B1: sequential


async def b1_tether(job: Job) -> Result:
    out = Outcome()
    agent = w.agent(job.rounds, job.latency_s)
    with anyio.move_on_after(job.timeout_s) as scope:
        async with _runtime(1) as rt:
            for _ in range(WARMUP_RUNS):
                await rt.run(agent, w.QUESTION)
            for _ in range(job.repeats):
                w.TALLY.executions = 0
                results: list[tether.RunResult] = []
                gc.collect()
                start = time.perf_counter()
                for _ in range(job.n):
                    results.append(await rt.run(agent, w.QUESTION))
                out.timed(time.perf_counter() - start)
                out.answered(results, job.rounds)
    out.metrics["us_per_round"] = out.best_s / (job.n * job.rounds) * 1e6
    return out.done(scope, job)


async def b1_bare(job: Job) -> Result:
    """The bare loop, then its variant that skips the model's ``sleep(0)``."""
    out = Outcome()
    steps = w.bare_script(job.rounds)
    with anyio.move_on_after(job.timeout_s) as scope:
        for await_model in (True, False):
            best = math.inf
            for _ in range(WARMUP_RUNS):
                await w.bare_run(steps, job.latency_s, await_model)
            for _ in range(job.repeats):
                w.TALLY.executions = 0
                problems: list[str | None] = []
                gc.collect()
                start = time.perf_counter()
                for _ in range(job.n):
                    problems.append(await w.bare_run(steps, job.latency_s, await_model))
                best = min(best, time.perf_counter() - start)
                out.bare(problems, job.rounds)
            key = "us_per_round" if await_model else "us_per_round_no_await"
            out.metrics[key] = best / (job.n * job.rounds) * 1e6
            if await_model:
                out.timed(best)
    return out.done(scope, job)


# ------------------------------------------------------- B2, B3: runs at once


async def batch_tether(job: Job) -> Result:
    """``n`` runs at once, ``repeats`` times; the best wall time, and memory."""
    out = Outcome()
    agent = w.agent(job.rounds, job.latency_s)
    with anyio.move_on_after(job.timeout_s) as scope:
        async with _runtime(job.n) as rt:
            await _tether_batch(rt, agent, WARMUP_RUNS)
            for _ in range(job.repeats):
                w.TALLY.executions = 0
                _memory_baseline(out)
                start = time.perf_counter()
                results = await _tether_batch(rt, agent, job.n)
                out.timed(time.perf_counter() - start)
                out.metrics["peak_rss_kb"] = w.peak_rss_kb()
                out.answered(results, job.rounds)
                del results
    _throughput(out, job)
    return out.done(scope, job)


async def batch_bare(job: Job) -> Result:
    out = Outcome()
    steps = w.bare_script(job.rounds)
    with anyio.move_on_after(job.timeout_s) as scope:
        await _bare_batch(WARMUP_RUNS, steps, job.latency_s)
        for _ in range(job.repeats):
            w.TALLY.executions = 0
            _memory_baseline(out)
            start = time.perf_counter()
            problems = await _bare_batch(job.n, steps, job.latency_s)
            out.timed(time.perf_counter() - start)
            out.metrics["peak_rss_kb"] = w.peak_rss_kb()
            out.bare(problems, job.rounds)
    _throughput(out, job)
    return out.done(scope, job)


def _memory_baseline(out: Outcome) -> None:
    """Collect garbage, reset the peak RSS, and note the RSS now as the baseline."""
    gc.collect()
    out.metrics["peak_reset"] = w.reset_peak_rss()
    out.metrics["base_rss_kb"] = w.current_rss_kb()


def _throughput(out: Outcome, job: Job) -> None:
    out.metrics["rounds_per_s"] = job.n * job.rounds / out.best_s
    if job.latency_s:
        out.metrics["wall_over_ideal"] = out.best_s / (job.rounds * job.latency_s)
    base, peak = out.metrics.get("base_rss_kb"), out.metrics.get("peak_rss_kb")
    if base is not None and peak is not None:
        out.metrics["rss_per_run_kb"] = max(0.0, peak - base) / job.n


# ----------------------------------------------- B9: B2, with a run store or not


async def durable_tether(job: Job) -> Result:
    """B2's batch with a fresh ``SQLiteRunStore`` and without one, alternately."""
    out = Outcome()
    agent = w.agent(job.rounds, job.latency_s)
    best = {False: math.inf, True: math.inf}
    with anyio.move_on_after(job.timeout_s) as scope, tempfile.TemporaryDirectory() as tmp:
        for i in range(job.repeats):
            for durable in (False, True) if i % 2 == 0 else (True, False):
                store = tether.SQLiteRunStore(Path(tmp) / f"runs-{i}.db") if durable else None
                async with _runtime(job.n, store) as rt:
                    await _tether_batch(rt, agent, WARMUP_RUNS)
                    w.TALLY.executions = 0
                    gc.collect()
                    start = time.perf_counter()
                    results = await _tether_batch(rt, agent, job.n)
                    best[durable] = min(best[durable], time.perf_counter() - start)
                    out.answered(results, job.rounds)
                    del results
    out.timed(best[True])
    out.metrics["rounds_per_s"] = job.n * job.rounds / best[True]
    out.metrics["plain_rounds_per_s"] = job.n * job.rounds / best[False]
    return out.done(scope, job)


# --------------------------------------------------- B4, B5: parked, cancelled


def _parked_rss(out: Outcome, base: float | None, n: int) -> None:
    """Record the RSS the ``n`` parked runs add over ``base`` (both sides alike)."""
    parked = w.current_rss_kb()
    if base is not None and parked is not None:
        out.metrics["parked_rss_kb"] = parked - base
        out.metrics["rss_per_run_kb"] = (parked - base) / n


async def _settle(target: int) -> int:
    """Wait (bounded) until at most ``target`` tasks run; the count then."""
    deadline = time.perf_counter() + SETTLE_S
    count = len(anyio.get_running_tasks())
    while count > target and time.perf_counter() < deadline:
        await anyio.sleep(0.001)
        count = len(anyio.get_running_tasks())
    return count


async def _park_tether(rt: tether.Runtime, n: int, out: Outcome) -> None:
    parking = w.Parking(n)
    agent = w.parking_agent(parking)
    tasks_before = len(anyio.get_running_tasks())
    _memory_baseline(out)
    base = out.metrics["base_rss_kb"]
    start = time.perf_counter()
    handles = [rt.start(agent, w.QUESTION) for _ in range(n)]
    await parking.all_parked.wait()
    out.metrics["park_s"] = time.perf_counter() - start
    _parked_rss(out, base, n)
    start = time.perf_counter()
    for handle in handles:
        handle.cancel("benchmark: cancel every parked run")
    results = [await handle.result() for handle in handles]
    out.timed(time.perf_counter() - start)
    out.metrics["cancel_ms"] = out.best_s * 1000
    tasks_after = await _settle(tasks_before)
    out.metrics["exit_ms"] = (time.perf_counter() - start) * 1000
    out.metrics["leaked_tasks"] = tasks_after - tasks_before
    out.metrics["peak_rss_kb"] = w.peak_rss_kb()
    for result in results:
        out.problems.add(w.check_cancelled(result))
    if tasks_after > tasks_before:
        out.problems.add(f"{tasks_after - tasks_before} tasks still running after every run ended")
    out.verified += len(results)


async def park_tether(job: Job) -> Result:
    out = Outcome()
    with anyio.move_on_after(job.timeout_s) as scope:
        outside = len(anyio.get_running_tasks())
        async with _runtime(job.n) as rt:
            await _park_tether(rt, WARMUP_RUNS, Outcome())
            gc.collect()
            await _park_tether(rt, job.n, out)
        leaked = len(anyio.get_running_tasks()) - outside
        if leaked:
            out.problems.add(f"{leaked} tasks outlived the Runtime")
    return out.done(scope, job)


async def _park_bare(n: int, out: Outcome) -> None:
    parking = w.Parking(n)
    scopes: list[anyio.CancelScope] = []
    finished = [0]
    all_finished = anyio.Event()
    cancelled = [0]

    async def park() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            parking.arrive()
            try:
                await anyio.sleep(w.PARK_S)
            finally:
                finished[0] += 1
                if finished[0] == n:
                    all_finished.set()
        if scope.cancelled_caught:
            cancelled[0] += 1

    tasks_before = len(anyio.get_running_tasks())
    async with anyio.create_task_group() as tg:
        _memory_baseline(out)
        base = out.metrics["base_rss_kb"]
        start = time.perf_counter()
        for _ in range(n):
            tg.start_soon(park)
        await parking.all_parked.wait()
        out.metrics["park_s"] = time.perf_counter() - start
        _parked_rss(out, base, n)
        start = time.perf_counter()
        for scope in scopes:
            scope.cancel()
        await all_finished.wait()
        out.timed(time.perf_counter() - start)
    out.metrics["cancel_ms"] = out.best_s * 1000
    tasks_after = await _settle(tasks_before)
    out.metrics["exit_ms"] = (time.perf_counter() - start) * 1000
    out.metrics["leaked_tasks"] = tasks_after - tasks_before
    out.metrics["peak_rss_kb"] = w.peak_rss_kb()
    if cancelled[0] != n:
        out.problems.add(f"{cancelled[0]} of {n} parked coroutines were cancelled")
    out.verified += n


async def park_bare(job: Job) -> Result:
    out = Outcome()
    with anyio.move_on_after(job.timeout_s) as scope:
        await _park_bare(WARMUP_RUNS, Outcome())
        gc.collect()
        await _park_bare(job.n, out)
    return out.done(scope, job)


# -------------------- B5, as a peer benchmark measures it: the callers cancelled


async def _park_callers_tether(rt: tether.Runtime, n: int, out: Outcome) -> None:
    """``n`` callers each awaiting a run (what ``Runtime.run`` does), all cancelled by one
    scope around them; timed until every run has its result."""
    parking = w.Parking(n)
    agent = w.parking_agent(parking)
    handles: list[tether.RunHandle] = []
    tasks_before = len(anyio.get_running_tasks())

    async def caller() -> None:
        handle = rt.start(agent, w.QUESTION)
        handles.append(handle)
        try:
            await handle.result()
        finally:  # Runtime.run's own clean-up: the caller's cancellation cancels the run
            if not handle.done:
                handle.cancel("the caller was cancelled")

    with anyio.CancelScope() as callers:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(caller)
            await parking.all_parked.wait()
            start = time.perf_counter()
            callers.cancel()
    results = [await handle.result() for handle in handles]
    out.timed(time.perf_counter() - start)
    out.metrics["cancel_ms"] = out.best_s * 1000
    out.metrics["leaked_tasks"] = await _settle(tasks_before) - tasks_before
    for result in results:
        out.problems.add(w.check_cancelled(result))
    out.verified += len(results)


async def park_callers_tether(job: Job) -> Result:
    out = Outcome()
    with anyio.move_on_after(job.timeout_s) as scope:
        async with _runtime(job.n) as rt:
            await _park_callers_tether(rt, WARMUP_RUNS, Outcome())
            gc.collect()
            await _park_callers_tether(rt, job.n, out)
    return out.done(scope, job)


async def _park_callers_bare(n: int, out: Outcome) -> None:
    parking = w.Parking(n)
    finished = [0]
    tasks_before = len(anyio.get_running_tasks())

    async def caller() -> None:
        parking.arrive()
        try:
            await anyio.sleep(w.PARK_S)
        finally:
            finished[0] += 1

    with anyio.CancelScope() as callers:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(caller)
            await parking.all_parked.wait()
            start = time.perf_counter()
            callers.cancel()
    out.timed(time.perf_counter() - start)
    out.metrics["cancel_ms"] = out.best_s * 1000
    out.metrics["leaked_tasks"] = await _settle(tasks_before) - tasks_before
    if finished[0] != n:
        out.problems.add(f"{finished[0]} of {n} callers finished")
    out.verified += n


async def park_callers_bare(job: Job) -> Result:
    out = Outcome()
    with anyio.move_on_after(job.timeout_s) as scope:
        await _park_callers_bare(WARMUP_RUNS, Outcome())
        gc.collect()
        await _park_callers_bare(job.n, out)
    return out.done(scope, job)


# ------------------------------------------------------------ B6: slow reader


class _Reader:
    __slots__ = ("seqs",)

    def __init__(self) -> None:
        self.seqs: list[int] = []

    async def follow(self, handle: tether.RunHandle, delay_s: float) -> None:
        async for event in handle.events():
            self.seqs.append(event.seq)
            await anyio.sleep(delay_s)


async def _reader_batch(rt: tether.Runtime, agent: tether.Agent, job: Job, out: Outcome) -> float:
    """One batch of ``n`` runs at once, with one slow reader following the first."""
    w.TALLY.executions = 0
    reader = _Reader()
    gc.collect()
    async with anyio.create_task_group() as tg:
        start = time.perf_counter()
        handles = [rt.start(agent, w.QUESTION) for _ in range(job.n)]
        tg.start_soon(reader.follow, handles[0], job.reader_delay_s)
        first = await handles[0].result()
        # How far behind the reader is when its run has finished.
        behind = len(first.events) - len(reader.seqs)
        results = [first, *[await handle.result() for handle in handles[1:]]]
        elapsed = time.perf_counter() - start
    out.metrics["reader_behind_events"] = max(out.metrics.get("reader_behind_events", 0), behind)
    out.answered(results, job.rounds)
    if reader.seqs != list(range(len(first.events))):
        out.problems.add(
            f"the slow reader saw {len(reader.seqs)} events out of order or missing, "
            f"of {len(first.events)}"
        )
    return elapsed


async def _plain_batch(rt: tether.Runtime, agent: tether.Agent, job: Job, out: Outcome) -> float:
    w.TALLY.executions = 0
    gc.collect()
    start = time.perf_counter()
    results = await _tether_batch(rt, agent, job.n)
    elapsed = time.perf_counter() - start
    out.answered(results, job.rounds)
    return elapsed


async def reader_tether(job: Job) -> Result:
    """``n`` runs at once, with no reader and with one slow reader, alternately.

    The order alternates between repeats, and each batch's runs are gone
    before the next starts, so neither variant runs beside more live objects.
    """
    out = Outcome()
    agent = w.agent(job.rounds, job.latency_s)
    best = {"none": math.inf, "reader": math.inf}
    variants = {"none": _plain_batch, "reader": _reader_batch}
    with anyio.move_on_after(job.timeout_s) as scope:
        async with _runtime(job.n) as rt:
            await _tether_batch(rt, agent, WARMUP_RUNS)
            for i in range(job.repeats):
                for name in ("none", "reader") if i % 2 == 0 else ("reader", "none"):
                    elapsed = await variants[name](rt, agent, job, out)
                    best[name] = min(best[name], elapsed)
    out.timed(best["reader"])
    out.metrics["rounds_per_s"] = job.n * job.rounds / best["none"]
    out.metrics["reader_rounds_per_s"] = job.n * job.rounds / best["reader"]
    return out.done(scope, job)


# ----------------------------------------------------- B8: B1, streamed or not


async def _b1_pass(
    rt: tether.Runtime, agent: tether.Agent, job: Job, out: Outcome, stream: bool
) -> float:
    """``n`` runs one after another; with ``stream``, each read through ``stream_text()``."""
    w.TALLY.executions = 0
    results: list[tether.RunResult] = []
    texts: list[str] = []
    gc.collect()
    start = time.perf_counter()
    for _ in range(job.n):
        if stream:
            handle = rt.start(agent, w.QUESTION)
            texts.append("".join([chunk async for chunk in handle.stream_text()]))
            results.append(await handle.result())
        else:
            results.append(await rt.run(agent, w.QUESTION))
    elapsed = time.perf_counter() - start
    out.answered(results, job.rounds)
    wrong = sum(text != w.FINAL_TEXT for text in texts)
    if wrong:
        out.problems.add(f"{wrong} of {len(texts)} streamed texts differ from the answer")
    return elapsed


async def stream_tether(job: Job) -> Result:
    """B1's workload with no reader and with a ``stream_text()`` reader, alternately."""
    out = Outcome()
    agent = w.agent(job.rounds, job.latency_s)
    best = {False: math.inf, True: math.inf}
    with anyio.move_on_after(job.timeout_s) as scope:
        async with _runtime(1) as rt:
            for _ in range(WARMUP_RUNS):
                await rt.run(agent, w.QUESTION)
            for i in range(job.repeats):
                for stream in (False, True) if i % 2 == 0 else (True, False):
                    elapsed = await _b1_pass(rt, agent, job, out, stream)
                    best[stream] = min(best[stream], elapsed)
    out.timed(best[True])
    out.metrics["us_per_round"] = best[False] / (job.n * job.rounds) * 1e6
    out.metrics["stream_us_per_round"] = best[True] / (job.n * job.rounds) * 1e6
    return out.done(scope, job)


# ------------------------------------------------------------------------ jobs

CASES: dict[tuple[str, str], Callable[[Job], Awaitable[Result]]] = {
    ("B1", "tether"): b1_tether,
    ("B1", "bare"): b1_bare,
    ("B2", "tether"): batch_tether,
    ("B2", "bare"): batch_bare,
    ("B3", "tether"): batch_tether,
    ("B3", "bare"): batch_bare,
    ("B4", "tether"): park_tether,
    ("B4", "bare"): park_bare,
    ("B5", "tether"): park_tether,
    ("B5", "bare"): park_bare,
    ("B5C", "tether"): park_callers_tether,
    ("B5C", "bare"): park_callers_bare,
    ("B6", "tether"): reader_tether,
    ("B6", "bare"): batch_bare,
    ("B8", "tether"): stream_tether,
    ("B8", "bare"): b1_bare,
    ("B9", "tether"): durable_tether,
    ("B9", "bare"): batch_bare,
}


def run_job(job: Job) -> Result:
    """Run one job on its backend, in this process."""
    if job.case == "B7":
        from ._wire import CASES as WIRE  # imported here: it imports this module

        return anyio.run(WIRE[job.impl], job, backend=job.backend)
    case = CASES[(job.case, job.impl)]
    return anyio.run(case, job, backend=job.backend)
