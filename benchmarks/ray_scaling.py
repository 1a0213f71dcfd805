"""``python -m benchmarks.ray_scaling [--runs 1000] [--backend asyncio|trio] [--quick]``.

Scaling over Ray (docs/guides/performance.md): B2's CPU-bound workload (``--runs`` runs at once,
R rounds of one scripted model call with zero latency and one cheap async tool
call, then an answer; :mod:`benchmarks._workload`) on one plain
:class:`tether.Runtime` in this process, then through a
:class:`tether.ray.RayRuntime` with 1 host and with 2 hosts (each host a
Runtime in a Ray worker process of its own). It reports rounds/s (best of
``--repeats``), and the overhead per run that Ray adds: the start-to-result
latency of one small run (R=2: one tool call, then the answer), the median of
``--latency-runs`` runs one after the other.

With ``--calls``, then **what a run costs in Ray calls** (``--calls-only``: only this): on
fleets of 1, 2 and 4 hosts, ``--runs`` runs started at once (R rounds each), the
Ray actor calls the caller makes, by method (counted in this process at
``ActorMethod.remote``), per run and per round: once collecting results only,
once also following every run's events (``events()``); and the calls the
hosts make to the budget's ledger with a ``limits=`` budget the runs never
reach. The monitor's calls (``info``, ``spent``: ``hosts + 1`` every
``MONITOR_S``, whatever the runs) are counted apart, per second.

With ``--study``, instead, **the multi-node scaling study** (issue 28; the table in
docs/guides/ray.md): a provider latency of L=50 ms (``--latency-ms``), ``--runs``
runs at once (5,000 by default), R rounds each, on one plain Runtime in this
process, then on RayRuntimes of 1, 2 and 4 hosts (``--study-hosts``): rounds/s
of each (one batch after a warm-up), and the Ray calls per round the caller
made (its monitor's left out). Simulating several machines on one: start a Ray
node per host with a CPU limit and pinned to cores of its own, then pass
``--address auto``, e.g. ``ray start --head --num-cpus=1`` and, per further
node, ``taskset -c N ray start --address=HEAD:6379 --num-cpus=1`` (a host asks
one CPU, so Ray puts one host on each node; the caller runs where the command
runs). Without ``--address``, every host is a process of one local cluster.

The runs go to the hosts round-robin (``start(..., host=i % hosts)``), so the
measure is of the hosts' capacity, not of the placement. The caller (this
process) gets every run's result as JSON and loads it, as any caller does.
Every run is verified as B2's are (answered, the final text, R-1 correct tool
calls, a gap-free trail); the exit status is 1 when one is not (never for a
timing). One local Ray cluster serves every side; it is started here unless
``--address`` names a running one.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import attrs

import tether
from tether.providers import ModelSettings

from . import _workload as w

#: The folder holding the ``benchmarks`` package: the hosts import the workload's tool from it.
ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen(kw_only=True)
class Plan:
    runs: int
    rounds: int
    repeats: int
    latency_runs: int
    warm_runs: int


FULL = Plan(runs=1_000, rounds=5, repeats=2, latency_runs=200, warm_runs=50)
QUICK = Plan(runs=40, rounds=3, repeats=1, latency_runs=10, warm_runs=4)
#: The rounds of the latency probe's run: one tool call, then the answer.
LATENCY_ROUNDS = 2


@attrs.define
class Side:
    """One column of the table: where the runs ran, and what was measured there."""

    name: str
    hosts: int  # 0: the plain Runtime in this process
    rounds_per_s: float = 0.0
    latency_ms: list[float] = attrs.field(factory=list)
    problems: list[str] = attrs.field(factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.latency_ms)

    @property
    def p90_ms(self) -> float:
        ordered = sorted(self.latency_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


Starter = Callable[[tether.Agent, int], Any]


async def _batch(start: Starter, agent: tether.Agent, n: int, rounds: int, side: Side) -> float:
    """``n`` runs at once; the seconds until the last result."""
    began = time.perf_counter()
    handles = [start(agent, i) for i in range(n)]
    results = [await handle.result() for handle in handles]
    elapsed = time.perf_counter() - began
    for result in results:
        problem = w.check_answered(result, rounds)
        if problem is not None and len(side.problems) < w.MAX_PROBLEMS:
            side.problems.append(f"{side.name}: {problem}")
    return elapsed


async def _measure(start: Starter, plan: Plan, side: Side) -> None:
    bench = w.agent(plan.rounds, 0.0)
    small = attrs.evolve(w.agent(LATENCY_ROUNDS, 0.0), name="bench-small")
    await _batch(start, bench, plan.warm_runs, plan.rounds, side)  # imports, the agent shipped
    times = [await _batch(start, bench, plan.runs, plan.rounds, side) for _ in range(plan.repeats)]
    side.rounds_per_s = plan.runs * plan.rounds / min(times)
    await _batch(start, small, max(2, side.hosts), LATENCY_ROUNDS, side)  # shipped everywhere
    for i in range(plan.latency_runs):
        began = time.perf_counter()
        result = await start(small, i).result()
        side.latency_ms.append((time.perf_counter() - began) * 1000)
        problem = w.check_answered(result, LATENCY_ROUNDS)
        if problem is not None and len(side.problems) < w.MAX_PROBLEMS:
            side.problems.append(f"{side.name}: {problem}")


class Echo:
    """A bare async Ray actor: what one call to another process costs, for reference."""

    async def echo(self, value: int) -> int:
        return value


async def _bare_call_ms(calls: int) -> float:
    """The median round trip of a no-op call to an async Ray actor, awaited as a host's is."""
    import ray

    from tether.ray._bridge import wait_ref

    actor = ray.remote(Echo).options(num_cpus=0).remote()
    try:
        await wait_ref(actor.echo.remote(0))
        times = []
        for i in range(calls):
            began = time.perf_counter()
            await wait_ref(actor.echo.remote(i))
            times.append((time.perf_counter() - began) * 1000)
    finally:
        ray.kill(actor)
    return statistics.median(times)


