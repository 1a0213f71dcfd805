"""The round: its order, the three meanings of "again", round-scoped truth, stop reasons."""

from __future__ import annotations

import pytest

import tether
from tether import events as ev
from tether.providers import (
    Fault,
    Message,
    Overloaded,
    RateLimited,
    Reply,
    ScriptedProvider,
    ServerError,
    StopReason,
    ToolCall,
    ToolResultBlock,
)

from .helpers import kinds, of, run, stages, transitions

pytestmark = pytest.mark.anyio

calls: list[str] = []


@tether.tool
async def lookup(topic: str) -> str:
    """Look a topic up."""
    calls.append(topic)
    return f"facts about {topic}"


@tether.tool(terminal=True)
async def finish(summary: str) -> str:
    """Deliver the final summary."""
    return f"delivered: {summary}"


@tether.tool(terminal=True)
async def broken_finish(summary: str) -> str:
    """A terminal tool that fails."""
    raise tether.ToolError("the outbox is full")


def long_enough(candidate: tether.Candidate) -> tuple[float, str]:
    return (1.0, "ok") if len(candidate.text) >= 20 else (0.2, "too short; give details")


def agent(script: list[Reply | Fault], **kwargs: object) -> tether.Agent:
    kwargs.setdefault("tools", [lookup, finish, broken_finish])
    return tether.Agent(
        name="tester",
        provider=ScriptedProvider(script, record=True),
        **kwargs,  # type: ignore[arg-type]
    )


def requests(a: tether.Agent) -> int:
    assert isinstance(a.provider, ScriptedProvider)
    return len(a.provider.requests)


async def test_round_order_is_the_contract() -> None:
    """Preparation, then context → model → policy → execute → judge → decide, by events."""
    a = agent(
        [
            Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": "x"})]),
            Reply(text="a" * 30),
        ],
        judge=tether.RuleJudge({"long": long_enough}),
        policies=[lambda point, subject: None],
    )
    result = await run(a)
    prep = [e.stage for e in of(result.events, ev.StageEntered) if e.round == 0]
    assert prep == ["input", "memory", "tools"]
    assert stages(result, 1) == ["context", "model", "policy", "execute", "decide"]
    assert stages(result, 2) == ["context", "model", "policy", "judge", "decide", "finalize"]
    round1 = [k for k, e in zip(kinds(result.events), result.events, strict=True) if e.round == 1]
    assert round1.index("ModelCallFinished") < round1.index("ToolCallStarted")
    assert round1.index("ToolCallFinished") < round1.index("Transition")
    assert kinds(result.events)[0] == "RunStarted"
    assert kinds(result.events)[-1] == "RunFinished"
    assert transitions(result) == [("continue", "tool_use"), ("complete", "answered")]
    for entered, exited in zip(
        of(result.events, ev.StageEntered), of(result.events, ev.StageExited), strict=True
    ):
        assert entered.stage == exited.stage


async def test_transient_provider_error_is_one_logical_response() -> None:
    """A provider retry resends the same request; steps stay at one, attempts count both."""
    a = agent(
        [Fault(error=ServerError("boom", status=503)), Reply(text="fine")],
        limits=tether.Limits(max_provider_attempts=3),
    )
    result = await run(a)
    assert result.termination is tether.Termination.ANSWERED
    assert result.usage.steps == 1
    assert result.usage.model_calls == 1
    assert result.usage.provider_attempts == 2
    assert len(of(result.events, ev.ModelCallFinished)) == 1
    retry = of(result.events, ev.ProviderRetry)
    assert [(r.error_type, r.attempt) for r in retry] == [("server_error", 1)]
    assert [s.attempt for s in of(result.events, ev.ModelCallStarted)] == [1, 2]
    assert isinstance(a.provider, ScriptedProvider)
    first, second = (req for _, req in a.provider.requests)
    assert first == second, "a retry resends the identical request"


async def test_provider_attempts_exhausted_ends_provider_failed() -> None:
    """When attempts run out the run ends provider_failed with the last error; no empty answer."""
    a = agent(
        [Fault(error=Overloaded("busy", status=529))] * 3,
        limits=tether.Limits(max_provider_attempts=3),
    )
    result = await run(a)
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.output is None
    assert result.usage.provider_attempts == 3
    assert result.usage.steps == 0
    assert not of(result.events, ev.ModelCallFinished)
    assert len(of(result.events, ev.ProviderRetry)) == 2
    assert result.error is not None
    assert "Overloaded" in result.error
    assert "busy" in result.error


