"""The ``tether`` command line (``python -m tether``): ``demo``, ``run`` and ``trace``.

``rich`` (the ``cli`` extra) draws the live view and the tables when stdout is
a terminal; without it, or with ``--plain``, or when stdout is a pipe, every
command prints plain lines. Errors in what the user gave (arguments, a module
that cannot be found, a missing file) are one line on stderr and exit 64,
never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TextIO

import anyio
import attrs

from tether import events as ev
from tether.providers import ModelRequest, Provider, ProviderContext, Reply, ScriptedProvider
from tether.runtime import Agent, RunResult, Runtime, Termination, Usage
from tether.runtime._result import summarize
from tether.runtime._sinks import JsonlSink

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from tether._demo import DemoAgent

# ---------------------------------------------------------------- exit codes

EXIT_OK = 0
EXIT_LIMIT = 1
EXIT_STOPPED = 2
EXIT_FAILED = 3
EXIT_USAGE = 64  # sysexits EX_USAGE
EXIT_DATA = 65  # sysexits EX_DATAERR
EXIT_INTERRUPTED = 130

#: The exit code of ``tether run`` for each termination reason.
EXIT_CODES: dict[Termination, int] = {
    Termination.ANSWERED: EXIT_OK,
    Termination.TERMINAL_TOOL: EXIT_OK,
    Termination.QUALITY_EXHAUSTED: EXIT_LIMIT,
    Termination.MAX_STEPS: EXIT_LIMIT,
    Termination.MAX_TOOL_CALLS: EXIT_LIMIT,
    Termination.MAX_CONTINUES: EXIT_LIMIT,
    Termination.TOKEN_CEILING: EXIT_LIMIT,
    Termination.COST_CEILING: EXIT_LIMIT,
    Termination.DEADLINE: EXIT_LIMIT,
    Termination.POLICY_BLOCKED: EXIT_STOPPED,
    Termination.REFUSAL: EXIT_STOPPED,
    Termination.CANCELLED: EXIT_STOPPED,
    Termination.CONTEXT_EXCEEDED: EXIT_STOPPED,
    Termination.TRUNCATED_TOOL_CALL: EXIT_STOPPED,
    Termination.UNKNOWN_STOP_REASON: EXIT_STOPPED,
    Termination.PROVIDER_FAILED: EXIT_FAILED,
    Termination.FATAL_TOOL_ERROR: EXIT_FAILED,
    Termination.CRASHED: EXIT_FAILED,
}

EPILOG = """\
exit codes of 'tether run' (by termination class):
  0   ok: answered, terminal_tool
  1   quality or limits: quality_exhausted, max_steps, max_tool_calls,
      max_continues, token_ceiling, cost_ceiling, deadline
  2   stopped: policy_blocked, refusal, cancelled, context_exceeded,
      truncated_tool_call, unknown_stop_reason
  3   failed: provider_failed, fatal_tool_error, crashed
every command:
  64  usage error: bad arguments, a module, attribute or file not found
  65  'tether trace': a line of the file is not a tether event
  130 interrupted (Ctrl-C)
"""


class UsageError(Exception):
    """Something the user gave is wrong: one line on stderr, exit 64."""


class DataError(Exception):
    """A file's content is wrong: one line on stderr, exit 65."""


class _Parser(argparse.ArgumentParser):
    # argparse exits 2 on bad arguments, which 'tether run' uses for a stopped run.
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


