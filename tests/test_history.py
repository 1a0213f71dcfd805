"""History in, transcripts out: ``history=`` and ``RunResult.messages`` (docs/guides/history.md)."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.providers import (
    Message,
    Reply,
    ScriptedProvider,
    StopReason,
    TextBlock,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.runtime._history import check_history

from .helpers import add, assert_consistent

pytestmark = pytest.mark.anyio


def agent(script: list[Reply], **kwargs: Any) -> tether.Agent:
    return tether.Agent(name="chat", provider=ScriptedProvider(script, record=True), **kwargs)


def sent(a: tether.Agent, n: int = -1) -> tuple[Message, ...]:
    """The messages of the ``n``-th request the agent's provider received."""
    assert isinstance(a.provider, ScriptedProvider)
    return a.provider.requests[n][1].messages


def use(call_id: str, name: str = "add") -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name=name, input={"a": 1, "b": 2})


def result(call_id: str, content: str = "3") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content=content)


#: A turn with a tool call: question, call, result, answer.
TURN = (
    Message.user("what is 1 + 2?"),
    Message(role="assistant", content=(TextBlock(text="adding"), use("t1"))),
    Message(role="user", content=(result("t1"),)),
    Message.assistant("3"),
)


async def run(a: tether.Agent, question: str, **kwargs: Any) -> tether.RunResult:
    async with tether.Runtime() as rt:
        res = await rt.run(a, question, **kwargs)
    assert_consistent(res)
    return res


async def test_history_comes_before_the_input_and_is_in_the_result() -> None:
    """The provider gets history then the input; RunResult.messages is the whole transcript."""
    a = agent([Reply(text="4")])
    res = await run(a, "and 2 + 2?", history=TURN)
    assert sent(a) == (*TURN, Message.user("and 2 + 2?"))
    assert res.messages == (*TURN, Message.user("and 2 + 2?"), Message.assistant("4"))


async def test_a_result_passes_back_as_history() -> None:
    """Three runs chained through RunResult.messages, tool rounds included, send it all back."""
    # Each run plays a script from its first request: answer by the transcript's length.
    by_length = {
        1: Reply(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2}, id="x1")]),
        3: Reply(text="3"),
        5: Reply(tool_calls=[ToolCall(name="add", arguments={"a": 3, "b": 3}, id="x2")]),
        7: Reply(text="6"),
        9: Reply(text="done"),
    }
    a = tether.Agent(
        name="chat",
        provider=ScriptedProvider(lambda req, ctx: by_length[len(req.messages)], record=True),
        tools=[add],
    )
    async with tether.Runtime() as rt:
        first = await rt.run(a, "1 + 2?")
        second = await rt.run(a, "double it", history=first.messages)
        third = await rt.run(a, "thanks", history=second.messages)
    assert third.messages[: len(second.messages)] == second.messages
    assert second.messages[: len(first.messages)] == first.messages
    assert [m.role for m in third.messages] == ["user", "assistant", "user", "assistant"] * 2 + [
        "user",
        "assistant",
    ]
    assert sent(a) == third.messages[:-1]
    check_history(third.messages)


async def test_history_ending_on_a_user_message_is_followed_by_the_input() -> None:
    """A history ending with tool results (a run cut after its tool round) gets the input next."""
    a = agent([Reply(text="ok")])
    history = TURN[:3]
    res = await run(a, "go on", history=history)
    assert sent(a) == (*history, Message.user("go on"))
    assert res.messages[:3] == history


async def test_every_ending_leaves_a_valid_history() -> None:
    """A run that ends max_steps after a tool round still returns a transcript to pass back."""
    a = agent(
        [Reply(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 1})]), Reply(text="2")],
        tools=[add],
        limits=tether.Limits(max_steps=1),
    )
    res = await run(a, "1 + 1?")
    assert res.termination is tether.Termination.MAX_STEPS
    assert res.messages[-1].role == "user"
    check_history(res.messages)
    b = agent([Reply(text="2")])
    again = await run(b, "well?", history=res.messages)
    assert again.termination is tether.Termination.ANSWERED
    assert sent(b) == (*res.messages, Message.user("well?"))


@pytest.mark.parametrize(
    ("history", "error", "match"),
    [
        ("hello", TypeError, "sequence of tether.Message"),
        ([{"role": "user", "content": "hi"}], TypeError, r"history\[0\] is a dict"),
        ([Message(role="system", content=())], ValueError, "role 'system'"),  # type: ignore[arg-type]
        ([Message(role="user", content=(use("a"),))], ValueError, "user message with a tool_use"),
        (
            [Message(role="assistant", content=(result("a"),))],
            ValueError,
            "assistant message with a tool_result",
        ),
        (TURN[:2], ValueError, "ends with a tool call nobody answered"),
        (
            [TURN[0], TURN[1], Message.user("no result")],
            ValueError,
            "has no tool_result for it",
        ),
        (
            [TURN[0], TURN[1], Message(role="user", content=(result("t1"), result("t1")))],
            ValueError,
            "more than once",
        ),
        ([TURN[0], Message(role="user", content=(result("zz"),))], ValueError, "did not call"),
        (
            [TURN[0], Message(role="assistant", content=(use("d"), use("d")))],
            ValueError,
            "more than once",
        ),
        (
            [*TURN[:3], Message(role="user", content=(result("t1"),))],
            ValueError,
            "did not call",
        ),
    ],
)
async def test_bad_history_is_refused_at_start(
    history: Any, error: type[Exception], match: str
) -> None:
    """A malformed history is a TypeError/ValueError at start, naming the message."""
    async with tether.Runtime() as rt:
        with pytest.raises(error, match=match):
            rt.start(agent([Reply(text="x")]), "q", history=history)
        assert rt.running == 0


async def test_trimming_a_history_keeps_tool_pairs() -> None:
    """The on-refusal trim of a long history never keeps a tool result without its call."""
    history = TURN * 3
    a = agent(
        [Reply(stop_reason=StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED), Reply(text="short")],
        context=tether.TruncateOldest(keep_last=3),
    )
    res = await run(a, "again?", history=history)
    assert res.termination is tether.Termination.ANSWERED
    trimmed = sent(a)
    assert len(trimmed) < len(history) + 1
    assert trimmed[0] == TURN[0]
    check_history(trimmed)
    check_history(res.messages)


async def test_continuation_after_history_keeps_the_transcript_whole() -> None:
    """A tool round then a max_tokens continuation after history: every request keeps its pairs."""
    a = agent(
        [
            Reply(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 2}, id="c1")]),
            Reply(text="part one ", stop_reason=StopReason.MAX_TOKENS),
            Reply(text="part two"),
        ],
        tools=[add],
    )
    res = await run(a, "long answer please", history=TURN)
    assert res.output == "part one part two"
    assert res.messages[: len(TURN)] == TURN
    assert isinstance(a.provider, ScriptedProvider)
    for _, request in a.provider.requests:
        assert request.messages[: len(TURN)] == TURN
        check_history(request.messages)
    check_history(res.messages)