async def test_fatal_provider_error_is_not_retried() -> None:
    """A fatal provider error ends the run at once."""
    from tether.providers import AuthenticationFailed

    a = agent([Fault(error=AuthenticationFailed("bad key", status=401)), Reply(text="never")])
    result = await run(a)
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.usage.provider_attempts == 1
    assert not of(result.events, ev.ProviderRetry)


async def test_rate_limit_retry_after_is_honoured() -> None:
    """The backoff wait is at least the server's retry-after."""
    a = agent([Fault(error=RateLimited("slow", status=429, retry_after=0.05)), Reply(text="ok")])
    result = await run(a)
    (retry,) = of(result.events, ev.ProviderRetry)
    assert retry.wait_s >= 0.05
    assert result.termination is tether.Termination.ANSWERED


async def test_tool_round_consumes_no_quality_retry() -> None:
    """Using tools three times is continue, never retry."""
    script = [
        Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": f"t{i}"})]) for i in range(3)
    ]
    a = agent(
        [*script, Reply(text="a detailed enough answer")],
        judge=tether.RuleJudge({"long": long_enough}),
    )
    result = await run(a)
    assert result.termination is tether.Termination.ANSWERED
    assert result.usage.quality_retries == 0
    assert result.usage.steps == 4
    assert [k for k, _ in transitions(result)] == ["continue", "continue", "continue", "complete"]
    assert len(of(result.events, ev.Judged)) == 1, "tool-only rounds are not judged"


async def test_quality_retry_carries_feedback_and_clears_the_score() -> None:
    """A failed judgement retries with the feedback as input; the new candidate is judged fresh."""
    a = agent(
        [Reply(text="short"), Reply(text="a much longer and detailed answer")],
        judge=tether.RuleJudge({"long": long_enough}),
    )
    result = await run(a, "explain")
    assert transitions(result) == [("retry", "judgement_failed"), ("complete", "answered")]
    judged = of(result.events, ev.Judged)
    assert [(j.passed, j.candidate_round) for j in judged] == [(False, 1), (True, 2)]
    assert judged[0].feedback == {"long": "too short; give details"}
    assert result.usage.quality_retries == 1
    assert result.passed is True
    assert result.judgement is not None
    assert result.judgement.scores == {"long": 1.0}
    assert isinstance(a.provider, ScriptedProvider)
    second_request = a.provider.requests[1][1]
    last = second_request.messages[-1]
    assert last.role == "user"
    assert "too short; give details" in last.text
    assert "tools" in last.text, "feedback never forbids tools"


async def test_quality_exhausted_keeps_last_candidate_and_judgement() -> None:
    """At the retry cap the run ends quality_exhausted with the last candidate, passed false."""
    a = agent(
        [Reply(text="no"), Reply(text="nope"), Reply(text="still")],
        judge=tether.RuleJudge({"long": long_enough}),
        limits=tether.Limits(max_quality_retries=2),
    )
    result = await run(a)
    assert result.termination is tether.Termination.QUALITY_EXHAUSTED
    assert result.output == "still"
    assert result.passed is False
    assert result.judgement is not None
    assert result.judgement.feedback == {"long": "too short; give details"}
    assert result.usage.quality_retries == 2
    assert len(of(result.events, ev.Judged)) == 3


async def test_retry_round_with_tools_produces_a_new_candidate() -> None:
    """After a failed judgement, a tool round is not judged; the next answer is judged fresh."""
    a = agent(
        [
            Reply(text="short"),
            Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": "more"})]),
            Reply(text="a better answer with the facts found"),
        ],
        judge=tether.RuleJudge({"long": long_enough}),
    )
    result = await run(a)
    assert transitions(result) == [
        ("retry", "judgement_failed"),
        ("continue", "tool_use"),
        ("complete", "answered"),
    ]
    judged = of(result.events, ev.Judged)
    assert [j.candidate_round for j in judged] == [1, 3]
    assert result.output == "a better answer with the facts found"


async def test_terminal_tool_ends_the_run_without_another_model_call() -> None:
    """A terminal tool requested and succeeding in this round completes the run."""
    a = agent([Reply(tool_calls=[ToolCall(name="finish", arguments={"summary": "done"})])])
    result = await run(a)
    assert result.termination is tether.Termination.TERMINAL_TOOL
    assert result.output == '"delivered: done"' or result.output == "delivered: done"
    assert requests(a) == 1


async def test_failing_terminal_tool_is_not_completion() -> None:
    """A terminal tool that fails gives an error result and the run goes on."""
    a = agent(
        [
            Reply(tool_calls=[ToolCall(name="broken_finish", arguments={"summary": "x"})]),
            Reply(text="could not deliver"),
        ]
    )
    result = await run(a)
    assert result.termination is tether.Termination.ANSWERED
    (done,) = of(result.events, ev.ToolCallFinished)
    assert done.outcome == "model_error"
    assert requests(a) == 2


