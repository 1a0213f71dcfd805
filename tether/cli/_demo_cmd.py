"""``tether demo``: many concurrent agents on the scripted provider, a live view, a tally."""

from __future__ import annotations

import argparse
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from tether import events as ev
from tether.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    _money,
    _open_sink,
    _out,
    _rich_console,
    on_ctrl_c,
)
from tether.runtime import JsonlSink, RunHandle, RunResult, Runtime, Termination

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from tether.cli._demo_agents import DemoAgent


#: How much of the run in focus's text the live view shows (its tail).
FOCUS_CHARS = 160
#: How many characters of it one line of the view shows.
FOCUS_SHOWN = 60


@attrs.define
class DemoStats:
    """Live counters of the demo, fed by the Runtime's event sink."""

    total: int
    started: int = 0
    finished: Counter[str] = attrs.field(factory=Counter)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False
    provider_retries: int = 0
    quality_retries: int = 0
    tool_calls: int = 0
    #: The run whose text the live view streams, and the tail of that text.
    focus_id: str | None = None
    focus_text: str = ""

    def focus(self, run_id: str) -> None:
        self.focus_id, self.focus_text = run_id, ""

    def stream(self, chunk: str) -> None:
        self.focus_text = (self.focus_text + chunk)[-FOCUS_CHARS:]

    @property
    def done(self) -> int:
        return sum(self.finished.values())

    @property
    def in_flight(self) -> int:
        return self.started - self.done

    def observe(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            self.started += 1
        elif isinstance(event, ev.RunFinished):
            self.finished[event.termination.value] += 1
        elif isinstance(event, ev.UsageCharged):
            self.input_tokens += event.input_tokens
            self.output_tokens += event.output_tokens
            if event.cost_usd is None:
                self.unpriced = True
            else:
                self.cost_usd += event.cost_usd
        elif isinstance(event, ev.ProviderRetry):
            self.provider_retries += 1
        elif isinstance(event, ev.Transition) and event.kind == "retry":
            self.quality_retries += 1
        elif isinstance(event, ev.ToolCallFinished) and event.outcome != "nudged":
            self.tool_calls += 1


@attrs.frozen(kw_only=True)
class Tally:
    """The demo's closing numbers, from the results."""

    results: tuple[RunResult, ...]
    wall_s: float
    interrupted: bool = False  # Ctrl-C cancelled the runs still in flight

    def by_termination(self) -> list[tuple[Termination, int, int, float | None]]:
        rows = []
        for termination in Termination:
            mine = [r for r in self.results if r.termination is termination]
            if mine:
                rows.append((termination, len(mine), _tokens(mine), _cost(mine)))
        return rows

    @property
    def tokens(self) -> int:
        return _tokens(self.results)

    @property
    def cost_usd(self) -> float | None:
        return _cost(self.results)

    @property
    def provider_retries(self) -> int:
        return sum(r.usage.provider_attempts - r.usage.model_calls for r in self.results)

    @property
    def quality_retries(self) -> int:
        return sum(r.usage.quality_retries for r in self.results)

    @property
    def tool_calls(self) -> int:
        return sum(r.usage.tool_calls for r in self.results)

    @property
    def model_calls(self) -> int:
        return sum(r.usage.model_calls for r in self.results)


def _tokens(results: Iterable[RunResult]) -> int:
    return sum(r.usage.total_tokens for r in results)


def _cost(results: Iterable[RunResult]) -> float | None:
    costs = [r.usage.cost_usd for r in results]
    return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)


def _cmd_demo(args: argparse.Namespace) -> int:
    from tether.cli._demo_agents import build

    if args.agents < 1:
        raise UsageError(f"--agents must be at least 1, got {args.agents}")
    if not args.latency_scale >= 0:
        raise UsageError(f"--latency-scale must be >= 0, got {args.latency_scale}")
    agents = build(args.agents, seed=args.seed, latency_scale=args.latency_scale)
    console = _rich_console(args.plain)
    # The demo's run ids repeat from one demo to the next: start the file afresh.
    sink = _open_sink(args.trace, "w")
    stats = DemoStats(total=len(agents))
    header = (
        f"tether demo: {len(agents)} agents on the scripted provider "
        f"({args.backend}, seed {args.seed})"
    )
    try:
        if console is None:
            _out(header)
            tally = anyio.run(_demo, agents, stats, sink, None, backend=args.backend)
            _print_tally_plain(tally, args)
        else:
            console.print(header, style="bold")
            tally = anyio.run(_demo_live, agents, stats, sink, console, backend=args.backend)
            _print_tally_rich(tally, args, console)
    finally:
        if sink is not None:
            sink.close()
    if sink is not None:
        _out(f"events recorded in {sink.path} (see 'tether trace {sink.path}')")
    return EXIT_INTERRUPTED if tally.interrupted else EXIT_OK


async def _demo_live(
    agents: Sequence[DemoAgent], stats: DemoStats, sink: JsonlSink | None, console: Console
) -> Tally:
    from rich.live import Live

    view = _LiveView(stats)
    with Live(view, console=console, refresh_per_second=12, transient=True):
        return await _demo(agents, stats, sink, console)