async def measure(plan: Plan, address: str | None) -> tuple[list[Side], float]:
    from tether.ray import RayRuntime

    sides = [Side("plain Runtime (this process)", 0)]
    concurrency = max(64, plan.runs)
    async with tether.Runtime(provider_concurrency=concurrency) as rt:
        await _measure(lambda agent, i: rt.start(agent, w.QUESTION), plan, sides[0])
    for hosts in (1, 2):
        side = Side(f"RayRuntime, {hosts} host{'s' if hosts > 1 else ''}", hosts)
        sides.append(side)
        async with RayRuntime(hosts=hosts, provider_concurrency=concurrency) as fleet:

            def start(
                agent: tether.Agent, i: int, fleet: RayRuntime = fleet, n: int = hosts
            ) -> Any:
                return fleet.start(agent, w.QUESTION, host=i % n)

            await _measure(start, plan, side)
    return sides, await _bare_call_ms(plan.latency_runs)


#: The scaling study's defaults (``--study``): provider latency, runs at once, rounds, fleets.
STUDY_LATENCY_MS = 50.0
STUDY = Plan(runs=5_000, rounds=5, repeats=1, latency_runs=1, warm_runs=50)
STUDY_HOSTS = (1, 2, 4)


@attrs.frozen(kw_only=True)
class StudyRow:
    """One side of the scaling study."""

    name: str
    hosts: int  # 0: the plain Runtime in this process
    rounds_per_s: float
    #: The caller's Ray calls per round (monitor left out); ``None`` for the plain Runtime.
    calls_per_round: float | None
    problems: tuple[str, ...] = ()