async def test_past_terminal_record_does_not_end_a_round() -> None:
    """A terminal tool from an earlier round never ends a later round."""
    a = agent(
        [
            Reply(
                tool_calls=[
                    ToolCall(name="broken_finish", arguments={"summary": "x"}),
                    ToolCall(name="lookup", arguments={"topic": "a"}),
                ]
            ),
            Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": "b"})]),
            Reply(text="answer"),
        ]
    )
    result = await run(a)
    assert result.termination is tether.Termination.ANSWERED
    assert requests(a) == 3


async def test_tool_only_round_has_no_candidate() -> None:
    """A response that asks for tools is progress, not an insufficient answer."""
    a = agent(
        [
            Reply(
                text="let me check", tool_calls=[ToolCall(name="lookup", arguments={"topic": "z"})]
            ),
            Reply(text="a complete and long answer"),
        ],
        judge=tether.RuleJudge({"long": long_enough}),
    )
    result = await run(a)
    assert [j.candidate_round for j in of(result.events, ev.Judged)] == [2]


async def test_max_steps_ends_the_run() -> None:
    """A model that keeps calling tools stops at max_steps, with a CeilingHit."""
    script = [
        Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": f"t{i}"})]) for i in range(10)
    ]
    a = agent(script, limits=tether.Limits(max_steps=3))
    result = await run(a)
    assert result.termination is tether.Termination.MAX_STEPS
    assert result.usage.steps == 3
    assert requests(a) == 3
    (hit,) = of(result.events, ev.CeilingHit)
    assert (hit.ceiling, hit.limit, hit.used) == ("max_steps", 3, 3)


# ---------------------------------------------------------------- stop reasons


async def test_max_tokens_without_tool_call_continues_the_text() -> None:
    """max_tokens with text only continues; the pieces join into one answer."""
    a = agent(
        [
            Reply(text="The first half, ", stop_reason=StopReason.MAX_TOKENS),
            Reply(text="and the second half."),
        ]
    )
    result = await run(a)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The first half, and the second half."
    assert result.usage.continues == 1
    assert result.usage.steps == 2
    assert transitions(result)[0] == ("continue", "max_tokens")


async def test_max_tokens_cap_ends_max_continues() -> None:
    """Past max_continues the run ends max_continues with the text so far."""
    a = agent(
        [Reply(text=f"part{i} ", stop_reason=StopReason.MAX_TOKENS) for i in range(5)],
        limits=tether.Limits(max_continues=2),
    )
    result = await run(a)
    assert result.termination is tether.Termination.MAX_CONTINUES
    assert result.usage.continues == 2
    assert result.output == "part0 part1 part2 "


async def test_max_tokens_inside_a_tool_call_is_never_run() -> None:
    """A tool call cut off by max_tokens ends truncated_tool_call; the tool never runs."""
    calls.clear()
    a = agent(
        [
            Reply(
                tool_calls=[ToolCall(name="lookup", arguments={"topic": "cut"})],
                stop_reason=StopReason.MAX_TOKENS,
            )
        ]
    )
    result = await run(a)
    assert result.termination is tether.Termination.TRUNCATED_TOOL_CALL
    assert calls == []
    assert not of(result.events, ev.ToolCallStarted)


async def test_pause_turn_resumes_and_counts_a_step() -> None:
    """pause_turn sends the content back and resumes; it counts a step."""
    a = agent([Reply(text="thinking...", stop_reason=StopReason.PAUSE_TURN), Reply(text="done")])
    result = await run(a)
    assert result.termination is tether.Termination.ANSWERED
    assert result.usage.steps == 2
    assert transitions(result)[0] == ("continue", "pause_turn")
    assert isinstance(a.provider, ScriptedProvider)
    resumed = a.provider.requests[1][1]
    assert resumed.messages[-1] == Message(role="assistant", content=resumed.messages[-1].content)
    assert resumed.messages[-1].text == "thinking..."


async def test_refusal_ends_refusal() -> None:
    """A refusal ends the run refusal, with no answer."""
    a = agent([Reply(text="I can't help with that.", stop_reason=StopReason.REFUSAL)])
    result = await run(a)
    assert result.termination is tether.Termination.REFUSAL
    assert result.output is None
    assert not result.termination.ok


