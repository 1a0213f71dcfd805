"""The context bound before every request: the strategy, the window, the running estimate."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether
from tether import events as ev
from tether.providers import (
    AnthropicProvider,
    Message,
    ModelRequest,
    OpenAIProvider,
    Reply,
    ScriptedProvider,
    StopReason,
    TextBlock,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    context_window_for,
)
from tether.runtime import _transcript
from tether.runtime._estimate import estimate_input, estimate_message, estimate_overhead
from tether.runtime._history import check_history

from .helpers import add, assert_consistent, of

pytestmark = pytest.mark.anyio


def turn(i: int) -> tuple[Message, ...]:
    """One old exchange with a tool call, about 100 estimated tokens."""
    pad = "x" * 300
    return (
        Message.user(f"question {i} {pad}"),
        Message(role="assistant", content=(ToolUseBlock(id=f"h{i}", name="add", input={"a": i}),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id=f"h{i}", content=str(i)),)),
        Message(role="assistant", content=(TextBlock(text=f"answer {i} {pad}"),)),
    )


HISTORY = tuple(m for i in range(10) for m in turn(i))


def agent(window: int | None, **kwargs: Any) -> tether.Agent:
    provider = ScriptedProvider(
        kwargs.pop("script", [Reply(text="fine")]), record=True, context_window=window
    )
    kwargs.setdefault("context", tether.TruncateOldest())
    return tether.Agent(name="w", provider=provider, **kwargs)


def sent(a: tether.Agent) -> list[tuple[Message, ...]]:
    assert isinstance(a.provider, ScriptedProvider)
    return [req.messages for _, req in a.provider.requests]


async def test_a_long_history_is_bounded_before_the_request() -> None:
    """Past the window, old exchanges are dropped before sending; pairs and the question stay."""
    a = agent(600)
    async with tether.Runtime() as rt:
        result = await rt.run(a, "and now?", history=HISTORY)
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    (request,) = [req for _, req in a.provider.requests]  # type: ignore[attr-defined]
    assert estimate_input(request) <= 600
    assert request.messages[0] == HISTORY[0]
    assert request.messages[-1] == Message.user("and now?")
    assert len(request.messages) < len(HISTORY) + 1
    check_history(request.messages)
    (bounded,) = of(result.events, ev.ContextBounded)
    assert bounded.window == 600
    assert bounded.tokens_after <= bounded.budget < bounded.tokens_before
    assert (bounded.messages_before, bounded.messages_after) == (
        len(HISTORY) + 1,
        len(request.messages),
    )
    # What the model saw was bounded; the transcript is whole.
    assert result.messages == (*HISTORY, Message.user("and now?"), Message.assistant("fine"))


async def test_a_bounded_conversation_keeps_every_message_in_the_store() -> None:
    """A conversation bounded for the model still appends its new messages to the whole."""
    store = tether.InMemoryConversationStore()
    await store.append("c", HISTORY)
    a = agent(600)
    async with tether.Runtime(conversations=store) as rt:
        result = await rt.run(a, "and now?", conversation="c")
    assert of(result.events, ev.ContextBounded)
    assert await store.load("c") == [*HISTORY, Message.user("and now?"), Message.assistant("fine")]


async def test_the_bound_applies_again_as_the_run_grows() -> None:
    """Tool rounds that outgrow the window are bounded round after round, pairs intact."""
    big = "y" * 800
    script = [
        Reply(text=big, tool_calls=[ToolCall(name="add", arguments={"a": i, "b": 1})])
        for i in range(4)
    ] + [Reply(text="done")]
    a = agent(500, script=script, tools=[add])
    async with tether.Runtime() as rt:
        result = await rt.run(a, "go")
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    assert len(of(result.events, ev.ContextBounded)) >= 2
    for messages in sent(a):
        assert messages[0] == Message.user("go")
        check_history(messages)
    assert len(result.messages) == 1 + 2 * 4 + 1


async def test_keep_all_never_bounds() -> None:
    """KeepAll sends the whole history even past the window: the provider decides."""
    a = agent(600, context=tether.KeepAll())
    async with tether.Runtime() as rt:
        result = await rt.run(a, "and now?", history=HISTORY)
    assert not of(result.events, ev.ContextBounded)
    assert sent(a)[0] == (*HISTORY, Message.user("and now?"))


async def test_a_transcript_below_the_window_is_estimated_once_per_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Far below the window, each message is estimated once, not the transcript every round."""
    counted: list[Message] = []
    real = _transcript.estimate_message

    def counting(message: Message) -> int:
        counted.append(message)
        return real(message)

    monkeypatch.setattr(_transcript, "estimate_message", counting)
    overheads: list[object] = []
    real_overhead = _transcript.estimate_overhead

    def counting_overhead(request: Any) -> int:
        overheads.append(request)
        return real_overhead(request)

    monkeypatch.setattr(_transcript, "estimate_overhead", counting_overhead)
    script = [
        Reply(tool_calls=[ToolCall(name="add", arguments={"a": i, "b": 1})]) for i in range(5)
    ]
    a = agent(1_000_000, script=[*script, Reply(text="done")], tools=[add])
    async with tether.Runtime() as rt:
        result = await rt.run(a, "go", history=HISTORY)
    assert result.termination is tether.Termination.ANSWERED
    assert len(counted) == len(result.messages)
    assert len({id(m) for m in counted}) == len(counted)
    assert len(overheads) == 1  # the system prompt and tools: once, not every round


