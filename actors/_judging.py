"""Judges: per-criterion scores in [0, 1], reasons, and the feedback for a retry."""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from ._context import RunContext


@attrs.frozen(kw_only=True)
class Candidate:
    """A finished answer offered for judgement.

    ``ctx`` is the run's :class:`~tether.RunContext` (``ctx.deps``: the run's
    deps), set by the run when it asks its judge; ``None`` elsewhere.
    """

    text: str
    question: str
    round: int
    #: The typed answer (``Agent(output_type=T)``: a ``T``); for a ``str`` agent, the text.
    output: Any = None
    ctx: RunContext[Any] | None = attrs.field(default=None, eq=False, repr=False)


def _check_scores(_: Any, __: Any, scores: Mapping[str, float]) -> None:
    for name, score in scores.items():
        if not (isinstance(score, int | float) and 0.0 <= score <= 1.0) or math.isnan(score):
            raise ValueError(
                f"score of criterion {name!r} must be a number in [0, 1], got {score!r}"
            )


@attrs.frozen(kw_only=True)
class Judgement:
    """The verdict on one candidate.

    ``feedback`` holds the reasons of the criteria that fell short (criterion →
    reason); it goes into the next input on a quality retry. ``error`` is set
    when the judge itself failed: the candidate is then not passed (fail closed).
    """

    scores: Mapping[str, float] = attrs.field(factory=dict, validator=_check_scores)
    reasons: Mapping[str, str] = attrs.field(factory=dict)
    passed: bool
    feedback: Mapping[str, str] = attrs.field(factory=dict)
    error: str | None = None

    @property
    def score(self) -> float | None:
        """The lowest criterion score (the one that decides), or ``None`` without scores."""
        return min(self.scores.values()) if self.scores else None

    def feedback_text(self) -> str:
        return "\n".join(f"- {name}: {reason}" for name, reason in self.feedback.items())


@runtime_checkable
class Judge(Protocol):
    """Anything with ``async judge(candidate) -> Judgement``."""

    async def judge(self, candidate: Candidate) -> Judgement: ...


CriterionResult = float | bool | tuple[float, str]
Criterion = Callable[[Candidate], CriterionResult | Awaitable[CriterionResult]]


@attrs.frozen
class RuleJudge:
    """Judges with Python predicates.

    ``criteria`` maps a name to a callable taking the :class:`Candidate` and
    returning a float in [0, 1], a bool, or ``(score, reason)`` (sync or async).
    The candidate passes when every score reaches ``threshold``.
    """

    criteria: Mapping[str, Criterion]
    threshold: float = 0.7

    def __attrs_post_init__(self) -> None:
        if not self.criteria:
            raise ValueError("RuleJudge needs at least one criterion")
        for name, fn in self.criteria.items():
            if not callable(fn):
                raise TypeError(f"criterion {name!r} must be callable, got {type(fn).__name__}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"RuleJudge.threshold must be in [0, 1], got {self.threshold!r}")

    async def judge(self, candidate: Candidate) -> Judgement:
        scores: dict[str, float] = {}
        reasons: dict[str, str] = {}
        for name, fn in self.criteria.items():
            result = fn(candidate)
            if inspect.isawaitable(result):
                result = await result
            score, reason = _normalize(name, result)
            scores[name] = score
            reasons[name] = reason
        feedback = {n: reasons[n] for n, s in scores.items() if s < self.threshold}
        return Judgement(scores=scores, reasons=reasons, passed=not feedback, feedback=feedback)


def _normalize(name: str, result: Any) -> tuple[float, str]:
    reason = ""
    if isinstance(result, tuple):
        if len(result) != 2:
            raise TypeError(
                f"criterion {name!r} returned a tuple of {len(result)}; want (score, reason)"
            )
        result, reason = result
    if isinstance(result, bool):
        score = 1.0 if result else 0.0
    elif isinstance(result, int | float) and not math.isnan(result) and 0 <= result <= 1:
        score = float(result)
    else:
        raise TypeError(
            f"criterion {name!r} returned {result!r}; "
            "want a float in [0, 1], a bool or (score, reason)"
        )
    if not reason:
        reason = f"{name} scored {score:.2f}"
    return score, str(reason)
