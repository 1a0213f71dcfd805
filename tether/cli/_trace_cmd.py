"""``tether trace``: read the runs a ``JsonlSink`` recorded and show each as a table."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether import events as ev
from tether.cli._common import (
    EXIT_OK,
    DataError,
    UsageError,
    _clip,
    _compact,
    _err,
    _money,
    _out,
    _rich_console,
    _scores,
    _usage_line,
)

if TYPE_CHECKING:
    from rich.console import Console


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
    """The events of a JSONL file, by run id (in order of first appearance).

    A last line cut short (the writer was killed mid-line: it has no newline and
    is not whole JSON) is skipped with a warning on stderr; a bad line anywhere
    else is a :class:`DataError`. Live deltas (``TextDelta``, ``ToolCallDelta``,
    written by ``JsonlSink(deltas=True)``) are skipped: each call's whole text
    is in its ``ModelCallFinished``.
    """
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
                    if not line.endswith("\n"):  # only the last line can lack one
                        _err(
                            f"{path}:{number}: the last line is torn ({len(line)} characters "
                            "of an event cut short, as by a crash mid-write); skipped"
                        )
                        break
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
                except ValueError as exc:  # load's own message names the problem
                    raise DataError(f"{path}:{number}: {exc}") from None
                except Exception as exc:
                    raise DataError(f"{path}:{number}: not a tether event: {exc}") from None
                if isinstance(event, ev.DELTA_TYPES):
                    continue  # live deltas (JsonlSink(deltas=True)): the text is in the trail
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
    if isinstance(event, ev.ProviderFallback):
        return f"{event.error_type}: {event.from_model} → {event.to_model}"
    if isinstance(event, ev.ProviderWait):
        return f"waited {event.wait_s:.2f} s: {event.reason}"
    if isinstance(event, ev.UsageCharged):
        return (
            f"{event.source}: {event.input_tokens} in + {event.output_tokens} out, "
            f"{_money(event.cost_usd)}"
        )
    if isinstance(event, ev.ModelCallFinished):
        tokens = event.usage
        parts = [event.stop_reason, f"{tokens.prompt_tokens}+{tokens.output_tokens} tok"]
        if tokens.cache_read_tokens or tokens.cache_write_tokens:
            read, written = tokens.cache_read_tokens, tokens.cache_write_tokens
            parts.append(f"(cache: {read} read, {written} written)")
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
    if isinstance(event, ev.RunForked):
        return f"forked from {event.from_run} after its round {event.at_round}; live from here"
    if isinstance(event, ev.RunFinished):
        usage = event.usage
        error = f" error: {_clip(event.error.strip().splitlines()[-1], 60)}" if event.error else ""
        return f"{event.termination.value} {usage.total_tokens} tok {_money(usage.cost_usd)}{error}"
    # An event type this CLI does not know yet: its own fields.
    data = ev.dump(event)
    for common in ("type", "run_id", "seq", "round", "at"):
        data.pop(common, None)
    return _clip(_compact(data), 80)


def _trace_heading(run_id: str, events: Sequence[ev.Event]) -> str:
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        return f"run {run_id}"
    return f"run {run_id} · agent {started.agent} · input {_clip(started.input, 60)!r}"


def _trace_footer(events: Sequence[ev.Event]) -> list[str]:
    lines = [ev.summarize(list(events))]
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