@pytest.mark.parametrize(
    ("strategy", "expected", "models"),
    [
        (tether.KeepAll(), tether.Termination.CONTEXT_EXCEEDED, 4),
        (tether.TruncateOldest(keep_last=2), tether.Termination.ANSWERED, 5),
    ],
)
async def test_context_window_exceeded(
    strategy: object, expected: tether.Termination, models: int
) -> None:
    """Trim once with the context strategy and continue, or end context_exceeded."""
    script: list[Reply | Fault] = [
        Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": f"t{i}"})]) for i in range(3)
    ]
    script += [
        Reply(stop_reason=StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED),
        Reply(text="answer after trimming"),
    ]
    a = agent(script, context=strategy)
    result = await run(a, "question")
    assert result.termination is expected
    assert requests(a) == models
    if expected is tether.Termination.ANSWERED:
        assert isinstance(a.provider, ScriptedProvider)
        trimmed = a.provider.requests[-1][1].messages
        assert trimmed[0].text == "question"
        assert len(trimmed) == 3
        assert trimmed[1].role == "assistant"
        # Every tool_result kept still has its tool_use.
        uses = {b.id for m in trimmed for b in m.content if hasattr(b, "name")}
        for m in trimmed:
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    assert b.tool_use_id in uses


async def test_context_exceeded_twice_ends_the_run() -> None:
    """The context strategy trims once per run; a second overflow ends the run."""
    script: list[Reply | Fault] = [
        Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": f"t{i}"})]) for i in range(4)
    ]
    script += [Reply(stop_reason=StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED)] * 2
    a = agent(script, context=tether.TruncateOldest(keep_last=2))
    result = await run(a)
    assert result.termination is tether.Termination.CONTEXT_EXCEEDED


async def test_unknown_stop_reason_ends_without_looping() -> None:
    """An unknown stop reason ends unknown_stop_reason after one call."""
    a = agent([Reply(text="?", stop_reason=StopReason.UNKNOWN, raw_stop_reason="galaxy_brain")] * 3)
    result = await run(a)
    assert result.termination is tether.Termination.UNKNOWN_STOP_REASON
    assert requests(a) == 1
    assert result.error is not None
    assert "galaxy_brain" in result.error


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("end_turn", StopReason.END_TURN),
        ("stop_sequence", StopReason.STOP_SEQUENCE),
        ("tool_use", StopReason.TOOL_USE),
        ("max_tokens", StopReason.MAX_TOKENS),
        ("pause_turn", StopReason.PAUSE_TURN),
        ("refusal", StopReason.REFUSAL),
        ("model_context_window_exceeded", StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED),
        ("stop", StopReason.END_TURN),
        ("tool_calls", StopReason.TOOL_USE),
        ("length", StopReason.MAX_TOKENS),
        ("content_filter", StopReason.REFUSAL),
        ("something_new", StopReason.UNKNOWN),
        (None, StopReason.UNKNOWN),
    ],
)
def test_stop_reason_mapping(raw: str | None, expected: StopReason) -> None:
    """Anthropic and OpenAI stop values normalize as docs/concepts/round.md's table says."""
    assert StopReason.parse(raw) is expected


async def test_stop_sequence_is_a_candidate() -> None:
    """stop_sequence is judged like end_turn."""
    a = agent(
        [Reply(text="a long enough final answer here", stop_reason=StopReason.STOP_SEQUENCE)],
        judge=tether.RuleJudge({"long": long_enough}),
    )
    result = await run(a)
    assert result.termination is tether.Termination.ANSWERED
    assert result.passed is True


async def test_summary_line_shows_the_path() -> None:
    """summary() is one line naming each stage the run went through."""
    a = agent(
        [
            Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": "q"})]),
            Reply(text="short"),
            Reply(text="a long and well supported answer"),
        ],
        judge=tether.RuleJudge({"long": long_enough}),
    )
    result = await run(a)
    assert (
        result.summary()
        == "Model → Tools(1) → Model → Judge(0.20 ✗) → Model → Judge(1.00 ✓) → answered"
    )


async def test_summary_marks_a_failed_model_call() -> None:
    """A call that never answered shows as Model(✗), its retries counted."""
    from tether.providers import InvalidRequest

    a = agent([Fault(error=ServerError("x", status=500)), Fault(error=InvalidRequest("bad"))])
    result = await run(a)
    assert result.summary() == "Model(retry×1 ✗) → provider_failed"


async def test_summary_puts_a_ceiling_after_the_cut_call() -> None:
    """A stream cut at a ceiling shows the call, then the ceiling."""
    a = tether.Agent(
        name="cut",
        provider=ScriptedProvider(
            [Reply(text="word " * 100)], chunk_size=8, honor_max_tokens=False
        ),
        limits=tether.Limits(max_total_tokens=10),
    )
    result = await run(a)
    assert result.summary() == "Model(✗) → Ceiling(max_total_tokens) → token_ceiling"
