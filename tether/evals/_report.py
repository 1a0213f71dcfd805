"""The eval report: a result per case and repeat, aggregates, JSON, and comparison."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs

from tether.runtime import Judgement, Usage

#: The version of the report's JSON form (``EvalReport.save``).
FORMAT = 1

#: ``evaluated``: the run ended and was judged; ``skipped``: it never started (the
#: eval was stopped, or its budget was spent); ``stopped``: it was cancelled in
#: flight when the eval was stopped, or the Runtime-wide budget ended it (``note``
#: says which). Only ``evaluated`` results count in pass rates and scores.
Status = Literal["evaluated", "skipped", "stopped"]


@attrs.frozen(kw_only=True)
class CaseResult:
    """One run of one case (``repeat`` counts from 0) and its judgements."""

    case_id: str
    repeat: int
    input: str
    expected: Any = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    status: Status = "evaluated"
    #: The answer: the run's output (its JSON form for a typed output), or ``None``.
    output: Any = None
    #: The termination reason (``"answered"``...), ``None`` when it never ran.
    termination: str | None = None
    error: str | None = None
    #: The run's own judge's verdict (``RunResult.passed``), ``None`` without one.
    run_passed: bool | None = None
    #: Judge name → its judgement of this answer.
    judgements: Mapping[str, Judgement] = attrs.field(factory=dict)
    passed: bool = False
    usage: Usage = attrs.field(factory=Usage)
    #: What the evaluators' own model calls used (``LLMJudge``, ``LLMRubric``).
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    #: ``None`` when an evaluator's calls could not be priced.
    judge_cost_usd: float | None = 0.0
    #: Seconds from the run's start to its result (judging excluded).
    latency_s: float | None = None
    run_id: str | None = None
    summary: str | None = None
    note: str | None = None

    @property
    def cost_usd(self) -> float | None:
        """The run's cost plus the evaluators'; ``None`` when either is unpriced."""
        if self.usage.cost_usd is None or self.judge_cost_usd is None:
            return None
        return self.usage.cost_usd + self.judge_cost_usd

    @property
    def tokens(self) -> int:
        """Input plus output tokens, the run's and the evaluators'."""
        return self.usage.total_tokens + self.judge_input_tokens + self.judge_output_tokens

    @property
    def scores(self) -> dict[str, float]:
        """Criterion → score over every judge (see :func:`criterion_key`)."""
        out: dict[str, float] = {}
        for judge, judgement in self.judgements.items():
            for criterion, score in judgement.scores.items():
                out[criterion_key(judge, criterion)] = score
        return out


def criterion_key(judge: str, criterion: str) -> str:
    """A criterion's name in the report: the criterion's own when it is the judge's
    name too (``exact``), else ``judge.criterion``."""
    return criterion if criterion == judge else f"{judge}.{criterion}"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by linear interpolation; ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


@attrs.frozen(kw_only=True)
class Aggregates:
    """Totals over the evaluated results of a report (or of one case)."""

    runs: int
    evaluated: int
    passed: int
    #: passed / evaluated; ``None`` when nothing was evaluated.
    pass_rate: float | None
    #: Mean score per criterion (over the results that have it).
    criteria: Mapping[str, float]
    input_tokens: int
    output_tokens: int
    #: ``None`` when some part could not be priced.
    cost_usd: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    terminations: Mapping[str, int]

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def aggregate(results: Sequence[CaseResult]) -> Aggregates:
    """The :class:`Aggregates` of ``results``: a report's, or one case's repeats.

    Tokens and cost count every run that spent; latencies and scores only the
    evaluated ones."""
    done = [r for r in results if r.status == "evaluated"]
    per: dict[str, list[float]] = {}
    for r in done:
        for key, score in r.scores.items():
            per.setdefault(key, []).append(score)
    costs = [r.cost_usd for r in results if r.status != "skipped"]
    latencies = [r.latency_s for r in done if r.latency_s is not None]
    passed = sum(r.passed for r in done)
    return Aggregates(
        runs=len(results),
        evaluated=len(done),
        passed=passed,
        pass_rate=passed / len(done) if done else None,
        criteria={k: sum(v) / len(v) for k, v in per.items()},
        input_tokens=sum(r.usage.input_tokens + r.judge_input_tokens for r in results),
        output_tokens=sum(r.usage.output_tokens + r.judge_output_tokens for r in results),
        cost_usd=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
        latency_p50_s=percentile(latencies, 0.5),
        latency_p95_s=percentile(latencies, 0.95),
        terminations=dict(Counter(r.termination or r.status for r in results)),
    )


@attrs.frozen(kw_only=True)
class CaseDelta:
    """How one case moved between a baseline and this report."""

    case_id: str
    pass_rate_before: float | None
    pass_rate_after: float | None
    #: Criterion → (mean before, mean after); a side is ``None`` where it has no score.
    criteria: Mapping[str, tuple[float | None, float | None]]
    #: It passed less often, or a criterion's mean fell by more than the tolerance.
    regressed: bool
    #: It passed more often, and no criterion fell.
    improved: bool

    @property
    def pass_rate_delta(self) -> float | None:
        if self.pass_rate_before is None or self.pass_rate_after is None:
            return None
        return self.pass_rate_after - self.pass_rate_before


@attrs.frozen(kw_only=True)
class Comparison:
    """``report.compare(baseline)``: per-case and aggregate deltas.

    Cases are matched by id; those in one report only are listed in ``added``
    (new here) and ``removed`` (baseline only).
    """

    before: Aggregates
    after: Aggregates
    cases: tuple[CaseDelta, ...]
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def regressions(self) -> tuple[CaseDelta, ...]:
        """The cases that regressed, in dataset order."""
        return tuple(c for c in self.cases if c.regressed)

    @property
    def improvements(self) -> tuple[CaseDelta, ...]:
        return tuple(c for c in self.cases if c.improved)

    @property
    def pass_rate_delta(self) -> float | None:
        if self.before.pass_rate is None or self.after.pass_rate is None:
            return None
        return self.after.pass_rate - self.before.pass_rate

    @property
    def criteria_deltas(self) -> dict[str, float]:
        """Criterion → change of its mean score (criteria in both reports)."""
        return {
            k: self.after.criteria[k] - v
            for k, v in self.before.criteria.items()
            if k in self.after.criteria
        }

    @property
    def cost_delta_usd(self) -> float | None:
        if self.before.cost_usd is None or self.after.cost_usd is None:
            return None
        return self.after.cost_usd - self.before.cost_usd

    @property
    def tokens_delta(self) -> int:
        return self.after.tokens - self.before.tokens


@attrs.frozen(kw_only=True)
class EvalReport:
    """What :func:`evaluate` found: one :class:`CaseResult` per case and repeat.

    ``complete`` is ``False`` when the eval stopped early (``stopped`` says why:
    Ctrl-C, :meth:`EvalControl.stop`, the Runtime's budget); the results then hold
    what was done, and the cases never run as ``skipped``. Save with :meth:`save`
    (JSON) and read back with :meth:`load`; :meth:`compare` a report with a baseline.
    """

    dataset: str
    agent: str
    results: tuple[CaseResult, ...]
    judges: tuple[str, ...] = ()
    repeat: int = 1
    concurrency: int = 1
    started_at: float = 0.0
    finished_at: float = 0.0
    complete: bool = True
    stopped: str | None = None

    def aggregates(self) -> Aggregates:
        """Pass rate, mean score per criterion, tokens, cost, p50/p95 latency."""
        return aggregate(self.results)

    @property
    def pass_rate(self) -> float | None:
        return self.aggregates().pass_rate

    def case_ids(self) -> list[str]:
        """The case ids in dataset order."""
        return list(dict.fromkeys(r.case_id for r in self.results))

    def by_case(self) -> dict[str, list[CaseResult]]:
        """Case id → its results (one per repeat), in dataset order."""
        out: dict[str, list[CaseResult]] = {}
        for r in self.results:
            out.setdefault(r.case_id, []).append(r)
        return out

    def compare(self, baseline: EvalReport, *, tolerance: float = 0.05) -> Comparison:
        """Deltas from ``baseline`` to this report, per case and overall.

        A case regressed when its pass rate fell, or the mean of one of its
        criteria fell by more than ``tolerance``.
        """
        if not isinstance(baseline, EvalReport):
            raise TypeError(f"compare() takes an EvalReport, got {type(baseline).__name__}")
        if not 0.0 <= tolerance <= 1.0:
            raise ValueError(f"tolerance must be in [0, 1], got {tolerance!r}")
        old, new = baseline.by_case(), self.by_case()
        deltas = []
        for case_id, results in new.items():
            if case_id not in old:
                continue
            before, after = aggregate(old[case_id]), aggregate(results)
            keys = list(dict.fromkeys([*before.criteria, *after.criteria]))
            criteria = {k: (before.criteria.get(k), after.criteria.get(k)) for k in keys}
            fell = any(
                b is not None and (a is None or a < b - tolerance) for b, a in criteria.values()
            )
            rose = any(
                b is not None and a is not None and a > b + tolerance for b, a in criteria.values()
            )
            rate_b, rate_a = before.pass_rate, after.pass_rate
            lower = rate_b is not None and (rate_a is None or rate_a < rate_b)
            higher = rate_a is not None and (rate_b is None or rate_a > rate_b)
            deltas.append(
                CaseDelta(
                    case_id=case_id,
                    pass_rate_before=rate_b,
                    pass_rate_after=rate_a,
                    criteria=criteria,
                    regressed=lower or fell,
                    improved=(higher or rose) and not (lower or fell),
                )
            )
        return Comparison(
            before=baseline.aggregates(),
            after=self.aggregates(),
            cases=tuple(deltas),
            added=tuple(c for c in new if c not in old),
            removed=tuple(c for c in old if c not in new),
        )

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``format`` is :data:`FORMAT`)."""
        data: dict[str, Any] = _converter.unstructure(self)
        data["format"] = FORMAT
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalReport:
        """A report from :meth:`to_dict`'s form; :class:`ReportError` if it is not one."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, Mapping) else type(data).__name__
            raise ReportError(f"not a tether eval report of format {FORMAT} (format: {got!r})")
        body = {k: v for k, v in data.items() if k != "format"}
        try:
            return _converter.structure(body, cls)
        except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
            detail = (
                "; ".join(cattrs.transform_error(exc))
                if isinstance(exc, cattrs.BaseValidationError)
                else str(exc)
            )
            raise ReportError(f"not a valid eval report: {detail}") from None

    def save(self, path: str | Path) -> None:
        """Write the report as JSON to ``path``."""
        text = json.dumps(self.to_dict(), ensure_ascii=False, indent=1, default=repr)
        Path(path).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> EvalReport:
        """Read a report written by :meth:`save`."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ReportError(f"{path}: no such file") from None
        except (OSError, ValueError) as exc:
            raise ReportError(f"{path}: cannot read it as JSON: {exc}") from None
        try:
            return cls.from_dict(data)
        except ReportError as exc:
            raise ReportError(f"{path}: {exc}") from None


class ReportError(ValueError):
    """A file or dict is not an eval report this version can read."""


_converter = cattrs.Converter(detailed_validation=True)
_converter.register_structure_hook(Any, lambda value, _: value)