# ---------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see :data:`EPILOG`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        _err(f"{exc}\n(see '{parser.prog} --help')")
        return EXIT_USAGE
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        _err(f"{parser.prog}: error: {exc}")
        return EXIT_USAGE
    except DataError as exc:
        _err(f"{parser.prog}: error: {exc}")
        return EXIT_DATA
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tether",
        description="tether: an async actor-model runtime for LLM agents (asyncio and trio).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tether {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="many concurrent agents on the offline scripted provider",
        description=(
            "Run N concurrent agents on the offline ScriptedProvider: they call tools, some "
            "fail judgement once and pass on the retry, a few end otherwise (refusal, "
            "max_steps, ...). Each run prints its summary line as it finishes; a tally by "
            "termination reason closes. With a terminal (and rich), a live view shows the "
            "runs in flight."
        ),
    )
    demo.add_argument("--agents", type=int, default=120, metavar="N", help="default: 120")
    demo.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    demo.add_argument(
        "--seed", type=int, default=0, metavar="S", help="shuffles paths and latencies"
    )
    demo.add_argument("--plain", action="store_true", help="plain lines, no live view")
    demo.add_argument(
        "--latency-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply the scripted latencies (10 to 50 ms a call); e.g. 20 to watch the live view",
    )
    demo.add_argument(
        "--trace", metavar="FILE.jsonl", help="record every event with JsonlSink (overwrites)"
    )
    demo.set_defaults(handler=_cmd_demo)

    run = commands.add_parser(
        "run",
        help="run one agent from a module and stream its answer",
        description=(
            "Import MODULE (a dotted name, or a path to a .py file) and run its AGENT "
            "attribute (a tether.Agent, or a function of no arguments returning one) on INPUT. "
            "The answer's text is printed as each model call finishes; tool calls, the "
            "summary line, usage and cost go to stderr. --provider, --model and --base-url "
            "(or TETHER_PROVIDER, TETHER_MODEL, TETHER_BASE_URL) replace the agent's provider; "
            "API keys come from ANTHROPIC_API_KEY / OPENAI_API_KEY. '--provider scripted' "
            "answers offline with an echo, to try an agent's wiring without a key."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("target", metavar="MODULE:AGENT")
    run.add_argument("input", metavar="INPUT")
    run.add_argument("--provider", choices=("anthropic", "openai", "scripted"))
    run.add_argument("--model", metavar="M")
    run.add_argument("--base-url", metavar="URL")
    run.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    run.add_argument(
        "--trace", metavar="FILE.jsonl", help="record every event with JsonlSink (appends)"
    )
    run.set_defaults(handler=_cmd_run)

    trace = commands.add_parser(
        "trace",
        help="show runs recorded by JsonlSink",
        description=(
            "Show each run recorded in FILE.jsonl (written by tether.runtime.JsonlSink) as "
            "an event table plus its summary line."
        ),
    )
    trace.add_argument("file", metavar="FILE.jsonl")
    trace.add_argument("--run", metavar="ID", help="only this run")
    trace.add_argument("--plain", action="store_true", help="plain lines, no rich table")
    trace.set_defaults(handler=_cmd_trace)
    return parser


# ---------------------------------------------------------------- output


def _out(text: str = "") -> None:
    _write(sys.stdout, text)


def _err(text: str) -> None:
    _write(sys.stderr, text)


def _write(stream: TextIO, text: str, end: str = "\n") -> None:
    try:
        try:
            stream.write(text + end)
        except UnicodeEncodeError:
            # A console that cannot show the summary's arrows and check marks.
            encoding = getattr(stream, "encoding", None) or "ascii"
            stream.write((text + end).encode(encoding, "replace").decode(encoding))
        stream.flush()
    except BrokenPipeError:
        # The reader went away ('tether demo | head'): drop the rest quietly.
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


def _stdout_is_tty() -> bool:
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


def _rich_console(plain: bool) -> Console | None:
    """A rich console for stdout, or ``None`` for plain output."""
    if plain or not _stdout_is_tty():
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(file=sys.stdout, highlight=False)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether")
    except PackageNotFoundError:
        return "unknown"


def _money(cost: float | None) -> str:
    return "unpriced" if cost is None else f"${cost:.6f}"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _usage_line(usage: Usage) -> str:
    retries = usage.provider_attempts - usage.model_calls
    parts = [
        f"{usage.input_tokens:,} input + {usage.output_tokens:,} output tokens",
        f"{usage.model_calls} model calls",
        f"{usage.tool_calls} tool calls",
    ]
    if retries:
        parts.append(f"{retries} provider retries")
    if usage.quality_retries:
        parts.append(f"{usage.quality_retries} quality retries")
    if usage.continues:
        parts.append(f"{usage.continues} continues")
    return "usage: " + " · ".join(parts)


# ---------------------------------------------------------------- demo


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
    from tether._demo import build

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
    return EXIT_OK


def _open_sink(path: str | None, mode: Literal["a", "w"]) -> JsonlSink | None:
    if path is None:
        return None
    try:
        return JsonlSink(path, mode=mode)
    except OSError as exc:
        raise UsageError(f"cannot write the trace file {path!r}: {exc.strerror or exc}") from exc


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

    async def one(demo: DemoAgent) -> None:
        result = await rt.run(demo.agent, demo.input, run_id=demo.run_id)
        results.append(result)
        if console is None:
            _out(f"{demo.run_id}  {result.summary()}")
        else:
            from rich.text import Text

            style = "green" if result.ok else "yellow"
            line = Text.assemble((demo.run_id, "dim"), "  ", (result.summary(), style))
            console.print(line, soft_wrap=True)

    started = time.perf_counter()
    async with Runtime(event_sink=observe) as rt, anyio.create_task_group() as tg:
        for demo in agents:
            tg.start_soon(one, demo, name=f"demo:{demo.run_id}")
    wall = time.perf_counter() - started
    order = {demo.run_id: demo.index for demo in agents}
    results.sort(key=lambda r: order[r.run_id])
    return Tally(results=tuple(results), wall_s=wall)


class _LiveView:
    """The live panel: rendered by rich on every refresh from the current counters."""

    def __init__(self, stats: DemoStats) -> None:
        self.stats = stats
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
        elapsed = time.perf_counter() - self.started
        return Panel(
            Group(grid),
            title="tether demo",
            subtitle=f"{elapsed:.1f} s",
            expand=False,
        )


def _tally_totals(tally: Tally, args: argparse.Namespace) -> list[str]:
    return [
        f"model calls {tally.model_calls} · tool calls {tally.tool_calls} · "
        f"provider retries {tally.provider_retries} · quality retries {tally.quality_retries}",
        f"wall time {tally.wall_s:.2f} s for {len(tally.results)} agents "
        f"({args.backend}, seed {args.seed})",
    ]


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


# ---------------------------------------------------------------- run


def _cmd_run(args: argparse.Namespace) -> int:
    agent = _with_provider(load_agent(args.target), args)
    # Run ids are unique per Runtime: one file can collect many runs.
    sink = _open_sink(args.trace, "a")
    try:
        result = anyio.run(_run, agent, args.input, sink, backend=args.backend)
    finally:
        if sink is not None:
            sink.close()
    return EXIT_CODES.get(result.termination, EXIT_STOPPED)


async def _run(agent: Agent, input: str, sink: JsonlSink | None) -> RunResult:
    out, err = sys.stdout, sys.stderr
    async with Runtime(event_sink=sink) as rt:
        handle = rt.start(agent, input)
        arguments: dict[str, Any] = {}
        open_line = False  # the last text printed did not end its line
        async for event in handle.events():
            if isinstance(event, ev.ModelCallFinished) and event.text:
                # A response cut off by max_tokens is continued by the next call.
                open_line = event.stop_reason == "max_tokens" and not event.tool_calls
                _write(out, event.text, end="" if open_line else "\n")
                continue
            if open_line and isinstance(event, ev.ModelCallFinished | ev.RunFinished):
                _write(out, "")
                open_line = False
            _narrate(event, arguments, err)
        result = await handle.result()
    if result.termination is Termination.TERMINAL_TOOL and result.output is not None:
        _write(out, result.output)
    _write(err, result.summary())
    _write(err, _usage_line(result.usage))
    _write(err, f"cost: {_money(result.usage.cost_usd)}")
    code = EXIT_CODES.get(result.termination, EXIT_STOPPED)
    if code != EXIT_OK:
        _write(err, f"termination: {result.termination.value} (exit {code})")
        if result.error:
            _write(err, f"error: {result.error.rstrip()}")
    return result


def _narrate(event: ev.Event, arguments: dict[str, Any], err: TextIO) -> None:
    """The side notes of ``tether run`` on stderr: tools, retries, judgements."""
    if isinstance(event, ev.ToolCallStarted):
        arguments[event.call_id] = event.arguments
    elif isinstance(event, ev.ToolCallFinished):
        call = f"{event.name}({_clip(_compact(arguments.pop(event.call_id, {})), 60)})"
        _write(err, f"· tool {call} → {event.outcome}: {_clip(event.content, 80)}")
    elif isinstance(event, ev.ProviderRetry):
        _write(
            err,
            f"· provider retry after attempt {event.attempt}: {event.error_type}, "
            f"waiting {event.wait_s:.2f} s",
        )
    elif isinstance(event, ev.Judged):
        mark = "✓" if event.passed else "✗"
        feedback = "; ".join(f"{k}: {v}" for k, v in event.feedback.items())
        _write(err, f"· judge {mark} {_scores(event.scores)}{' — ' + feedback if feedback else ''}")


def load_agent(target: str) -> Agent:
    """The agent named by ``MODULE:AGENT`` (a dotted module or a ``.py`` path).

    ``AGENT`` may be dotted (``app.agents:registry.researcher``) and may name a
    function of no arguments that returns the agent. Raises :class:`UsageError`.
    """
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(
            f"expected MODULE:AGENT (like 'myapp.agents:researcher' or 'path/to/file.py:agent'), "
            f"got {target!r}"
        )
    module = _import(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
    if isinstance(obj, Agent):
        return obj
    if not callable(obj):
        raise UsageError(f"{target} is of type {type(obj).__name__}, not a tether.Agent")
    try:
        made = obj()
    except Exception as exc:
        raise UsageError(f"{target}() raised {type(exc).__name__}: {exc}") from None
    if not isinstance(made, Agent):
        raise UsageError(f"{target}() returned {type(made).__name__}, not a tether.Agent")
    return made


def _import(name: str) -> Any:
    is_path = name.endswith(".py") or "/" in name or os.sep in name
    try:
        if is_path:
            return _import_file(Path(name))
        if os.getcwd() not in sys.path and "" not in sys.path:
            # As 'python -m' does: modules of the current directory are importable.
            sys.path.insert(0, os.getcwd())
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                raise UsageError(f"no module named {name!r}") from None
            raise
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"importing {name!r} failed: {type(exc).__name__}: {exc}") from None


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise UsageError(f"no such file: {str(path)!r}")
    path = path.resolve()
    module_name = f"_tether_cli_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Like 'python file.py': the file's own directory is importable, for its siblings.
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _with_provider(agent: Agent, args: argparse.Namespace) -> Agent:
    """``agent`` with the provider the flags (or the environment) ask for."""
    kind: str | None = args.provider or os.environ.get("TETHER_PROVIDER") or None
    model: str | None = args.model or os.environ.get("TETHER_MODEL") or None
    base_url: str | None = args.base_url or os.environ.get("TETHER_BASE_URL") or None
    if kind is None and model is None and base_url is None:
        return agent
    current = agent.provider
    if kind is None:
        if current.name not in ("anthropic", "openai"):
            raise UsageError(
                f"--model and --base-url need --provider anthropic or openai "
                f"(the agent's provider is {current.name!r})"
            )
        kind = current.name
    if kind == "scripted":
        if model is not None or base_url is not None:
            raise UsageError("--provider scripted takes no --model or --base-url")
        return attrs.evolve(agent, provider=ScriptedProvider(_echo))
    if kind not in ("anthropic", "openai"):
        raise UsageError(f"unknown provider {kind!r}: choose anthropic, openai or scripted")
    if model is None:
        if current.name != kind:
            raise UsageError(f"--provider {kind} needs --model (or TETHER_MODEL)")
        model = current.model
    if base_url is None and current.name == kind:
        base_url = getattr(current, "base_url", None)
    provider = _http_provider(kind, model, base_url)
    return attrs.evolve(agent, provider=provider)


def _http_provider(kind: str, model: str, base_url: str | None) -> Provider:
    kwargs: dict[str, Any] = {"model": model}
    if base_url is not None:
        kwargs["base_url"] = base_url
    provider: Provider
    try:
        if kind == "anthropic":
            from tether.providers import _anthropic as anthropic

            provider = anthropic.AnthropicProvider(**kwargs)
            official, key_env = anthropic.DEFAULT_BASE_URL, anthropic.API_KEY_ENV
        else:
            from tether.providers import _openai as openai

            provider = openai.OpenAIProvider(**kwargs)
            official, key_env = openai.DEFAULT_BASE_URL, openai.API_KEY_ENV
    except (TypeError, ValueError) as exc:
        raise UsageError(f"cannot make the {kind} provider: {exc}") from None
    # A local OpenAI-compatible server needs no key; the vendor's own API does.
    if getattr(provider, "api_key", None) is None and getattr(provider, "base_url", None) == (
        official.rstrip("/")
    ):
        raise UsageError(f"no API key for {kind}: set {key_env}")
    return provider


def _echo(request: ModelRequest, ctx: ProviderContext) -> Reply:
    question = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
    return Reply(text=f"(scripted echo) {question}")


# ---------------------------------------------------------------- trace


def _cmd_trace(args: argparse.Namespace) -> int:
    runs = read_trace(args.file)
    if args.run is not None:
        if args.run not in runs:
            known = list(runs)
            listed = ", ".join(known[:10]) + (f", … ({len(known)} runs)" if len(known) > 10 else "")
            raise UsageError(f"no run {args.run!r} in {args.file}; runs: {listed}")
        runs = {args.run: runs[args.run]}
    console = _rich_console(args.plain)
    for i, (run_id, events) in enumerate(runs.items()):
        events.sort(key=lambda e: e.seq)
        if console is None:
            if i:
                _out()
            _trace_plain(run_id, events)
        else:
            _trace_rich(run_id, events, console)
    return EXIT_OK


def read_trace(path: str) -> dict[str, list[ev.Event]]:
    """The events of a JSONL file, by run id (in order of first appearance)."""
    import cattrs

    runs: dict[str, list[ev.Event]] = {}
    try:
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(
                        f"{path}:{number}: not valid JSON: {exc.msg} (column {exc.colno})"
                    ) from None
                if not isinstance(data, dict):
                    raise DataError(
                        f"{path}:{number}: not a tether event: a JSON {type(data).__name__}"
                    )
                try:
                    event = ev.load(data)
                except cattrs.ClassValidationError as exc:
                    why = "; ".join(cattrs.transform_error(exc))
                    raise DataError(
                        f"{path}:{number}: not a tether {data['type']}: {why}"
                    ) from None
                except Exception as exc:
                    raise DataError(f"{path}:{number}: not a tether event: {exc}") from None
                runs.setdefault(event.run_id, []).append(event)
    except FileNotFoundError:
        raise UsageError(f"no such file: {path!r}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if not runs:
        raise DataError(f"{path}: no events in the file")
    return runs


def describe(event: ev.Event) -> str:
    """The key fields of ``event``, compactly, for one row of a trace."""
    if isinstance(event, ev.RunStarted):
        parent = f" parent={event.parent_run_id}" if event.parent_run_id else ""
        return f"agent={event.agent} input={_clip(event.input, 60)!r}{parent}"
    if isinstance(event, ev.StageEntered | ev.StageExited):
        return event.stage
    if isinstance(event, ev.LessonsRecalled):
        return f"{len(event.lesson_ids)} lessons {', '.join(event.lesson_ids)}".rstrip()
    if isinstance(event, ev.ModelCallStarted):
        cap = "" if event.max_tokens is None else f" max_tokens={event.max_tokens}"
        return f"attempt {event.attempt}{cap}"
    if isinstance(event, ev.ProviderRetry):
        return f"{event.error_type} after attempt {event.attempt}, wait {event.wait_s:.2f} s"
    if isinstance(event, ev.ProviderWait):
        return f"waited {event.wait_s:.2f} s: {event.reason}"
    if isinstance(event, ev.UsageCharged):
        return (
            f"{event.source}: {event.input_tokens} in + {event.output_tokens} out, "
            f"{_money(event.cost_usd)}"
        )
    if isinstance(event, ev.ModelCallFinished):
        parts = [event.stop_reason, f"{event.usage.input_tokens}+{event.usage.output_tokens} tok"]
        if event.tool_calls:
            parts.append("calls " + ", ".join(c.name for c in event.tool_calls))
        if event.text:
            parts.append(repr(_clip(event.text, 50)))
        return " ".join(parts)
    if isinstance(event, ev.PolicyChecked):
        detail = f" {event.call_id}" if event.call_id else ""
        reason = f": {event.reason}" if event.reason else ""
        return f"{event.point} {event.verdict}{detail}{reason}"
    if isinstance(event, ev.ToolCallStarted):
        return f"{event.name}({_clip(_compact(event.arguments), 50)}) {event.call_id}"
    if isinstance(event, ev.ToolCallFinished):
        tries = f" ×{event.attempts}" if event.attempts > 1 else ""
        return f"{event.name} {event.outcome}{tries}: {_clip(event.content, 50)}"
    if isinstance(event, ev.Judged):
        mark = "✓" if event.passed else "✗"
        feedback = "; ".join(f"{k}: {v}" for k, v in event.feedback.items())
        error = f" error: {event.error}" if event.error else ""
        note = f" — {_clip(feedback, 60)}" if feedback else ""
        return f"{mark} {_scores(event.scores)}{note}{error}"
    if isinstance(event, ev.Transition):
        return f"{event.kind} ({event.reason})"
    if isinstance(event, ev.CeilingHit):
        return f"{event.ceiling}: {event.used:g} of {event.limit:g}"
    if isinstance(event, ev.LessonStored):
        return event.lesson_id
    if isinstance(event, ev.RunFinished):
        usage = event.usage
        error = f" error: {_clip(event.error.strip().splitlines()[-1], 60)}" if event.error else ""
        return f"{event.termination.value} {usage.total_tokens} tok {_money(usage.cost_usd)}{error}"
    # An event type this CLI does not know yet: its own fields.
    data = ev.dump(event)
    for common in ("type", "run_id", "seq", "round", "at"):
        data.pop(common, None)
    return _clip(_compact(data), 80)


def _scores(scores: Any) -> str:
    return " ".join(f"{name}={score:.2f}" for name, score in scores.items())


def _trace_heading(run_id: str, events: Sequence[ev.Event]) -> str:
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        return f"run {run_id}"
    return f"run {run_id} · agent {started.agent} · input {_clip(started.input, 60)!r}"


def _trace_footer(events: Sequence[ev.Event]) -> list[str]:
    lines = [summarize(list(events))]
    finished = next((e for e in events if isinstance(e, ev.RunFinished)), None)
    if finished is None:
        lines.append("(the run did not finish in this file)")
    else:
        lines.append(f"{_usage_line(finished.usage)} · cost {_money(finished.usage.cost_usd)}")
    seqs = [e.seq for e in events]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        lines.append("(some events are missing: seq has gaps)")
    return lines


def _rows(events: Sequence[ev.Event]) -> list[tuple[str, str, str, str, str]]:
    start = events[0].at
    return [
        (
            str(e.seq),
            str(e.round),
            f"{(e.at - start) * 1000:.0f}",
            type(e).__name__,
            describe(e),
        )
        for e in events
    ]


def _trace_plain(run_id: str, events: Sequence[ev.Event]) -> None:
    _out(_trace_heading(run_id, events))
    rows = _rows(events)
    head = ("seq", "round", "t+ms", "event", "details")
    widths = [max(len(r[i]) for r in [*rows, head]) for i in range(4)]
    for row in [head, *rows]:
        cells = [row[0].rjust(widths[0]), row[1].rjust(widths[1]), row[2].rjust(widths[2])]
        _out("  ".join([*cells, row[3].ljust(widths[3]), row[4]]).rstrip())
    for line in _trace_footer(events):
        _out(line)


def _trace_rich(run_id: str, events: Sequence[ev.Event], console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=_trace_heading(run_id, events), title_justify="left", expand=False)
    table.add_column("seq", justify="right")
    table.add_column("round", justify="right")
    table.add_column("t+ms", justify="right", style="dim")
    table.add_column("event")
    table.add_column("details", overflow="fold")
    for row, event in zip(_rows(events), events, strict=True):
        style = ""
        if isinstance(event, ev.StageEntered | ev.StageExited | ev.UsageCharged):
            style = "dim"
        elif isinstance(event, ev.RunFinished):
            style = "green" if event.termination.ok else "yellow"
        elif isinstance(event, ev.ProviderRetry | ev.CeilingHit):
            style = "yellow"
        table.add_row(*(Text(cell) for cell in row), style=style)
    console.print(table)
    for line in _trace_footer(events):
        console.print(Text(line))
    console.print()


if __name__ == "__main__":
    sys.exit(main())