async def _demo(
    agents: Sequence[DemoAgent],
    stats: DemoStats,
    sink: JsonlSink | None,
    console: Console | None,
) -> Tally:
    recording = [sink]

    def observe(event: ev.Event) -> None:
        stats.observe(event)
        jsonl = recording[0]
        if jsonl is not None:
            try:
                jsonl(event)
            except Exception as exc:
                # Keep the live counters going: only the recording stops.
                recording[0] = None
                warnings.warn(f"tether demo: recording stopped: {exc!r}", RuntimeWarning, 2)

    results: list[RunResult] = []

    handles: list[RunHandle] = []

    def cancel_all() -> None:
        for handle in handles:
            handle.cancel("interrupted (Ctrl-C)")

    async def one(demo: DemoAgent) -> None:
        handle = rt.start(demo.agent, demo.input, run_id=demo.run_id)
        handles.append(handle)
        result = await handle.result()
        results.append(result)
        _print_path(console, result)

    async def focus() -> None:
        """Stream the text of one run in flight at a time into the live view."""
        while True:
            handle = next((h for h in handles if not h.done), None)
            if handle is None:
                if len(handles) == len(agents):
                    return
                await anyio.sleep(0.01)  # the runs are still being started
                continue
            stats.focus(handle.run_id)
            async for chunk in handle.stream_text():
                stats.stream(chunk)

    started = time.perf_counter()
    async with (
        Runtime(event_sink=observe) as rt,
        on_ctrl_c(cancel_all) as interrupt,
        anyio.create_task_group() as tg,
    ):
        for demo in agents:
            tg.start_soon(one, demo, name=f"demo:{demo.run_id}")
        if console is not None:
            tg.start_soon(focus, name="demo:focus")
    wall = time.perf_counter() - started
    order = {demo.run_id: demo.index for demo in agents}
    results.sort(key=lambda r: order[r.run_id])
    return Tally(results=tuple(results), wall_s=wall, interrupted=interrupt.pressed)


class _LiveView:
    """The live panel: rendered by rich on every refresh from the current counters."""

    def __init__(self, stats: DemoStats, title: str = "tether demo") -> None:
        self.stats = stats
        self.title = title
        self.started = time.perf_counter()

    def __rich__(self) -> RenderableType:
        from rich.console import Group
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        s = self.stats
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        bar = Table.grid(padding=(0, 1))
        bar.add_row(
            ProgressBar(total=s.total, completed=s.done, width=40),
            Text(f"{s.done}/{s.total} finished"),
        )
        grid.add_row("in flight", Text(f"{s.in_flight}", style="cyan"))
        grid.add_row("progress", bar)
        finished = Text()
        for termination in Termination:
            count = s.finished.get(termination.value)
            if count:
                if finished:
                    finished.append(" · ")
                style = "green" if termination.ok else "yellow"
                finished.append(f"{termination.value} {count}", style=style)
        grid.add_row("finished", finished or Text("-", style="dim"))
        grid.add_row("tokens", f"{s.input_tokens:,} in · {s.output_tokens:,} out")
        grid.add_row("cost", "unpriced" if s.unpriced else f"${s.cost_usd:.4f}")
        grid.add_row("retries", f"provider {s.provider_retries} · quality {s.quality_retries}")
        grid.add_row("tool calls", str(s.tool_calls))
        if s.focus_id is not None:
            # One line, however the text breaks, ending with the newest words.
            text = " ".join(s.focus_text.split())[-FOCUS_SHOWN:]
            grid.add_row(
                "streaming",
                Text.assemble((s.focus_id, "dim"), "  ", (text or "…", "italic"), no_wrap=True),
            )
        elapsed = time.perf_counter() - self.started
        return Panel(
            Group(grid),
            title=self.title,
            subtitle=f"{elapsed:.1f} s",
            expand=False,
        )


def _tally_totals(tally: Tally, args: argparse.Namespace) -> list[str]:
    lines = [
        f"model calls {tally.model_calls} · tool calls {tally.tool_calls} · "
        f"provider retries {tally.provider_retries} · quality retries {tally.quality_retries}",
        f"wall time {tally.wall_s:.2f} s for {len(tally.results)} agents "
        f"({args.backend}, seed {args.seed})",
    ]
    if tally.interrupted:
        lines.append("interrupted (Ctrl-C): the runs still in flight were cancelled (exit 130)")
    return lines


def _print_tally_plain(tally: Tally, args: argparse.Namespace) -> None:
    _out()
    _out(f"{'termination':<20} {'runs':>5} {'tokens':>10} {'cost':>12}")
    for termination, runs, tokens, cost in tally.by_termination():
        _out(f"{termination.value:<20} {runs:>5} {tokens:>10,} {_money(cost):>12}")
    _out(f"{'total':<20} {len(tally.results):>5} {tally.tokens:>10,} {_money(tally.cost_usd):>12}")
    for line in _tally_totals(tally, args):
        _out(line)


def _print_tally_rich(tally: Tally, args: argparse.Namespace, console: Console) -> None:
    from rich.table import Table

    table = Table(title="tally by termination", title_justify="left", show_footer=True)
    table.add_column("termination", footer="total")
    table.add_column("runs", justify="right", footer=str(len(tally.results)))
    table.add_column("tokens", justify="right", footer=f"{tally.tokens:,}")
    table.add_column("cost", justify="right", footer=_money(tally.cost_usd))
    for termination, runs, tokens, cost in tally.by_termination():
        style = "green" if termination.ok else "yellow"
        table.add_row(termination.value, str(runs), f"{tokens:,}", _money(cost), style=style)
    console.print()
    console.print(table)
    for line in _tally_totals(tally, args):
        console.print(line)


def _print_path(console: Any, result: RunResult[Any]) -> None:
    """One finished run's line: its id and its path (plain, or styled on a console)."""
    if console is None:
        _out(f"{result.run_id}  {result.summary()}")
        return
    from rich.text import Text

    style = "green" if result.ok else "yellow"
    line = Text.assemble((result.run_id, "dim"), "  ", (result.summary(), style))
    console.print(line, soft_wrap=True)