def test_a_run_without_window_history_or_trimming_gets_no_transcript() -> None:
    """The default agent on an unknown model has no Transcript: its round loop pays nothing."""
    plain = tether.Agent(name="p", provider=ScriptedProvider([Reply(text="x")]))
    assert _transcript.Transcript.of(plain) is None
    assert _transcript.Transcript.of(agent(1000)) is not None


async def test_a_refusal_trim_keeps_the_transcript_whole() -> None:
    """After the on-refusal trim, RunResult.messages still has every message."""
    a = agent(
        None,
        script=[Reply(stop_reason=StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED), Reply(text="fine")],
        context=tether.TruncateOldest(keep_last=2),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(a, "and now?", history=HISTORY)
    assert result.termination is tether.Termination.ANSWERED
    assert len(sent(a)[1]) < len(sent(a)[0])
    assert result.messages == (*HISTORY, Message.user("and now?"), Message.assistant("fine"))
    check_history(result.messages)


def test_known_models_carry_their_window() -> None:
    """The price table gives known models their window; unknown ones have none; it can be set."""
    assert context_window_for("claude-sonnet-4-5-20250929") == 200_000
    assert context_window_for("gpt-4o-2024-08-06") == 128_000
    assert context_window_for("my-local-llama") is None
    claude = AnthropicProvider("claude-sonnet-4-5", api_key="k")
    assert claude.context_window == 200_000
    local = OpenAIProvider("llama3.1", base_url="http://127.0.0.1:1/v1")
    assert local.context_window is None
    assert (
        OpenAIProvider(
            "llama3.1", base_url="http://127.0.0.1:1/v1", context_window=8192
        ).context_window
        == 8192
    )
    with pytest.raises(ValueError, match="context_window"):
        OpenAIProvider("llama3.1", base_url="http://127.0.0.1:1/v1", context_window=0)


def test_the_running_estimate_adds_up_to_the_request_estimate() -> None:
    """Per-message estimates plus the system and tools make exactly the request's estimate."""
    request = ModelRequest(
        system="be brief",
        messages=HISTORY,
        tools=(add.definition(),),
        max_tokens=100,
    )
    parts = sum(estimate_message(m) for m in HISTORY) + estimate_overhead(request)
    assert parts == estimate_input(request)


@st.composite
def transcripts(draw: st.DrawFn) -> list[Message]:
    """Valid transcripts: turns of a question, tool rounds (1-3 calls each), an answer."""
    messages: list[Message] = []
    for t in range(draw(st.integers(1, 6))):
        messages.append(Message.user("q" * draw(st.integers(1, 200))))
        for r in range(draw(st.integers(0, 3))):
            ids = [f"c{t}_{r}_{i}" for i in range(draw(st.integers(1, 3)))]
            calls = tuple(ToolUseBlock(id=i, name="add", input={"a": 1}) for i in ids)
            messages.append(Message(role="assistant", content=calls))
            results = tuple(ToolResultBlock(tool_use_id=i, content="r" * 40) for i in ids)
            messages.append(Message(role="user", content=results))
        messages.append(Message.assistant("a" * draw(st.integers(0, 200))))
    return messages


@given(messages=transcripts(), budget=st.integers(0, 600))
def test_truncate_oldest_bound_fits_and_keeps_pairs(messages: list[Message], budget: int) -> None:
    """Whatever the transcript and budget, a bound fits, keeps the first message and every pair."""
    sizes = [estimate_message(m) for m in messages]
    kept = tether.TruncateOldest().bound(messages, sizes, budget)
    if kept is None:
        return
    assert kept[0] is messages[0]
    assert kept[1:] == messages[len(messages) - len(kept) + 1 :]
    assert len(kept) < len(messages)
    assert sum(estimate_message(m) for m in kept) <= budget
    check_history(kept)
