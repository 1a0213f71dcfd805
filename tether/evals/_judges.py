"""Evaluators: any :class:`tether.Judge`, and judges that compare with a case's ``expected``.

An evaluator is either a plain judge (``async judge(candidate) -> Judgement``:
``RuleJudge``, ``LLMJudge``, your own) or a :class:`CaseJudge`
(``async judge_case(candidate, case) -> Judgement``), which also sees the case,
so it can compare the answer with ``case.expected``. A judge that has
``judge_with_usage`` (``LLMJudge``) has its usage and cost counted in the report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import attrs

from tether.providers import Provider, ProviderContext, TokenUsage
from tether.runtime import Candidate, Criterion, Judge, Judgement, LLMJudge

from ._dataset import Case


@runtime_checkable
class CaseJudge(Protocol):
    """An evaluator that sees the case too (``case.expected``, ``case.metadata``)."""

    async def judge_case(self, candidate: Candidate, case: Case) -> Judgement: ...


#: What ``evaluate(judges=...)`` takes: plain judges and case judges.
Evaluator = Judge | CaseJudge


class Verdict(NamedTuple):
    """One evaluator's judgement of one answer, with what judging it cost."""

    judgement: Judgement
    usage: TokenUsage | None = None
    cost_usd: float | None = None


def _one(name: str, score: float, reason: str, threshold: float = 1.0) -> Judgement:
    passed = score >= threshold
    return Judgement(
        scores={name: score},
        reasons={name: reason},
        passed=passed,
        feedback={} if passed else {name: reason},
    )


def _no_expected(name: str) -> Judgement:
    return Judgement(passed=False, error=f"{name}: the case has no 'expected' to compare with")


def _clip(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@attrs.frozen(kw_only=True)
class ExactMatch:
    """Passes when the answer equals ``expected`` (a string; another value is compared
    with its ``str``). ``strip`` ignores surrounding whitespace; ``case_sensitive=False``
    compares casefolded text. One criterion, named ``name``: 1.0 or 0.0."""

    name: str = "exact"
    strip: bool = True
    case_sensitive: bool = True

    def _norm(self, text: str) -> str:
        if self.strip:
            text = text.strip()
        return text if self.case_sensitive else text.casefold()

    async def judge_case(self, candidate: Candidate, case: Case) -> Judgement:
        if case.expected is None:
            return _no_expected(self.name)
        want = case.expected if isinstance(case.expected, str) else str(case.expected)
        if self._norm(candidate.text) == self._norm(want):
            return _one(self.name, 1.0, "the answer matches the expected text")
        return _one(
            self.name,
            0.0,
            f"expected {_clip(want)!s}, got {_clip(candidate.text)!s}",
        )


@attrs.frozen(kw_only=True)
class Contains:
    """Passes when the answer contains ``expected`` (a string, or every string of a list).

    The score is the share of expected strings found; it passes at ``threshold``
    (default 1.0: all of them). Case-insensitive unless ``case_sensitive=True``.
    """

    name: str = "contains"
    case_sensitive: bool = False
    threshold: float = 1.0

    async def judge_case(self, candidate: Candidate, case: Case) -> Judgement:
        expected = case.expected
        if expected is None:
            return _no_expected(self.name)
        wanted = [expected] if isinstance(expected, str) else expected
        if not isinstance(wanted, Sequence) or not all(isinstance(w, str) for w in wanted):
            return Judgement(
                passed=False,
                error=f"{self.name}: 'expected' must be a string or a list of strings, "
                f"got {expected!r}",
            )
        if not wanted:
            return _one(self.name, 1.0, "nothing to look for", self.threshold)
        text = candidate.text if self.case_sensitive else candidate.text.casefold()
        missing = [w for w in wanted if (w if self.case_sensitive else w.casefold()) not in text]
        score = 1.0 - len(missing) / len(wanted)
        if not missing:
            return _one(self.name, score, "the answer contains every expected text", self.threshold)
        reason = "missing " + ", ".join(json.dumps(m, ensure_ascii=False) for m in missing)
        return _one(self.name, score, reason, self.threshold)


_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)


def _parse_json(text: str) -> tuple[bool, Any]:
    """The JSON value of ``text``: the whole text, or its first fenced block."""
    for chunk in (text.strip(), *(m.group(1).strip() for m in _FENCE.finditer(text))):
        try:
            return True, json.loads(chunk)
        except ValueError:
            continue
    return False, None