async def study(plan: Plan, latency_s: float, fleets: Sequence[int]) -> list[StudyRow]:
    """Rounds/s of ``plan.runs`` runs at once with provider latency ``latency_s``: one
    plain Runtime, then a RayRuntime of each size in ``fleets`` (see the module)."""
    from tether.ray import RayRuntime

    agent = w.agent(plan.rounds, latency_s)
    rows: list[StudyRow] = []
    side = Side("plain Runtime (this process)", 0)
    async with tether.Runtime(provider_concurrency=max(64, plan.runs)) as rt:

        def plain(agent: tether.Agent, i: int) -> Any:
            return rt.start(agent, w.QUESTION)

        await _batch(plain, agent, min(plan.warm_runs, plan.runs), plan.rounds, side)
        elapsed = await _batch(plain, agent, plan.runs, plan.rounds, side)
    rows.append(
        StudyRow(
            name=side.name,
            hosts=0,
            rounds_per_s=plan.runs * plan.rounds / elapsed,
            calls_per_round=None,
            problems=tuple(side.problems),
        )
    )
    for hosts in fleets:
        side = Side(f"RayRuntime, {hosts} host{'s' if hosts > 1 else ''}", hosts)
        concurrency = max(hosts, plan.runs)
        async with RayRuntime(hosts=hosts, provider_concurrency=concurrency) as fleet:

            def start(
                agent: tether.Agent, i: int, fleet: RayRuntime = fleet, n: int = hosts
            ) -> Any:
                return fleet.start(agent, w.QUESTION, host=i % n)

            warm = max(hosts, min(plan.warm_runs, plan.runs))
            await _batch(start, agent, warm, plan.rounds, side)  # the agent shipped everywhere
            with counting_ray_calls() as counts:
                elapsed = await _batch(start, agent, plan.runs, plan.rounds, side)
        calls = sum(v for k, v in counts.items() if k not in MONITOR_CALLS)
        rows.append(
            StudyRow(
                name=side.name,
                hosts=hosts,
                rounds_per_s=plan.runs * plan.rounds / elapsed,
                calls_per_round=calls / (plan.runs * plan.rounds),
                problems=tuple(side.problems),
            )
        )
    return rows


def study_table(plan: Plan, latency_ms: float, rows: Sequence[StudyRow]) -> str:
    base = rows[0]
    head = ["measure", *(r.name for r in rows)]
    out = [head, ["---"] * len(head)]
    out.append(
        [
            f"rounds/s, {plan.runs:,} runs at once, R={plan.rounds}, L={latency_ms:g} ms",
            *(
                f"{r.rounds_per_s:,.0f}"
                + ("" if r is base else f" ({r.rounds_per_s / base.rounds_per_s:.2f}×)")
                for r in rows
            ),
        ]
    )
    out.append(
        [
            "Ray calls per round (the caller's, monitor left out)",
            *("—" if r.calls_per_round is None else f"{r.calls_per_round:.3f}" for r in rows),
        ]
    )
    return "\n".join("| " + " | ".join(row) + " |" for row in out)


#: The fleet sizes whose Ray calls are counted.
CALL_FLEETS = (1, 2, 4)
#: The caller's calls that come from its monitor (time-driven, not per run).
MONITOR_CALLS = frozenset({"info", "spent", "join"})


