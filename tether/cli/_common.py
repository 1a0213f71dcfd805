"""What the ``tether`` commands share: exit codes, errors in what the user gave, output helpers."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TextIO

import anyio

from tether.runtime import JsonlSink, ListableRunStore, Termination, Usage

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
    Termination.STORE_FAILED: EXIT_FAILED,
}

EPILOG = """\
exit codes of 'tether run' (by termination class):
  0   ok: answered, terminal_tool
  1   quality or limits: quality_exhausted, max_steps, max_tool_calls,
      max_continues, token_ceiling, cost_ceiling, deadline
  2   stopped: policy_blocked, refusal, cancelled, context_exceeded,
      truncated_tool_call, unknown_stop_reason
  3   failed: provider_failed, fatal_tool_error, crashed, store_failed
every command:
  64  usage error: bad arguments, a module, attribute or file not found
  65  'tether trace': a line of the file is not a tether event
'tether replay': 0 identical, 1 diverged
  130 interrupted (Ctrl-C)
"""


class UsageError(Exception):
    """Something the user gave is wrong: one line on stderr, exit 64."""


class DataError(Exception):
    """A file's content is wrong: one line on stderr, exit 65."""


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


def _count(n: int, thing: str, things: str | None = None) -> str:
    """``1 model call``, ``2 model calls``."""
    return f"{n:,} {thing if n == 1 else (things or thing + 's')}"


def _usage_line(usage: Usage) -> str:
    retries = usage.provider_attempts - usage.model_calls
    parts = [
        f"{usage.input_tokens:,} input + {_count(usage.output_tokens, 'output token')}",
        _count(usage.model_calls, "model call"),
        _count(usage.tool_calls, "tool call"),
    ]
    if usage.cache_read_tokens or usage.cache_write_tokens:
        cache = f"cache: {usage.cache_read_tokens:,} read, {usage.cache_write_tokens:,} written"
        parts.insert(1, cache)
    if retries:
        parts.append(_count(retries, "provider retry", "provider retries"))
    if usage.quality_retries:
        parts.append(_count(usage.quality_retries, "quality retry", "quality retries"))
    if usage.continues:
        parts.append(_count(usage.continues, "continue"))
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


class Interrupt:
    """Whether Ctrl-C was pressed while a command's runs were in flight."""

    def __init__(self) -> None:
        self.pressed = False


@asynccontextmanager
async def on_ctrl_c(cancel: Callable[[], None]) -> AsyncIterator[Interrupt]:
    """Within the block, the first Ctrl-C calls ``cancel`` (the command cancels its runs,
    which end ``cancelled`` and are reported as usual); a second one quits at once.

    Outside the main thread (where signals cannot be caught) Ctrl-C is left alone.
    """
    interrupt = Interrupt()
    if threading.current_thread() is not threading.main_thread():
        yield interrupt
        return

    async def watch() -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                interrupt.pressed = True
                _err("interrupted (Ctrl-C): cancelling; press Ctrl-C again to quit at once")
                cancel()
                break
        # The receiver is closed: a second Ctrl-C is the backend's KeyboardInterrupt.

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        try:
            yield interrupt
        finally:
            tg.cancel_scope.cancel()


# ---------------------------------------------------------------- run stores


def open_store(url: str, schema: str | None = None) -> ListableRunStore:
    """The run store of ``--store URL``: ``postgresql://...`` (extra ``postgres``; in
    ``schema`` when given), or a SQLite file: its path, or ``sqlite:///PATH`` as
    SQLAlchemy writes it (``sqlite:///runs.db`` relative, ``sqlite:////srv/runs.db``
    absolute). A store that is not there is a :class:`DataError`."""
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from tether.postgres import PostgresRunStore
        except ImportError as exc:
            raise UsageError(
                f"a PostgreSQL store needs the 'postgres' extra: pip install 'tether[postgres]' "
                f"({exc})"
            ) from None
        return PostgresRunStore(url) if schema is None else PostgresRunStore(url, schema=schema)
    if schema is not None:
        raise UsageError("--schema is for a PostgreSQL store (a postgresql:// URL)")
    path = url.removeprefix("sqlite:///")
    if "://" in path:
        raise UsageError(f"--store: not a sqlite:/// path or postgresql:// DSN: {url!r}")
    if not os.path.exists(path):
        raise DataError(f"--store: no run store file at {path!r}")
    from tether.runtime import SQLiteRunStore

    return SQLiteRunStore(path)
