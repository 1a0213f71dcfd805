"""``tether eval``: run an agent over a dataset, judge it, show and save the report.

A live progress line (rich: cases done, pass rate so far, spend), a table at the
end, ``--out`` (JSON) and ``--html`` files, ``--baseline`` to compare with an
earlier report, and ``--min-pass`` for an exit code in CI. Ctrl-C stops the eval:
the runs in flight are cancelled and the partial report is still shown and written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from tether.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_LIMIT,
    EXIT_OK,
    EXIT_STOPPED,
    DataError,
    UsageError,
    _err,
    _money,
    _out,
    _rich_console,
)
from tether.cli._run_cmd import _import, load_agent
from tether.runtime import Agent, Limits

if TYPE_CHECKING:
    from rich.console import Console

    from tether.evals import CaseResult, Comparison, Dataset, EvalReport

#: The judges ``--judge`` knows by name.
BUILTIN_JUDGES = ("exact", "contains", "json")


@attrs.define
class Progress:
    """Counters for the live line, fed by ``on_result``."""

    total: int
    done: int = 0
    evaluated: int = 0
    passed: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False

    def add(self, result: CaseResult) -> None:
        self.done += 1
        if result.status == "evaluated":
            self.evaluated += 1
            self.passed += result.passed
        if result.status != "skipped":
            cost = result.cost_usd
            if cost is None:
                self.unpriced = True
            else:
                self.cost_usd += cost

    def line(self) -> str:
        rate = f"{self.passed / self.evaluated * 100:.1f}%" if self.evaluated else "—"
        spend = f"${self.cost_usd:.4f}" + (" + unpriced" if self.unpriced else "")
        return f"pass {rate} · spend {spend}"


def _cmd_eval(args: argparse.Namespace) -> int:
    from tether.evals import Dataset, DatasetError, EvalReport, ReportError

    if not 0.0 <= (args.min_pass if args.min_pass is not None else 0.0) <= 1.0:
        raise UsageError(f"--min-pass must be between 0 and 1, got {args.min_pass}")
    if args.concurrency < 1 or args.repeat < 1:
        raise UsageError("--concurrency and --repeat must be at least 1")
    if not Path(args.dataset).is_file():
        raise UsageError(f"no such file: {args.dataset!r}")
    try:
        dataset = Dataset.load(args.dataset)
    except DatasetError as exc:
        raise DataError(str(exc)) from None
    agent = load_agent(args.agent)
    judges = _judges(args.judge or [])
    baseline = None
    if args.baseline is not None:
        try:
            baseline = EvalReport.load(args.baseline)
        except ReportError as exc:
            raise UsageError(f"--baseline: {exc}") from None
    limits = None
    if args.max_cost is not None or args.max_tokens is not None:
        try:
            limits = Limits(max_cost_usd=args.max_cost, max_total_tokens=args.max_tokens)
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    for path in (args.out, args.html):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise UsageError(f"cannot write {path!r}: no such directory")
    console = _rich_console(args.plain)
    report, interrupted = anyio.run(
        _evaluate, agent, dataset, judges, args, limits, console, backend=args.backend
    )
    comparison = report.compare(baseline) if baseline is not None else None
    _show(report, comparison, console)
    if args.out is not None:
        report.save(args.out)
        _err(f"report written to {args.out}")
    if args.html is not None:
        from tether.evals import render_html

        Path(args.html).write_text(render_html(report, baseline), encoding="utf-8")
        _err(f"HTML report written to {args.html}")
    if interrupted:
        return EXIT_INTERRUPTED
    if not report.complete:
        # Stopped by its budget: a pass rate over part of the dataset must not pass CI.
        _err(f"the eval stopped early: {report.stopped}")
        return EXIT_STOPPED
    rate = report.aggregates().pass_rate
    if args.min_pass is not None and (rate is None or rate < args.min_pass):
        shown = "—" if rate is None else f"{rate:.3f}"
        _err(f"pass rate {shown} is below --min-pass {args.min_pass}")
        return EXIT_LIMIT
    return EXIT_OK


def _judges(specs: Sequence[str]) -> list[Any]:
    from tether.evals import Contains, ExactMatch, JsonEqual

    builtin = {"exact": ExactMatch, "contains": Contains, "json": JsonEqual}
    judges: list[Any] = []
    for spec in specs:
        if spec in builtin:
            judges.append(builtin[spec]())
            continue
        module_name, sep, attr = spec.rpartition(":")
        if not sep or not module_name or not attr:
            raise UsageError(
                f"--judge takes {', '.join(BUILTIN_JUDGES)} or MODULE:ATTR, got {spec!r}"
            )
        obj: Any = _import(module_name)
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
        found = list(obj.values()) if isinstance(obj, Mapping) else obj
        found = list(found) if isinstance(found, list | tuple) else [found]
        for judge in found:
            if not (hasattr(judge, "judge") or hasattr(judge, "judge_case")):
                raise UsageError(f"{spec} is not a judge (nor a list of judges): {judge!r}")
            judges.append(judge)
    return judges


async def _evaluate(
    agent: Agent,
    dataset: Dataset,
    judges: list[Any],
    args: argparse.Namespace,
    limits: Limits | None,
    console: Console | None,
) -> tuple[EvalReport, bool]:
    from tether.cli._common import on_ctrl_c
    from tether.evals import EvalControl, evaluate

    control = EvalControl()
    progress = Progress(total=len(dataset) * args.repeat)
    with _live(progress, console) as tick:

        def on_result(result: CaseResult) -> None:
            progress.add(result)
            tick(result)

        async with on_ctrl_c(lambda: control.stop("interrupted (Ctrl-C)")) as interrupt:
            report = await evaluate(
                agent,
                dataset,
                judges=judges,
                concurrency=args.concurrency,
                repeat=args.repeat,
                limits=limits,
                on_result=on_result,
                control=control,
            )
    return report, interrupt.pressed


@contextmanager
def _live(progress: Progress, console: Console | None) -> Iterator[Any]:
    """A rich progress bar (a terminal with rich), else one plain line per result."""
    if console is None:

        def plain(result: CaseResult) -> None:
            mark = {"evaluated": "✓" if result.passed else "✗"}.get(result.status, "·")
            what = result.termination or result.status
            _out(
                f"{mark} {result.case_id} #{result.repeat + 1} {what} "
                f"[{progress.done}/{progress.total} · {progress.line()}]"
            )

        yield plain
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    bar = Bar(
        TextColumn("eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    task = bar.add_task("eval", total=progress.total, stats=progress.line())
    with bar:
        yield lambda _: bar.update(task, completed=progress.done, stats=progress.line())


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def _show(report: EvalReport, comparison: Comparison | None, console: Console | None) -> None:
    """The table of cases, the totals and, with a baseline, the deltas."""
    from tether.evals import aggregate

    agg = report.aggregates()
    keys = list(agg.criteria)
    header = ["case", "passed", "termination", *keys, "tokens", "cost", "p50 s"]
    flagged = {d.case_id for d in comparison.regressions} if comparison is not None else set()
    rows = []
    for case_id, results in report.by_case().items():
        case = aggregate(results)
        rows.append(
            [
                case_id + (" ▼ regressed" if case_id in flagged else ""),
                f"{case.passed}/{case.evaluated}",
                ", ".join(sorted(case.terminations)),
                *[_fmt(case.criteria.get(k)) for k in keys],
                f"{case.tokens:,}",
                _money(case.cost_usd),
                _fmt(case.latency_p50_s, ".3f"),
            ]
        )
    totals = [
        f"pass rate {_fmt(None if agg.pass_rate is None else agg.pass_rate * 100, '.1f')}% "
        f"({agg.passed}/{agg.evaluated} evaluated, {agg.runs} runs)",
        "mean " + ", ".join(f"{k}={v:.3f}" for k, v in agg.criteria.items())
        if agg.criteria
        else "no judges' scores",
        f"tokens {agg.tokens:,} · cost {_money(agg.cost_usd)} · latency p50 "
        f"{_fmt(agg.latency_p50_s, '.3f')} s, p95 {_fmt(agg.latency_p95_s, '.3f')} s",
    ]
    if not report.complete:
        totals.append(f"incomplete: {report.stopped}")
    if comparison is not None:
        delta = comparison.pass_rate_delta
        totals.append(
            f"vs baseline: pass rate {_fmt(delta * 100 if delta is not None else None, '+.1f')} pt"
            f", {len(comparison.regressions)} regressed, {len(comparison.improvements)} improved"
            + (
                "; regressed: " + ", ".join(d.case_id for d in comparison.regressions)
                if comparison.regressions
                else ""
            )
        )
        for k, d in comparison.criteria_deltas.items():
            totals.append(f"  {k}: {d:+.3f}")
    if console is not None:
        from rich.table import Table

        table = Table(title=f"{report.agent} on {report.dataset}")
        for name in header:
            table.add_column(name, justify="right" if name not in header[:3] else "left")
        for row in rows:
            style = "red" if "regressed" in row[0] else None
            table.add_row(*row, style=style)
        console.print(table)
        for line in totals:
            console.print(line)
        return
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        _out("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for line in totals:
        _out(line)
    sys.stdout.flush()
