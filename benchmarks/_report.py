"""The plan of each benchmark (sizes per mode), its rows, and the markdown table."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._cases import Job, Result

#: Runs a job; ``True`` asks for a child process of its own (memory jobs).
Runner = Callable[[Job, bool], Result]

BENCHMARKS = ("B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9")


@dataclass(frozen=True, slots=True)
class Plan:
    """The sizes of every benchmark in one mode."""

    quick: bool
    timeout_s: float  # per job; a job past it is cut off and reported
    b1_runs: int
    b1_rounds: int
    b1_repeats: int
    b2_runs: int
    b2_rounds: int
    b2_repeats: int
    b3_sizes: tuple[int, ...]
    b3_rounds: int
    b3_latency_s: float
    b4_sizes: tuple[int, ...]
    b5_runs: int
    b6_runs: int
    b6_rounds: int
    b6_repeats: int
    b6_reader_delay_s: float
    b7_runs: int
    b7_rounds: int
    b7_repeats: int


FULL = Plan(
    quick=False,
    timeout_s=240.0,
    b1_runs=300,
    b1_rounds=10,
    b1_repeats=3,
    b2_runs=1_000,
    b2_rounds=5,
    b2_repeats=3,
    b3_sizes=(5_000, 20_000),
    b3_rounds=5,
    b3_latency_s=0.050,
    b4_sizes=(10_000, 100_000),
    b5_runs=1_000,
    b6_runs=1_000,
    b6_rounds=5,
    b6_repeats=5,
    b6_reader_delay_s=0.001,
    b7_runs=1_000,
    b7_rounds=3,
    b7_repeats=2,
)

QUICK = Plan(
    quick=True,
    timeout_s=30.0,
    b1_runs=20,
    b1_rounds=3,
    b1_repeats=1,
    b2_runs=100,
    b2_rounds=3,
    b2_repeats=1,
    b3_sizes=(50, 200),
    b3_rounds=3,
    b3_latency_s=0.001,
    b4_sizes=(100, 500),
    b5_runs=100,
    b6_runs=50,
    b6_rounds=3,
    b6_repeats=1,
    b6_reader_delay_s=0.001,
    b7_runs=20,
    b7_rounds=2,
    b7_repeats=1,
)


@dataclass(frozen=True, slots=True)
class Row:
    bench: str
    backend: str
    measure: str
    tether: str
    bare: str
    ratio: str
    target: str
    mark: str
    verified: str
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "backend": self.backend,
            "measure": self.measure,
            "tether": self.tether,
            "bare": self.bare,
            "ratio": self.ratio,
            "target": self.target,
            "mark": self.mark,
            "verified": self.verified,
            "ok": self.ok,
            "problems": list(self.problems),
        }


HEADER = ("bench", "backend", "measure", "tether", "bare loop", "tether ÷ bare", "target", "mark")


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| " + " | ".join((*HEADER, "verified")) + " |",
        "|" + "|".join("---" for _ in range(len(HEADER) + 1)) + "|",
    ]
    for r in rows:
        cells = (r.bench, r.backend, r.measure, r.tether, r.bare, r.ratio, r.target)
        lines.append("| " + " | ".join((*cells, r.mark, r.verified)) + " |")
    return "\n".join(lines)


# -------------------------------------------------------------------- formatting


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _fmt(value: float, digits: int = 1, unit: str = "") -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value:,.{digits}f}{unit}"


def _kb(value: float) -> str:
    if not math.isfinite(value):
        return "—"
    return f"{value / 1024:,.1f} MB" if value >= 10_240 else f"{value:,.1f} KB"


def _times(ratio: float) -> str:
    """A ratio where lower is better: '12.3×'."""
    if not math.isfinite(ratio):
        return "—"
    return f"{ratio:,.1f}×" if ratio < 100 else f"{ratio:,.0f}×"


def _fraction(ratio: float) -> str:
    """A ratio where higher is better: '1/37' below one, else '1.2×'."""
    if not math.isfinite(ratio) or ratio <= 0:
        return "—"
    return f"1/{1 / ratio:,.1f}" if ratio < 1 else f"{ratio:,.2f}×"


def _mark(plan: Plan, passed: bool | None) -> str:
    if passed is None:
        return "—"
    if plan.quick:
        return "n/a (quick)"
    return "pass" if passed else "**miss**"


def _verified(*results: Result) -> tuple[str, tuple[str, ...]]:
    problems: list[str] = []
    runs = 0
    for result in results:
        problems += result.get("problems", [])
        runs += int(result.get("verified_runs") or 0)
    if problems:
        return f"✗ {problems[0]}" + (f" (+{len(problems) - 1})" if len(problems) > 1 else ""), (
            tuple(problems)
        )
    return f"✓ {_n(runs)} runs", ()


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) else math.nan


# ------------------------------------------------------------------- benchmarks


def bench_b1(plan: Plan, backend: str, run: Runner) -> list[Row]:
    job = Job(
        "B1",
        "tether",
        backend,
        plan.b1_runs,
        plan.b1_rounds,
        0.0,
        repeats=plan.b1_repeats,
        timeout_s=plan.timeout_s,
    )
    t, b = run(job, False), run(_bare(job), False)
    tu, bu = _num(t.get("us_per_round")), _num(b.get("us_per_round"))
    ratio = _ratio(tu, bu)
    verified, problems = _verified(t, b)
    return [
        Row(
            "B1",
            backend,
            f"µs per round · L=0, R={plan.b1_rounds} · one run at a time "
            f"({_n(plan.b1_runs)} runs, best of {plan.b1_repeats})",
            _fmt(tu, 1, " µs"),
            f"{_fmt(bu, 2, ' µs')} ({_fmt(_num(b.get('us_per_round_no_await')), 2, ' µs')} "
            "without the model's `await anyio.sleep(0)`)",
            _times(ratio),
            "≤ 10× bare",
            _mark(plan, ratio <= 10 if math.isfinite(ratio) else False),
            verified,
            problems,
        )
    ]


def bench_b2(plan: Plan, backend: str, run: Runner) -> list[Row]:
    job = Job(
        "B2",
        "tether",
        backend,
        plan.b2_runs,
        plan.b2_rounds,
        0.0,
        repeats=plan.b2_repeats,
        timeout_s=plan.timeout_s,
    )
    t, b = run(job, False), run(_bare(job), False)
    tr, br = _num(t.get("rounds_per_s")), _num(b.get("rounds_per_s"))
    ratio = _ratio(tr, br)
    verified, problems = _verified(t, b)
    return [
        Row(
            "B2",
            backend,
            f"rounds/s · {_n(plan.b2_runs)} runs at once · L=0, R={plan.b2_rounds} "
            f"(best of {plan.b2_repeats})",
            _fmt(tr, 0),
            _fmt(br, 0),
            _fraction(ratio),
            "≥ 1/10 of bare",
            _mark(plan, ratio >= 0.1 if math.isfinite(ratio) else False),
            verified,
            problems,
        )
    ]


def bench_b3(plan: Plan, backend: str, run: Runner) -> list[Row]:
    rows: list[Row] = []
    latency_ms = plan.b3_latency_s * 1000
    for i, size in enumerate(plan.b3_sizes):
        job = Job(
            "B3",
            "tether",
            backend,
            size,
            plan.b3_rounds,
            plan.b3_latency_s,
            timeout_s=plan.timeout_s,
        )
        t, b = run(job, True), run(_bare(job), True)
        tw, bw = _num(t.get("wall_over_ideal")), _num(b.get("wall_over_ideal"))
        verified, problems = _verified(t, b)
        first = i == 0
        rows.append(
            Row(
                "B3",
                backend,
                f"wall ÷ ideal (R·L) · {_n(size)} runs at once · L={latency_ms:g} ms, "
                f"R={plan.b3_rounds}",
                f"{_fmt(tw, 2, '×')} ({_fmt(_num(t.get('best_s')), 2, ' s')})",
                f"{_fmt(bw, 2, '×')} ({_fmt(_num(b.get('best_s')), 2, ' s')})",
                _times(_ratio(tw, bw)),
                "≤ 2× ideal" if first else "degrades gracefully",
                _mark(plan, tw <= 2 if math.isfinite(tw) else False) if first else "—",
                verified,
                problems,
            )
        )
        tp, bp = _num(t.get("rss_per_run_kb")), _num(b.get("rss_per_run_kb"))
        rows.append(
            Row(
                "B3",
                backend,
                f"peak RSS · RSS per run · {_n(size)} runs at once",
                f"{_kb(_num(t.get('peak_rss_kb')))} · {_fmt(tp, 1, ' KB')}/run",
                f"{_kb(_num(b.get('peak_rss_kb')))} · {_fmt(bp, 1, ' KB')}/run",
                _times(_ratio(tp, bp)),
                "—",
                "—",
                verified,
                (),
            )
        )
    return rows


def bench_b4(plan: Plan, backend: str, run: Runner) -> list[Row]:
    rows: list[Row] = []
    for i, size in enumerate(plan.b4_sizes):
        job = Job("B4", "tether", backend, size, 1, 0.0, timeout_s=plan.timeout_s)
        t, b = run(job, True), run(_bare(job), True)
        tp, bp = _num(t.get("rss_per_run_kb")), _num(b.get("rss_per_run_kb"))
        verified, problems = _verified(t, b)
        last = i == len(plan.b4_sizes) - 1
        passed = math.isfinite(tp) and tp <= 15 and not problems
        rows.append(
            Row(
                "B4",
                backend,
                f"RSS per run parked in the model call · {_n(size)} runs (then all cancelled)",
                f"{_fmt(tp, 1, ' KB')}/run ({_kb(_num(t.get('parked_rss_kb')))}); "
                f"park {_fmt(_num(t.get('park_s')), 2, ' s')}, "
                f"cancel {_fmt(_num(t.get('cancel_ms')), 0, ' ms')}",
                f"{_fmt(bp, 2, ' KB')}/run ({_kb(_num(b.get('parked_rss_kb')))}); "
                f"park {_fmt(_num(b.get('park_s')), 2, ' s')}, "
                f"cancel {_fmt(_num(b.get('cancel_ms')), 0, ' ms')}",
                _times(_ratio(tp, bp)),
                "≤ 15 KB/run, fits in one process" if last else "≤ 15 KB/run",
                _mark(plan, passed),
                verified,
                problems,
            )
        )
    return rows


def bench_b5(plan: Plan, backend: str, run: Runner) -> list[Row]:
    job = Job("B5", "tether", backend, plan.b5_runs, 1, 0.0, timeout_s=plan.timeout_s)
    t, b = run(job, False), run(_bare(job), False)
    tm, bm = _num(t.get("cancel_ms")), _num(b.get("cancel_ms"))
    leaked = t.get("leaked_tasks")
    verified, problems = _verified(t, b)
    passed = math.isfinite(tm) and tm <= 20 and leaked == 0
    return [
        Row(
            "B5",
            backend,
            f"ms from cancel until every RunFinished · {_n(plan.b5_runs)} parked runs "
            "cancelled from outside · leaked tasks",
            f"{_fmt(tm, 1, ' ms')} · {leaked} leaked "
            f"(tasks gone at {_fmt(_num(t.get('exit_ms')), 1, ' ms')})",
            f"{_fmt(bm, 1, ' ms')} · {b.get('leaked_tasks')} leaked",
            _times(_ratio(tm, bm)),
            "≤ 20 ms, 0 leaked",
            _mark(plan, passed),
            verified,
            problems,
        ),
        _b5_callers(plan, backend, run),
    ]


def _b5_callers(plan: Plan, backend: str, run: Runner) -> Row:
    """B5 as a peer benchmark measures it: each run awaited by a caller, the callers
    cancelled by one scope, timed until every run has its result."""
    job = Job("B5C", "tether", backend, plan.b5_runs, 1, 0.0, timeout_s=plan.timeout_s)
    t, b = run(job, False), run(_bare(job), False)
    tm, bm = _num(t.get("cancel_ms")), _num(b.get("cancel_ms"))
    verified, problems = _verified(t, b)
    return Row(
        "B5",
        backend,
        f"ms from cancelling the callers until every run has its result · {_n(plan.b5_runs)} "
        "callers each awaiting a parked run (as `Runtime.run` does), one scope around them",
        f"{_fmt(tm, 1, ' ms')} · {t.get('leaked_tasks')} leaked",
        f"{_fmt(bm, 1, ' ms')} · {b.get('leaked_tasks')} leaked",
        _times(_ratio(tm, bm)),
        "≤ 3× bare",
        _mark(plan, _ratio(tm, bm) <= 3 if math.isfinite(_ratio(tm, bm)) else False),
        verified,
        problems,
    )


def bench_b6(plan: Plan, backend: str, run: Runner) -> list[Row]:
    job = Job(
        "B6",
        "tether",
        backend,
        plan.b6_runs,
        plan.b6_rounds,
        0.0,
        repeats=plan.b6_repeats,
        timeout_s=plan.timeout_s,
        reader_delay_s=plan.b6_reader_delay_s,
    )
    t, b = run(job, False), run(_bare(job), False)
    none, slow = _num(t.get("rounds_per_s")), _num(t.get("reader_rounds_per_s"))
    br = _num(b.get("rounds_per_s"))
    verified, problems = _verified(t, b)
    change = (_ratio(slow, none) - 1) * 100
    where = f"{_n(plan.b6_runs)} runs at once · L=0, R={plan.b6_rounds}"
    return [
        Row(
            "B6",
            backend,
            f"rounds/s, no reader · {where} (best of {plan.b6_repeats})",
            _fmt(none, 0),
            _fmt(br, 0),
            _fraction(_ratio(none, br)),
            "—",
            "—",
            verified,
            (),
        ),
        Row(
            "B6",
            backend,
            f"rounds/s, one slow `handle.events()` reader "
            f"({plan.b6_reader_delay_s * 1000:g} ms per event; "
            f"{t.get('reader_behind_events')} events behind when its run finished)",
            f"{_fmt(slow, 0)} ({change:+.1f}% vs no reader)",
            _fmt(br, 0),
            _fraction(_ratio(slow, br)),
            "within 10% of no reader",
            _mark(plan, change >= -10 if math.isfinite(change) else False),
            verified,
            problems,
        ),
    ]


def bench_b7(plan: Plan, backend: str, run: Runner) -> list[Row]:
    """Each HTTP provider against bare httpx + httpx-sse, on the same local SSE server."""
    rows: list[Row] = []
    for wire in ("anthropic", "openai", "gemini"):
        job = Job(
            "B7",
            "tether",
            backend,
            plan.b7_runs,
            plan.b7_rounds,
            0.0,
            repeats=plan.b7_repeats,
            timeout_s=plan.timeout_s,
            wire=wire,
        )
        t, b = run(job, False), run(_bare(job), False)
        tr, br = _num(t.get("rounds_per_s")), _num(b.get("rounds_per_s"))
        verified, problems = _verified(t, b)
        name = {
            "anthropic": "AnthropicProvider",
            "openai": "OpenAIProvider",
            "gemini": "GeminiProvider",
        }[wire]
        rows.append(
            Row(
                "B7",
                backend,
                f"rounds/s over HTTP · `{name}` streaming from a local SSE server · "
                f"{_n(plan.b7_runs)} runs at once, R={plan.b7_rounds} "
                f"(best of {plan.b7_repeats}); bare: the same requests with httpx + httpx-sse",
                _fmt(tr, 0),
                _fmt(br, 0),
                _fraction(_ratio(tr, br)),
                "—",
                "—",
                verified,
                problems,
            )
        )
    return rows


def bench_b8(plan: Plan, backend: str, run: Runner) -> list[Row]:
    """B1's workload (its sizes), with and without a ``stream_text()`` reader per run."""
    job = Job(
        "B8",
        "tether",
        backend,
        plan.b1_runs,
        plan.b1_rounds,
        0.0,
        repeats=plan.b1_repeats,
        timeout_s=plan.timeout_s,
    )
    t, b = run(job, False), run(_bare(job), False)
    none, streamed = _num(t.get("us_per_round")), _num(t.get("stream_us_per_round"))
    bu = _num(b.get("us_per_round"))
    verified, problems = _verified(t, b)
    change = (_ratio(streamed, none) - 1) * 100
    where = f"L=0, R={plan.b1_rounds} · one run at a time ({_n(plan.b1_runs)} runs"
    return [
        Row(
            "B8",
            backend,
            f"µs per round, nobody streams · {where}, best of {plan.b1_repeats})",
            _fmt(none, 1, " µs"),
            _fmt(bu, 2, " µs"),
            _times(_ratio(none, bu)),
            "—",
            "—",
            verified,
            (),
        ),
        Row(
            "B8",
            backend,
            f"µs per round, each run read with `handle.stream_text()` · {where})",
            f"{_fmt(streamed, 1, ' µs')} ({change:+.1f}% vs nobody streams)",
            _fmt(bu, 2, " µs"),
            _times(_ratio(streamed, bu)),
            "—",
            "—",
            verified,
            problems,
        ),
    ]


