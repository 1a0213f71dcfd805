"""The ``tether`` command line (``python -m tether``): the parser, ``main`` and shared output.

The commands live next to it: ``demo`` in :mod:`tether.cli._demo_cmd`, ``ray-demo`` in
:mod:`tether.cli._ray_demo`, ``run`` in :mod:`tether.cli._run_cmd`, ``eval`` in
:mod:`tether.cli._eval_cmd`, ``trace`` in :mod:`tether.cli._trace_cmd`, ``replay`` in
:mod:`tether.cli._replay_cmd`, ``serve`` in :mod:`tether.cli._serve_cmd`, ``mcp-serve`` in
:mod:`tether.cli._mcp_cmd`; what they share
(exit codes, errors, output helpers) in :mod:`tether.cli._common`.

``rich`` (the ``cli`` extra) draws the live view and the tables when stdout is
a terminal; without it, or with ``--plain``, or when stdout is a pipe, every
command prints plain lines. Errors in what the user gave (arguments, a module
that cannot be found, a missing file) are one line on stderr and exit 64,
never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from tether.cli._common import (
    EPILOG,
    EXIT_DATA,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    DataError,
    UsageError,
    _err,
)

# Each command's module is imported when that command runs: ``tether trace``
# never loads the providers, ``--help`` loads none of them.


def _cmd_demo(args: argparse.Namespace) -> int:
    from tether.cli._demo_cmd import _cmd_demo as command

    return command(args)


def _cmd_eval(args: argparse.Namespace) -> int:
    from tether.cli._eval_cmd import _cmd_eval as command

    return command(args)


def _cmd_ray_demo(args: argparse.Namespace) -> int:
    from tether.cli._ray_demo import _cmd_ray_demo as command

    return command(args)


def _cmd_run(args: argparse.Namespace) -> int:
    from tether.cli._run_cmd import _cmd_run as command

    return command(args)


def _cmd_trace(args: argparse.Namespace) -> int:
    from tether.cli._trace_cmd import _cmd_trace as command

    return command(args)


def _cmd_mcp_serve(args: argparse.Namespace) -> int:
    from tether.cli._mcp_cmd import _cmd_mcp_serve as command

    return command(args)


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
    except BaseExceptionGroup as group:  # trio delivers Ctrl-C inside a group
        if group.split(KeyboardInterrupt)[1] is not None:
            raise
        _err("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if not _caused_by_ctrl_c(exc):
            raise
        _err("interrupted")
        return EXIT_INTERRUPTED
    return code


def _caused_by_ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` stands for a Ctrl-C: Python wraps a KeyboardInterrupt that lands
    in some places (a class body's ``__set_name__`` while a module is imported, say:
    ``RuntimeError: Error calling __set_name__``), keeping it as the cause."""
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        if isinstance(at, KeyboardInterrupt):
            return True
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return False


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

    ray_demo = commands.add_parser(
        "ray-demo",
        help="the demo's agents over a Ray cluster (RayRuntime; extra 'ray')",
        description=(
            "Run the demo's N agents (see 'tether demo') through tether.ray.RayRuntime over "
            "--hosts Ray host actors, each a tether Runtime in a process of its own. The "
            "same summaries, live view and tally as 'tether demo', then a line per host with "
            "the runs it took. Without --address a local Ray cluster is started for the demo "
            "and stopped after it; '--address auto' joins a running one ('ray start --head'). "
            "Needs the 'ray' extra: pip install 'tether[ray]'."
        ),
    )
    ray_demo.add_argument("--hosts", type=int, default=2, metavar="N", help="default: 2")
    ray_demo.add_argument("--agents", type=int, default=120, metavar="N", help="default: 120")
    ray_demo.add_argument(
        "--address",
        metavar="ADDR",
        help="a running Ray cluster: 'auto', HOST:PORT or ray://HOST:PORT (default: a local one)",
    )
    ray_demo.add_argument(
        "--backend", choices=("asyncio", "trio"), default="asyncio", help="the caller's loop"
    )
    ray_demo.add_argument(
        "--seed", type=int, default=0, metavar="S", help="shuffles paths and latencies"
    )
    ray_demo.add_argument("--plain", action="store_true", help="plain lines, no live view")
    ray_demo.add_argument(
        "--latency-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply the scripted latencies (10 to 50 ms a call)",
    )
    ray_demo.add_argument(
        "--trace",
        metavar="FILE.jsonl",
        help="record every run's events with JsonlSink (overwrites)",
    )
    ray_demo.set_defaults(handler=_cmd_ray_demo)

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

    evals = commands.add_parser(
        "eval",
        help="run an agent over a dataset, judge it, report (and compare)",
        description=(
            "Run AGENT (MODULE:AGENT, as 'tether run' takes it) on every case of DATASET "
            "(.jsonl, or .yaml with PyYAML), judge each answer with every --judge, and show "
            "a table: per case, its passes, termination, mean score per criterion, tokens, "
            "cost and latency; then the pass rate, the mean scores, spend and p50/p95 "
            "latency. --out writes the report as JSON, --html as a self-contained page with "
            "a drill-down per case; --baseline compares with an earlier --out and flags the "
            "cases that regressed. Ctrl-C stops the eval and keeps the partial report."
        ),
        epilog=(
            "exit codes: 0 done (and the pass rate reached --min-pass); 1 the pass rate is "
            "below --min-pass; 2 the budget (--max-cost, --max-tokens) stopped it before "
            "the end; 64 usage error; 65 the dataset is not valid; 130 Ctrl-C"
        ),
    )
    evals.add_argument("dataset", metavar="DATASET")
    evals.add_argument("--agent", required=True, metavar="MODULE:AGENT")
    evals.add_argument(
        "--judge",
        action="append",
        metavar="JUDGE",
        help="exact, contains, json (compare with each case's expected) or MODULE:ATTR "
        "(a judge, or a list of them); repeat for several",
    )
    evals.add_argument("--concurrency", type=int, default=8, metavar="N", help="default: 8")
    evals.add_argument("--repeat", type=int, default=1, metavar="K", help="runs per case")
    evals.add_argument("--max-cost", type=float, metavar="USD", help="budget of the whole eval")
    evals.add_argument("--max-tokens", type=int, metavar="N", help="budget of the whole eval")
    evals.add_argument("--out", metavar="FILE.json", help="write the report as JSON")
    evals.add_argument("--html", metavar="FILE.html", help="write the report as a web page")
    evals.add_argument("--baseline", metavar="FILE.json", help="an earlier --out to compare")
    evals.add_argument(
        "--min-pass",
        "--min",
        type=float,
        metavar="RATE",
        help="exit 1 below this pass rate (0..1)",
    )
    evals.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    evals.add_argument("--plain", action="store_true", help="plain lines, no live view")
    evals.set_defaults(handler=_cmd_eval)

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
    mcp_serve = commands.add_parser(
        "mcp-serve",
        help="serve agents as the tools of an MCP server (stdio or HTTP; extra 'mcp')",
        description=(
            "Import each MODULE:AGENT (as 'tether run' does) and serve the agents as the "
            "tools of an MCP server on stdin and stdout, until stdin closes, or with --http "
            "over streamable HTTP at /mcp (uvicorn on asyncio, hypercorn on trio; the URL is "
            "printed on stderr): a tool call is one run (argument 'task'), text deltas are "
            "progress notifications, a cancelled call cancels its run. Needs the 'mcp' "
            "extra: pip install 'tether[mcp]'."
        ),
    )
    mcp_serve.add_argument("targets", metavar="MODULE:AGENT", nargs="+")
    mcp_serve.add_argument(
        "--http", type=int, metavar="PORT", help="serve HTTP on this port (0: a free one)"
    )
    mcp_serve.add_argument("--host", default="127.0.0.1", help="with --http (default: 127.0.0.1)")
    mcp_serve.add_argument("--name", default="tether", help="the server's name (default: tether)")
    mcp_serve.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    mcp_serve.add_argument(
        "--trace", metavar="FILE.jsonl", help="record every event with JsonlSink (appends)"
    )
    mcp_serve.set_defaults(handler=_cmd_mcp_serve)
    # The two commands that declare their own arguments; light modules (what they run
    # is imported when they run).
    from tether.cli._replay_cmd import add_parser as add_replay_parser
    from tether.cli._serve_cmd import add_serve

    add_replay_parser(commands)
    add_serve(commands)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether")
    except PackageNotFoundError:
        return "unknown"