@contextlib.contextmanager
def counting_ray_calls() -> Iterator[collections.Counter[str]]:
    """Count the Ray actor calls this process makes, by method, while inside."""
    from ray.actor import ActorMethod

    counts: collections.Counter[str] = collections.Counter()
    original = ActorMethod.remote

    def remote(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[self._method_name] += 1
        return original(self, *args, **kwargs)

    ActorMethod.remote = remote  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        ActorMethod.remote = original  # type: ignore[method-assign]


@attrs.frozen(kw_only=True)
class Calls:
    """The Ray calls of one batch of runs on one fleet."""

    hosts: int
    mode: str
    runs: int
    rounds: int
    #: The caller's calls by method, the monitor's left out.
    by_method: dict[str, int]
    #: The monitor's calls per second of the batch.
    monitor_per_s: float
    #: The hosts' calls to the ledger (takes and give-backs), with a budget.
    ledger: int | None = None

    @property
    def per_run(self) -> float:
        return (sum(self.by_method.values()) + (self.ledger or 0)) / self.runs

    @property
    def per_round(self) -> float:
        return self.per_run / self.rounds


async def _count_batch(fleet: Any, agent: tether.Agent, plan: Plan, hosts: int, mode: str) -> Calls:
    with counting_ray_calls() as counts:
        began = time.perf_counter()
        # With a budget, a max_tokens of the run's own, as the HTTP providers have one: a
        # call with none wants a whole slice of the ledger (a burst of them marks the
        # fleet short, and calls are cut to what room their host has).
        settings = ModelSettings(max_tokens=256) if mode == "budget" else None
        handles = [
            fleet.start(agent, w.QUESTION, host=i % hosts, settings=settings)
            for i in range(plan.runs)
        ]
        if mode.startswith("events"):
            async with anyio.create_task_group() as tg:
                for handle in handles:

                    async def drain(handle: Any = handle) -> None:
                        async for _ in handle.events():
                            pass

                    tg.start_soon(drain)
        for handle in handles:
            result = await handle.result()
            problem = w.check_answered(result, plan.rounds)
            if problem is not None:
                raise RuntimeError(f"{hosts} hosts, {mode}: {problem}")
        elapsed = time.perf_counter() - began
        ledger = None
        budget = await fleet.budget()
    by_method = {k: v for k, v in counts.items() if k not in MONITOR_CALLS and k != "status"}
    monitor = sum(v for k, v in counts.items() if k in MONITOR_CALLS)
    if budget is not None:
        by_method.pop("budget", None)
        ledger = sum(h["takes"] + h["give_backs"] for h in budget.hosts if h is not None)
    return Calls(
        hosts=hosts,
        mode=mode,
        runs=plan.runs,
        rounds=plan.rounds,
        by_method=dict(sorted(by_method.items())),
        monitor_per_s=monitor / elapsed,
        ledger=ledger,
    )


async def count_calls(plan: Plan) -> list[Calls]:
    """The Ray calls per run and per round on fleets of 1, 2 and 4 hosts (see the module)."""
    from tether.ray import RayRuntime

    agent = w.agent(plan.rounds, 0.0)
    out: list[Calls] = []
    for hosts in CALL_FLEETS:
        for limits in (None, tether.Limits(max_total_tokens=10**12)):
            async with RayRuntime(
                hosts=hosts, provider_concurrency=max(64, plan.runs), limits=limits
            ) as fleet:
                for i in range(hosts):  # the agent shipped everywhere, outside the count
                    await fleet.start(agent, w.QUESTION, host=i).result()
                modes = ("result()", "events() + result()") if limits is None else ("budget",)
                for mode in modes:
                    out.append(await _count_batch(fleet, agent, plan, hosts, mode))
    return out


def calls_table(calls: Sequence[Calls]) -> str:
    rows = [
        [
            "hosts",
            "runs at once, R",
            "what the caller does",
            "Ray calls per run",
            "per round",
            "by method (whole batch)",
            "monitor calls/s",
        ],
        ["---"] * 7,
    ]
    for c in calls:
        methods = ", ".join(f"{k} {v}" for k, v in c.by_method.items())
        if c.ledger is not None:
            methods += f"; hosts → ledger {c.ledger}"
        rows.append(
            [
                str(c.hosts),
                f"{c.runs:,}, R={c.rounds}",
                c.mode if c.ledger is None else "result(), limits= (never reached)",
                f"{c.per_run:.2f}",
                f"{c.per_round:.2f}",
                methods,
                f"{c.monitor_per_s:.1f}",
            ]
        )
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def _init_ray(address: str | None, most_hosts: int) -> None:
    import ray

    # The hosts unpickle the workload's tool by reference: they import it from here.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "runtime_env": {"env_vars": {"PYTHONPATH": path}},
    }
    if address is None:
        kwargs["num_cpus"] = max(most_hosts, os.cpu_count() or 1)  # logical: a host asks one
    else:
        kwargs["address"] = address
    ray.init(**kwargs)