def bench_b9(plan: Plan, backend: str, run: Runner) -> list[Row]:
    """B2's workload (its sizes) with a ``SQLiteRunStore``, against no store."""
    job = Job(
        "B9",
        "tether",
        backend,
        plan.b2_runs,
        plan.b2_rounds,
        0.0,
        repeats=max(2, plan.b2_repeats),
        timeout_s=plan.timeout_s,
    )
    t, b = run(job, False), run(_bare(job), False)
    durable, plain = _num(t.get("rounds_per_s")), _num(t.get("plain_rounds_per_s"))
    br = _num(b.get("rounds_per_s"))
    verified, problems = _verified(t, b)
    change = (_ratio(durable, plain) - 1) * 100
    return [
        Row(
            "B9",
            backend,
            f"rounds/s · B2 ({_n(plan.b2_runs)} runs at once, L=0, R={plan.b2_rounds}) "
            f"with `SQLiteRunStore` against {_fmt(plain, 0)} without (best of {job.repeats})",
            f"{_fmt(durable, 0)} ({change:+.1f}% vs no store)",
            _fmt(br, 0),
            _fraction(_ratio(durable, br)),
            "—",
            "—",
            verified,
            problems,
        )
    ]


def _bare(job: Job) -> Job:
    return dataclasses.replace(job, impl="bare")


BENCH: dict[str, Callable[[Plan, str, Runner], list[Row]]] = {
    "B1": bench_b1,
    "B2": bench_b2,
    "B3": bench_b3,
    "B4": bench_b4,
    "B5": bench_b5,
    "B6": bench_b6,
    "B7": bench_b7,
    "B8": bench_b8,
    "B9": bench_b9,
}
