"""``tether ray-demo``: ``tether demo``'s workload over a local Ray cluster (``RayRuntime``).

The same agents, the same live view and the same tally as ``tether demo``
(:mod:`tether.cli._demo_cmd`), run through :class:`tether.ray.RayRuntime` over
``--hosts`` host actors, plus a line per host saying how many runs it took.
Ray is imported only when the command runs: without the ``ray`` extra the
command says which extra to install (exit 64), and the other commands never
need it.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

from tether.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    _open_sink,
    _out,
    _rich_console,
    on_ctrl_c,
)
from tether.cli._demo_cmd import (
    DemoStats,
    Tally,
    _LiveView,
    _print_path,
    _print_tally_plain,
    _print_tally_rich,
)
from tether.runtime import JsonlSink, RunResult

if TYPE_CHECKING:
    from rich.console import Console

    from tether.cli._demo_agents import DemoAgent
    from tether.ray import RayRunHandle, RayRuntime


@attrs.frozen(kw_only=True)
class HostLine:
    """One host of the fleet at the end of the demo, and the runs it finished."""

    index: int
    pid: int | None
    node: str | None
    runs: int

    def text(self) -> str:
        where = "gone" if self.pid is None else f"pid {self.pid} on {self.node}"
        return f"host {self.index} ({where}): {self.runs} runs"


@attrs.frozen(kw_only=True)
class RayTally:
    tally: Tally
    hosts: tuple[HostLine, ...]
    #: How long the cluster (if started here) and the hosts took to start.
    startup_s: float

    def lines(self) -> list[str]:
        return [
            f"the hosts took {self.startup_s:.1f} s to start (not in the wall time)",
            *(host.text() for host in self.hosts),
        ]


def _cmd_ray_demo(args: argparse.Namespace) -> int:
    from tether.cli._demo_agents import build

    if args.agents < 1:
        raise UsageError(f"--agents must be at least 1, got {args.agents}")
    if args.hosts < 1:
        raise UsageError(f"--hosts must be at least 1, got {args.hosts}")
    if not args.latency_scale >= 0:
        raise UsageError(f"--latency-scale must be >= 0, got {args.latency_scale}")
    try:
        import tether.ray  # noqa: F401  (Ray is imported here, not by 'tether demo')
    except ImportError as exc:
        raise UsageError(
            "ray-demo needs Ray, which is not installed: pip install 'tether[ray]' "
            f"({exc.__cause__ or exc})"
        ) from exc
    agents = build(args.agents, seed=args.seed, latency_scale=args.latency_scale)
    console = _rich_console(args.plain)
    sink = _open_sink(args.trace, "w")
    stats = DemoStats(total=len(agents))
    where = "a local Ray cluster" if args.address is None else f"the Ray cluster at {args.address}"
    header = (
        f"tether ray-demo: {len(agents)} agents on the scripted provider, over "
        f"{args.hosts} hosts on {where} ({args.backend} caller, seed {args.seed})"
    )
    try:
        if console is None:
            _out(header)
            done = _run(_ray_demo, args, agents, stats, sink, None)
            _print_tally_plain(done.tally, args)
            for line in done.lines():
                _out(line)
        else:
            console.print(header, style="bold")
            done = _run(_ray_demo_live, args, agents, stats, sink, console)
            _print_tally_rich(done.tally, args, console)
            for line in done.lines():
                console.print(line)
    finally:
        if sink is not None:
            sink.close()
    if sink is not None:
        _out(f"events recorded in {sink.path} (see 'tether trace {sink.path}')")
    return EXIT_INTERRUPTED if done.tally.interrupted else EXIT_OK


def _run(
    main: Callable[..., Awaitable[RayTally]], args: argparse.Namespace, *rest: Any
) -> RayTally:
    try:
        return anyio.run(main, args, *rest, backend=args.backend)
    except ConnectionError as exc:  # ray.init(address=...) found no cluster there
        if args.address is None:
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"cannot join the Ray cluster at {args.address!r}: {first}") from exc


async def _ray_demo_live(
    args: argparse.Namespace,
    agents: Sequence[DemoAgent],
    stats: DemoStats,
    sink: JsonlSink | None,
    console: Console,
) -> RayTally:
    from rich.live import Live

    view = _LiveView(stats, title="tether ray-demo")
    with Live(view, console=console, refresh_per_second=12, transient=True):
        return await _ray_demo(args, agents, stats, sink, console)


def _fleet_agents(agents: Sequence[DemoAgent]) -> list[DemoAgent]:
    """The demo's agents, each under a name of its own.

    ``tether demo`` names every agent ``demo-researcher``; a RayRuntime finds
    agents on its hosts by name, and each demo agent has its own script, so
    each gets its run id in its name.
    """
    return [
        attrs.evolve(d, agent=attrs.evolve(d.agent, name=f"demo-researcher-{d.run_id}"))
        for d in agents
    ]


async def _ray_demo(
    args: argparse.Namespace,
    agents: Sequence[DemoAgent],
    stats: DemoStats,
    sink: JsonlSink | None,
    console: Console | None,
) -> RayTally:
    from tether.ray import RayRuntime

    agents = _fleet_agents(agents)
    results: list[RunResult] = []
    handles: list[RayRunHandle[Any]] = []
    recording = [sink]

    def record(result: RunResult) -> None:
        jsonl = recording[0]
        if jsonl is None:
            return
        try:
            for event in result.events:
                jsonl(event)
        except Exception as exc:
            recording[0] = None
            warnings.warn(f"tether ray-demo: recording stopped: {exc!r}", RuntimeWarning, 2)

    def cancel_all() -> None:
        for handle in handles:
            handle.cancel("interrupted (Ctrl-C)")

    async def watch(handle: RayRunHandle[Any]) -> None:
        """Feed the live counters from the run's events, as they come from its host."""
        async for event in handle.events():
            stats.observe(event)

    async def one(handle: RayRunHandle[Any]) -> None:
        result = await handle.result()
        results.append(result)
        record(result)
        _print_path(console, result)

    async def focus() -> None:
        """Stream the text of one run in flight at a time into the live view."""
        while True:
            handle = next((h for h in handles if not h.done), None)
            if handle is None:
                if len(handles) == len(agents):
                    return
                await anyio.sleep(0.01)
                continue
            stats.focus(handle.run_id)
            async for chunk in handle.stream_text():
                stats.stream(chunk)

    opening = time.perf_counter()
    async with RayRuntime(hosts=args.hosts, address=args.address) as rt:
        started = time.perf_counter()
        async with on_ctrl_c(cancel_all) as interrupt, anyio.create_task_group() as tg:
            if console is not None:
                tg.start_soon(focus, name="ray-demo:focus")
            for demo in agents:
                if interrupt.pressed:
                    break
                handle = rt.start(demo.agent, demo.input, run_id=demo.run_id)
                handles.append(handle)
                if console is not None:
                    tg.start_soon(watch, handle, name=f"ray-demo:watch:{demo.run_id}")
                tg.start_soon(one, handle, name=f"ray-demo:{demo.run_id}")
        wall = time.perf_counter() - started
        hosts = _host_lines(rt, handles)
    order = {demo.run_id: demo.index for demo in agents}
    results.sort(key=lambda r: order[r.run_id])
    tally = Tally(results=tuple(results), wall_s=wall, interrupted=interrupt.pressed)
    return RayTally(tally=tally, hosts=hosts, startup_s=started - opening)


def _host_lines(rt: RayRuntime, handles: Sequence[RayRunHandle[Any]]) -> tuple[HostLine, ...]:
    """Each host as last reported, with the runs that finished on it (a handle's
    ``host`` is the one that last held its run: after a failover, where it ended)."""
    runs = Counter(h.host for h in handles if h.done)
    lines = []
    for i, info in enumerate(rt.hosts):
        pid = None if info is None else info.pid
        node = None if info is None else info.node
        lines.append(HostLine(index=i, pid=pid, node=node, runs=runs.get(i, 0)))
    return tuple(lines)