def _versions() -> str:
    parts = [f"Python {platform.python_version()}"]
    for dist in ("anyio", "trio", "ray", "tether"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            parts.append(f"{dist} {metadata.version(dist)}")
    parts.append(f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs")
    return " · ".join(parts)


def table(plan: Plan, sides: Sequence[Side], bare_ms: float) -> str:
    base = sides[0]
    head = ["measure", *(s.name for s in sides)]
    rows = [head, ["---"] * len(head)]
    rows.append(
        [
            f"rounds/s, {plan.runs:,} runs at once, R={plan.rounds}, L=0 (best of {plan.repeats})",
            *(
                f"{s.rounds_per_s:,.0f}"
                + ("" if s is base else f" ({s.rounds_per_s / base.rounds_per_s:.2f}×)")
                for s in sides
            ),
        ]
    )
    rows.append(
        [
            f"start-to-result of one run, R={LATENCY_ROUNDS}, L=0: median (p90) of "
            f"{plan.latency_runs} one after another",
            *(f"{s.median_ms:.2f} ms ({s.p90_ms:.2f})" for s in sides),
        ]
    )
    rows.append(
        [
            "overhead per run that Ray adds (median − plain median)",
            *("—" if s is base else f"+{s.median_ms - base.median_ms:.2f} ms" for s in sides),
        ]
    )
    rows.append(
        [
            f"for reference: one no-op call to an async Ray actor, median of {plan.latency_runs}",
            "—",
            *(f"{bare_ms:.2f} ms" for _ in sides[1:]),
        ]
    )
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ray_scaling",
        description="B2's workload on a plain Runtime and on a RayRuntime of 1 and 2 hosts.",
    )
    parser.add_argument("--runs", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--latency-runs", type=int)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--address", help="a running Ray cluster (default: start a local one)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the script")
    parser.add_argument(
        "--calls", action="store_true", help="also count the Ray calls per run and round"
    )
    parser.add_argument(
        "--calls-only", action="store_true", help="only count the Ray calls per run and round"
    )
    parser.add_argument(
        "--study",
        action="store_true",
        help="the scaling study: L=50 ms, 5,000 runs, 1 process vs 1, 2, 4 hosts",
    )
    parser.add_argument("--latency-ms", type=float, default=STUDY_LATENCY_MS)
    parser.add_argument(
        "--study-hosts", default=",".join(map(str, STUDY_HOSTS)), help="fleet sizes, e.g. 1,2,4"
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else STUDY if args.study else FULL
    given = {
        name: value
        for name in ("runs", "rounds", "repeats", "latency_runs")
        if (value := getattr(args, name)) is not None
    }
    plan = attrs.evolve(plan, **given)
    if plan.runs < 1 or plan.rounds < 1 or plan.repeats < 1 or plan.latency_runs < 1:
        parser.error("--runs, --rounds, --repeats and --latency-runs must be at least 1")
    try:
        fleets = tuple(int(n) for n in args.study_hosts.split(","))
    except ValueError:
        fleets = ()
    if not fleets or min(fleets) < 1:
        parser.error("--study-hosts must be positive ints separated by commas, e.g. 1,2,4")
    if args.latency_ms < 0:
        parser.error("--latency-ms must be >= 0")
    try:
        import ray
    except ImportError:
        print("benchmarks.ray_scaling needs Ray: pip install 'tether[ray]'", file=sys.stderr)
        return 2

    started = time.perf_counter()
    _init_ray(args.address, max(fleets) if args.study else max(CALL_FLEETS))
    sides: list[Side] = []
    rows: list[StudyRow] = []
    bare_ms = 0.0
    try:
        if args.study:
            rows = anyio.run(study, plan, args.latency_ms / 1000, fleets, backend=args.backend)
        elif not args.calls_only:
            sides, bare_ms = anyio.run(measure, plan, args.address, backend=args.backend)
        calls: list[Calls] = []
        if not args.study and (args.calls or args.calls_only):
            calls = anyio.run(count_calls, plan, backend=args.backend)
    finally:
        ray.shutdown()
    elapsed = time.perf_counter() - started

    command = " ".join(["python -m benchmarks.ray_scaling", *(argv or sys.argv[1:])])
    mode = "quick (tiny sizes: the numbers mean nothing)" if args.quick else "full"
    if args.study:
        mode = "the scaling study" + (" (quick)" if args.quick else "")
    print(f"## tether over Ray: scaling — {mode}\n")
    print(f"`{command}` · caller on {args.backend}\n")
    print(_versions() + f" · took {elapsed:.0f} s\n")
    if sides:
        print(table(plan, sides, bare_ms))
        print(
            "\nEach RayRuntime host is a Ray actor (its own process) running a tether Runtime "
            "on asyncio; runs go to the hosts round-robin; the caller loads every result from "
            "JSON.\n"
        )
    if calls:
        print("### What a run costs in Ray calls\n")
        print(calls_table(calls))
        print(
            "\nThe caller's calls to the hosts, counted at ActorMethod.remote in this process; "
            "with limits=, plus the hosts' calls to the ledger (their slices' takes and "
            "give-backs). The monitor's calls (info, spent) do not grow with the runs.\n"
        )
    if rows:
        print(study_table(plan, args.latency_ms, rows))
        print(
            "\nEach RayRuntime host is a Ray actor running a tether Runtime on asyncio; runs "
            "go to the hosts round-robin; "
            + (f"Ray cluster at {args.address}." if args.address else "one local Ray cluster.")
            + "\n"
        )
    problems = [p for s in sides for p in s.problems] + [p for r in rows for p in r.problems]
    if problems:
        print("\n**verification FAILED**\n")
        for problem in problems:
            print(f"- {problem}")
        return 1
    print("\nverification: passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
