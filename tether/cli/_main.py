"""The ``tether`` command line (``python -m tether``): the parser, ``main`` and shared output.

The commands live next to it: ``demo`` in :mod:`tether.cli._demo_cmd`, ``ray-demo`` in
:mod:`tether.cli._ray_demo`, ``run`` in
:mod:`tether.cli._run_cmd`, ``trace`` in :mod:`tether.cli._trace_cmd`, ``mcp-serve`` in
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
from tether.cli._demo_cmd import _cmd_demo
from tether.cli._mcp_cmd import _cmd_mcp_serve
from tether.cli._ray_demo import _cmd_ray_demo
from tether.cli._run_cmd import _cmd_run
from tether.cli._trace_cmd import _cmd_trace


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
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether")
    except PackageNotFoundError:
        return "unknown"
