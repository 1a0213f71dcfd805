"""The ``tether`` command line (``python -m tether``): the parser, ``main`` and shared output.

The commands live next to it: ``demo`` in :mod:`tether._cli_demo`, ``run`` in
:mod:`tether._cli_run`, ``trace`` in :mod:`tether._cli_trace`.

``rich`` (the ``cli`` extra) draws the live view and the tables when stdout is
a terminal; without it, or with ``--plain``, or when stdout is a pipe, every
command prints plain lines. Errors in what the user gave (arguments, a module
that cannot be found, a missing file) are one line on stderr and exit 64,
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TextIO

from tether.runtime import Termination, Usage
from tether.runtime._sinks import JsonlSink

if TYPE_CHECKING:
    from rich.console import Console

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
    # Imported here, not at the top: the command modules import their helpers from this one.
    from tether._cli_demo import _cmd_demo
    from tether._cli_run import _cmd_run
    from tether._cli_trace import _cmd_trace

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


def _open_sink(path: str | None, mode: Literal["a", "w"]) -> JsonlSink | None:
    if path is None:
        return None
    try:
        return JsonlSink(path, mode=mode)
    except OSError as exc:
        raise UsageError(f"cannot write the trace file {path!r}: {exc.strerror or exc}") from exc


def _scores(scores: Any) -> str:
    return " ".join(f"{name}={score:.2f}" for name, score in scores.items())
