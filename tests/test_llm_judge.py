from __future__ import annotations

import json
from typing import Any

import pytest

from tether.providers import (
    Fault,
    ModelRequest,
    Price,
    ProviderContext,
    RateLimited,
    Reply,
    ScriptedProvider,
    TokenUsage,
)
from tether.runtime import Candidate, Judge
from tether.runtime._llm_judge import Criterion, LLMJudge

pytestmark = pytest.mark.anyio

CANDIDATE = Candidate(
    text="Paris is the capital of France.", question="Capital of France?", round=1
)
RUBRIC: dict[str, Criterion | str] = {
    "accuracy": "The answer is factually correct.",
    "sources": Criterion(description="The answer cites a source.", threshold=0.5),
}


def verdict(**criteria: tuple[Any, str]) -> str:
    return json.dumps(
        {"criteria": {name: {"score": s, "reason": r} for name, (s, r) in criteria.items()}}
    )


GOOD = verdict(accuracy=(0.9, "correct"), sources=(0.8, "cites an atlas"))


def make(*replies: str | Reply, price: Price | None = None) -> tuple[LLMJudge, ScriptedProvider]:
    script = [r if isinstance(r, Reply) else Reply(text=r) for r in replies]
    provider = ScriptedProvider(script, record=True, cost_per_mtok=price)
    return LLMJudge(provider=provider, rubric=RUBRIC), provider


def user_texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.role == "user"]


async def test_passing_json() -> None:
    """Every criterion at or above its threshold passes with scores, reasons and no feedback."""
    judge, provider = make(GOOD)
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is True
    assert judgement.error is None
    assert dict(judgement.scores) == {"accuracy": 0.9, "sources": 0.8}
    assert dict(judgement.reasons) == {"accuracy": "correct", "sources": "cites an atlas"}
    assert dict(judgement.feedback) == {}
    assert len(provider.requests) == 1


async def test_request_shape() -> None:
    """One request: instructions as system, one user message with question, answer and rubric."""
    judge, provider = make(GOOD)
    await judge.judge(CANDIDATE)
    [(ctx, request)] = provider.requests
    assert ctx.call_index == 0
    assert request.system == judge.instructions
    assert request.max_tokens == 1024
    assert request.tools == ()
    [message] = request.messages
    assert message.role == "user"
    for part in (CANDIDATE.question, CANDIDATE.text, "accuracy", "The answer cites a source."):
        assert part in message.text
    assert '"criteria"' in message.text


async def test_failing_one_criterion() -> None:
    """A criterion under its threshold fails the candidate; feedback holds only its reason."""
    judge, _ = make(verdict(accuracy=(0.95, "correct"), sources=(0.2, "no source given")))
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is False
    assert judgement.error is None
    assert dict(judgement.feedback) == {"sources": "no source given"}
    assert judgement.score == 0.2


async def test_threshold_boundary_and_default() -> None:
    """A string criterion uses threshold 0.7; reaching it exactly passes."""
    judge, _ = make(verdict(accuracy=(0.7, "ok"), sources=(0.5, "ok")))
    assert (await judge.judge(CANDIDATE)).passed is True
    judge, _ = make(verdict(accuracy=(0.69, "almost"), sources=(1, "ok")))
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is False
    assert dict(judgement.feedback) == {"accuracy": "almost"}


async def test_fenced_json() -> None:
    """JSON inside a code fence, with prose around it, is accepted."""
    judge, provider = make(f"Here is my verdict:\n```json\n{GOOD}\n```\nHope this helps.")
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is True
    assert len(provider.requests) == 1


async def test_object_inside_prose() -> None:
    """An unfenced object surrounded by prose is found."""
    judge, provider = make(f"Sure. {GOOD} That is all {{really}}.")
    judgement = await judge.judge(CANDIDATE)
    assert dict(judgement.scores) == {"accuracy": 0.9, "sources": 0.8}
    assert len(provider.requests) == 1


async def test_malformed_then_good() -> None:
    """Malformed output gets one re-ask saying what was wrong; a good second reply is used."""
    judge, provider = make("I think it is fine.", GOOD)
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is True
    assert judgement.error is None
    assert len(provider.requests) == 2
    ctx, request = provider.requests[1]
    assert ctx.call_index == 1
    assert [m.role for m in request.messages] == ["user", "assistant", "user"]
    assert request.messages[1].text == "I think it is fine."
    reask = request.messages[2].text
    assert "not a JSON object" in reask
    assert '"criteria"' in reask


async def test_malformed_twice_fails_closed() -> None:
    """Two malformed replies: not passed, error set, no feedback, exactly 2 requests."""
    judge, provider = make("nope", "still nope")
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is False
    assert judgement.error is not None
    assert judgement.error.startswith("judge output malformed: ")
    assert dict(judgement.feedback) == {}
    assert dict(judgement.scores) == {}
    assert len(provider.requests) == 2


async def test_score_out_of_range() -> None:
    """A score outside [0, 1] is malformed; the re-ask names it; twice keeps the valid scores."""
    bad = verdict(accuracy=(7, "great"), sources=(0.9, "cited"))
    judge, provider = make(bad, bad)
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is False
    assert judgement.error is not None
    assert "accuracy" in judgement.error
    assert "outside [0, 1]" in judgement.error
    assert dict(judgement.scores) == {"sources": 0.9}
    assert len(provider.requests) == 2
    assert "outside [0, 1]" in user_texts(provider.requests[1][1])[-1]


