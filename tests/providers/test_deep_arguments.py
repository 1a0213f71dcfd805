"""Tool arguments nested too deep, over real sockets (docs/guides/tools.md).

The model's arguments nest 500 or 100,000 levels: the run tells the model (an
``is_error`` tool result in the next request, whose body is valid JSON) and
ends answered on the next reply. Both HTTP providers, streamed and whole.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import MAX_TOOL_ARGUMENT_DEPTH, Backoff

from ..helpers import assert_consistent, of
from . import anthropic_wire as anth
from . import openai_wire as oai
from . import wires
from .fakes import Answer, fake_server, raw_answer, sse_answer, sse_body

pytestmark = pytest.mark.anyio

KINDS = pytest.mark.parametrize("kind", ["anthropic", "openai"])
STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
DEPTHS = pytest.mark.parametrize("depth", [500, 100_000])
PLACEHOLDER = "__DEEP_ARGUMENTS__"


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def deep_text(depth: int) -> str:
    """``{"a":{"a":...1...}}`` as JSON text: ``depth`` objects, one inside the other."""
    return '{"a":' * depth + "1" + "}" * depth


def fragments(text: str, pieces: int = 50) -> tuple[str, ...]:
    step = max(1, len(text) // pieces)
    return tuple(text[i : i + step] for i in range(0, len(text), step))


def tool_answer(kind: str, stream: bool, depth: int) -> Answer:
    """The model asks for ``add`` with arguments ``depth`` levels deep."""
    text = deep_text(depth)
    if kind == "anthropic":
        if stream:
            events = anth.stream_events(
                text=("Let me add.",),
                tools=(("toolu_1", "add", fragments(text)),),
                stop="tool_use",
            )
            return sse_answer(sse_body(events))
        # The input object sits inside the body: splice the deep text in by hand.
        body = json.dumps(
            anth.message_json(
                text="Let me add.", tools=(("toolu_1", "add", PLACEHOLDER),), stop="tool_use"
            )
        )
        return raw_answer(body.replace(json.dumps(PLACEHOLDER), text).encode())
    if stream:
        first, *rest = fragments(text)
        deltas = [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "add", "arguments": first},
            },
            *({"index": 0, "function": {"arguments": piece}} for piece in rest),
        ]
        chunks = oai.stream_chunks(
            text=("Let me add.",), tool_deltas=tuple(deltas), finish="tool_calls"
        )
        return sse_answer(sse_body(chunks))
    return raw_answer(
        json.dumps(
            oai.completion_json(
                text="Let me add.", tools=(("call_1", "add", text),), finish="tool_calls"
            )
        ).encode()
    )


def final_answer(kind: str, stream: bool) -> Answer:
    if kind == "anthropic":
        return anth.reply(stream, text=("Sorry, ", "done."))
    if stream:
        return oai.reply(True, text=("Sorry, ", "done."))
    return raw_answer(json.dumps(oai.completion_json(text="Sorry, done.")).encode())


def make_provider(kind: str, url: str, stream: bool) -> Any:
    return wires.make_provider(
        kind, url, stream, backoff=Backoff(initial=0.001, cap=0.01, jitter=False)
    )


@KINDS
@STREAM
@DEPTHS
async def test_too_deep_arguments_are_told_and_the_run_answers(
    kind: str, stream: bool, depth: int
) -> None:
    """Arguments nested too deep: the model is told in a valid JSON body; the run answers."""
    answers = [tool_answer(kind, stream, depth), final_answer(kind, stream)]
    async with fake_server(*answers) as server:
        agent = tether.Agent(
            name="deep", provider=make_provider(kind, server.url, stream), tools=[add]
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "What is 2 + 3?")
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED, result.error
    assert result.output == "Sorry, done."
    assert result.usage.provider_attempts == 2, "no retries: nothing failed"
    (started,) = of(result.events, ev.ToolCallStarted)
    assert isinstance(started.arguments, str), "kept as flat text"
    (done,) = of(result.events, ev.ToolCallFinished)
    assert (done.outcome, done.is_error) == ("model_error", True)
    assert f"deeper than {MAX_TOOL_ARGUMENT_DEPTH} levels" in done.content
    json.dumps([ev.dump(e) for e in result.events])

    assert len(server.requests) == 2
    body = server.requests[1].json()  # valid JSON, whatever the model sent
    if kind == "anthropic":
        (call,) = [b for m in body["messages"] for b in m["content"] if b.get("type") == "tool_use"]
        assert call["input"] == {}, "the API takes objects only"
        (told,) = [
            b for m in body["messages"] for b in m["content"] if b.get("type") == "tool_result"
        ]
        assert (told["tool_use_id"], told["is_error"]) == ("toolu_1", True)
        assert "deeper than" in told["content"]
    else:
        (assistant,) = [m for m in body["messages"] if m["role"] == "assistant"]
        (call,) = assistant["tool_calls"]
        assert call["function"]["arguments"] == deep_text(depth), "sent back as it came"
        (told,) = [m for m in body["messages"] if m["role"] == "tool"]
        assert told["tool_call_id"] == "call_1"
        assert told["content"].startswith("Error: ")
        assert "deeper than" in told["content"]