@attrs.frozen(kw_only=True)
class JsonEqual:
    """Passes when the answer, read as JSON, equals ``expected`` as JSON values
    (key order and whitespace do not matter; ``1`` equals ``1.0``).

    The answer is the typed output when the agent has one (``Agent(output_type=...)``
    gives a value, compared through its JSON form), else the text: all of it, or its
    first fenced code block. An ``expected`` string is parsed as JSON when it can be.
    """

    name: str = "json_equal"

    async def judge_case(self, candidate: Candidate, case: Case) -> Judgement:
        if case.expected is None:
            return _no_expected(self.name)
        want = case.expected
        if isinstance(want, str):
            ok, parsed = _parse_json(want)
            if ok:
                want = parsed
        ok, got = _parse_json(candidate.text)
        if not ok:
            return _one(self.name, 0.0, f"the answer is not JSON: {_clip(candidate.text)}")
        if got == want:
            return _one(self.name, 1.0, "the answer equals the expected JSON")
        return _one(self.name, 0.0, f"expected {_clip(want)}, got {_clip(got)}")


REFERENCE_INSTRUCTIONS = """\

A reference answer, known to be correct, is given below. Use it as the ground truth
when you score: an answer that contradicts it is wrong, whatever its style.
<reference>
{expected}
</reference>"""


@attrs.define(eq=False)
class LLMRubric:
    """An LLM judge that scores a rubric with the case's ``expected`` as the reference answer.

    It is an :class:`~tether.LLMJudge` (same rubric, thresholds, JSON answer,
    re-ask and fail-closed rules) whose instructions carry the reference answer
    of each case; a case without ``expected`` is judged on the rubric alone.
    """

    provider: Provider
    rubric: Mapping[str, Criterion | str]
    max_tokens: int = 1024
    _judge: LLMJudge = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._judge = LLMJudge(
            provider=self.provider, rubric=self.rubric, max_tokens=self.max_tokens
        )

    async def judge_case(self, candidate: Candidate, case: Case) -> Judgement:
        return (await self.judge_case_with_usage(candidate, case, None)).judgement

    async def judge_case_with_usage(
        self, candidate: Candidate, case: Case, ctx: ProviderContext | None
    ) -> Verdict:
        """Judge with the reference, and report the usage and cost of the judge's calls."""
        judge = self._judge
        if case.expected is not None:
            expected = (
                case.expected
                if isinstance(case.expected, str)
                else json.dumps(case.expected, ensure_ascii=False)
            )
            judge = attrs.evolve(
                judge,
                instructions=judge.instructions + REFERENCE_INSTRUCTIONS.format(expected=expected),
            )
        if ctx is None:
            ctx = ProviderContext(run_id=f"eval-{case.id}", call_index=0)
        call = await judge.judge_with_usage(candidate, ctx)
        return Verdict(call.judgement, call.usage, call.cost_usd)


async def apply(judge: Any, candidate: Candidate, case: Case, ctx: ProviderContext) -> Verdict:
    """Ask one evaluator about one answer; a judge that raises fails closed."""
    try:
        verdict: Verdict
        if hasattr(judge, "judge_case_with_usage"):
            verdict = Verdict(*await judge.judge_case_with_usage(candidate, case, ctx))
        elif hasattr(judge, "judge_case"):
            verdict = Verdict(await judge.judge_case(candidate, case))
        elif hasattr(judge, "judge_with_usage"):
            call = await judge.judge_with_usage(candidate, ctx)
            verdict = Verdict(call[0], call[1], call[2])
        else:
            verdict = Verdict(await judge.judge(candidate))
        if not isinstance(verdict.judgement, Judgement):
            raise TypeError(f"judge returned {verdict.judgement!r}; want a Judgement")
    except Exception as exc:
        return Verdict(Judgement(passed=False, error=f"judge failed: {type(exc).__name__}: {exc}"))
    return verdict


def check_judges(judges: Any) -> dict[str, Any]:
    """``judges`` (a sequence, or a mapping of names) as named evaluators; a clear error
    for anything that is not one."""
    if isinstance(judges, Mapping):
        items = list(judges.items())
    elif isinstance(judges, str | bytes) or not isinstance(judges, Sequence):
        raise TypeError(f"judges must be a list of judges or a dict of them, got {judges!r}")
    else:
        items = [(None, j) for j in judges]
    named: dict[str, Any] = {}
    for given, judge in items:
        if not (hasattr(judge, "judge_case") or hasattr(judge, "judge")):
            raise TypeError(
                f"{judge!r} is not a judge: want an object with async judge(candidate) "
                "or judge_case(candidate, case)"
            )
        name = given if given is not None else _default_name(judge)
        if not isinstance(name, str) or not name:
            raise ValueError(f"judge names must be non-empty strings, got {name!r}")
        base, n = name, 1
        while name in named:
            n += 1
            name = f"{base}#{n}"
        named[name] = judge
    return named


def _default_name(judge: Any) -> str:
    name = getattr(judge, "name", None)
    if isinstance(name, str) and name:
        return name
    return type(judge).__name__