async def test_non_numeric_score() -> None:
    """A boolean or string score is malformed."""
    judge, _ = make(
        verdict(accuracy=(True, "yes"), sources=(0.9, "x")),
        verdict(accuracy=("high", "yes"), sources=(0.9, "x")),
    )
    judgement = await judge.judge(CANDIDATE)
    assert judgement.error is not None
    assert "no numeric score" in judgement.error


async def test_missing_criterion() -> None:
    """A missing criterion is malformed; the re-ask names it; a complete reply then passes."""
    judge, provider = make(verdict(accuracy=(0.9, "correct")), GOOD)
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is True
    assert len(provider.requests) == 2
    assert 'criterion "sources" is missing' in user_texts(provider.requests[1][1])[-1]


async def test_missing_criterion_twice() -> None:
    """A criterion missing twice fails closed, naming it in the error."""
    partial = verdict(accuracy=(0.9, "correct"))
    judge, _ = make(partial, partial)
    judgement = await judge.judge(CANDIDATE)
    assert judgement.passed is False
    assert judgement.error is not None
    assert '"sources" is missing' in judgement.error
    assert dict(judgement.scores) == {"accuracy": 0.9}


async def test_usage_summed_over_both_calls() -> None:
    """judge_with_usage sums usage over the re-ask and counts the requests."""
    judge, _ = make(
        Reply(text="garbage", usage=TokenUsage(input_tokens=100, output_tokens=5)),
        Reply(text=GOOD, usage=TokenUsage(input_tokens=130, output_tokens=40)),
    )
    ctx = ProviderContext(run_id="run-1", call_index=0)
    judgement, usage, cost, requests = await judge.judge_with_usage(CANDIDATE, ctx)
    assert judgement.passed is True
    assert usage == TokenUsage(input_tokens=230, output_tokens=45)
    assert cost is None
    assert requests == 2


async def test_cost_unpriced_and_priced() -> None:
    """Cost is None for an unpriced provider and Price.cost(usage) for a priced one."""
    usage = TokenUsage(input_tokens=1_000, output_tokens=200)
    judge, _ = make(Reply(text=GOOD, usage=usage))
    call = await judge.judge_with_usage(CANDIDATE, ProviderContext(run_id="r", call_index=0))
    assert call.cost_usd is None
    price = Price(input=3.0, output=15.0)
    judge, _ = make(Reply(text=GOOD, usage=usage), price=price)
    call = await judge.judge_with_usage(CANDIDATE, ProviderContext(run_id="r", call_index=0))
    assert call.cost_usd == pytest.approx(price.cost(usage))
    assert call.cost_usd == pytest.approx((1_000 * 3.0 + 200 * 15.0) / 1_000_000)
    assert call.requests == 1


async def test_context_passed_through() -> None:
    """judge_with_usage sends the caller's run id and call_index, and call_index + 1 on a re-ask."""
    seen: list[tuple[str, int]] = []

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        seen.append((ctx.run_id, ctx.call_index))
        return Reply(text="?" if len(seen) == 1 else GOOD)

    judge = LLMJudge(provider=ScriptedProvider(script), rubric=RUBRIC)
    call = await judge.judge_with_usage(CANDIDATE, ProviderContext(run_id="run-7", call_index=4))
    assert call.judgement.passed is True
    assert seen == [("run-7", 4), ("run-7", 5)]


async def test_provider_error_propagates() -> None:
    """A provider error is not swallowed: the caller decides."""
    provider = ScriptedProvider([Fault(error=RateLimited("slow down", status=429))])
    judge = LLMJudge(provider=provider, rubric=RUBRIC)
    with pytest.raises(RateLimited):
        await judge.judge(CANDIDATE)


async def test_is_a_judge() -> None:
    """LLMJudge satisfies the Judge protocol."""
    judge, _ = make(GOOD)
    assert isinstance(judge, Judge)


def test_rubric_validation() -> None:
    """Bad rubrics are refused at construction."""
    provider = ScriptedProvider([])
    with pytest.raises(ValueError, match="at least one criterion"):
        LLMJudge(provider=provider, rubric={})
    with pytest.raises(ValueError, match=r"threshold must be a number in \[0, 1\]"):
        Criterion(description="x", threshold=1.5)
    with pytest.raises(ValueError, match=r"threshold must be a number in \[0, 1\]"):
        Criterion(description="x", threshold=-0.1)
    with pytest.raises(TypeError, match="must be a Criterion or a description"):
        LLMJudge(provider=provider, rubric={"a": 0.5})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="empty description"):
        LLMJudge(provider=provider, rubric={"a": "  "})
    with pytest.raises(ValueError, match="max_tokens"):
        LLMJudge(provider=provider, rubric={"a": "x"}, max_tokens=0)
    judge = LLMJudge(provider=provider, rubric={"a": "x"})
    assert judge.criteria == {"a": Criterion(description="x", threshold=0.7)}
