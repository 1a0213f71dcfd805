"""A three-turn conversation with tool calls, over SSE.

Each turn asks the fake server twice (a tool call, then the answer); the tests
check the exact messages each server received on turn 3: the two earlier
turns, tool calls and results included, in the wire format of each API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import Reasoning

from ..helpers import assert_consistent, of
from . import anthropic_wire as anth
from . import openai_wire as oai
from . import responses_wire as rsp
from .fakes import Answer, fake_server, sse_answer, sse_body

pytestmark = pytest.mark.anyio

#: (question, the tool call's arguments, the tool's result, the answer) per turn.
TURNS = [
    ("1 + 2?", {"a": 1, "b": 2}, "3", "It is 3."),
    ("and 3 + 4?", {"a": 3, "b": 4}, "7", "That makes 7."),
    ("now 5 + 6?", {"a": 5, "b": 6}, "11", "11, then."),
]


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def anthropic_answers() -> list[Answer]:
    answers = []
    for n, (_, args, _, text) in enumerate(TURNS):
        raw = json.dumps(args)
        pieces = (raw[:5], raw[5:])  # the arguments arrive in two deltas
        answers.append(
            sse_answer(
                sse_body(
                    anth.stream_events(
                        text=(), tools=((f"toolu_{n}", "add", pieces),), stop="tool_use"
                    )
                )
            )
        )
        answers.append(sse_answer(sse_body(anth.stream_events(text=(text[:4], text[4:])))))
    return answers


def openai_answers() -> list[Answer]:
    answers = []
    for n, (_, args, _, text) in enumerate(TURNS):
        raw = json.dumps(args)
        deltas = (
            {
                "index": 0,
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "add", "arguments": raw[:5]},
            },
            {"index": 0, "function": {"arguments": raw[5:]}},
        )
        answers.append(
            sse_answer(
                sse_body(oai.stream_chunks(text=(), tool_deltas=deltas, finish="tool_calls"))
            )
        )
        answers.append(sse_answer(sse_body(oai.stream_chunks(text=(text[:4], text[4:])))))
    return answers


def anthropic_turn(n: int) -> list[dict[str, Any]]:
    """Turn ``n`` as the Messages API carries it."""
    question, args, result, text = TURNS[n]
    return [
        {"role": "user", "content": [{"type": "text", "text": question}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "add", "input": args}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": result}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": text}]},
    ]


def openai_turn(n: int) -> list[dict[str, Any]]:
    """Turn ``n`` as Chat Completions carries it."""
    question, args, result, text = TURNS[n]
    return [
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {
                        "name": "add",
                        "arguments": json.dumps(args, separators=(",", ":")),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{n}", "content": result},
        {"role": "assistant", "content": text},
    ]


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_three_turn_conversation_over_sse(kind: str, tmp_path: Path) -> None:
    """Turn 3 sends both earlier turns, tool pairs included, exactly; the store holds all three."""
    answers = anthropic_answers() if kind == "anthropic" else openai_answers()
    store = tether.SQLiteConversationStore(tmp_path / "chats.db")
    async with fake_server(*answers) as server:
        wire = anth if kind == "anthropic" else oai
        agent = tether.Agent(
            name="calc",
            instructions="Use the tools.",
            provider=wire.provider(server.url),
            tools=[add],
        )
        results = []
        async with tether.Runtime(conversations=store) as rt:
            for question, *_ in TURNS:
                results.append(await rt.run(agent, question, conversation="user-42"))
    for n, result in enumerate(results):
        assert_consistent(result)
        assert result.termination is tether.Termination.ANSWERED
        assert result.output == TURNS[n][3]
        assert [e.messages for e in of(result.events, ev.ConversationLoaded)] == [4 * n]
    assert len(server.requests) == 6
    turn = anthropic_turn if kind == "anthropic" else openai_turn
    system = [] if kind == "anthropic" else [{"role": "system", "content": "Use the tools."}]
    first, second = (r.json() for r in server.requests[4:6])
    earlier = [*turn(0), *turn(1)]
    assert first["messages"] == [*system, *earlier, turn(2)[0]]
    assert second["messages"] == [*system, *earlier, *turn(2)[:3]]
    for body in (first, second):
        assert body["stream"] is True
        if kind == "anthropic":
            assert body["system"] == "Use the tools."
    # The store holds the whole conversation, and it is what turn 3 returned.
    stored = await store.load("user-42")
    assert stored == list(results[-1].messages)
    assert len(stored) == 12
    await store.aclose()


# ------------------------------------------------- with reasoning turned on


def thought(n: int) -> str:
    return f"Turn {n}: call add with {TURNS[n][1]}."


def anthropic_thinking_answers() -> list[Answer]:
    """Each tool round thinks first (signed; turn 0 also has a redacted block)."""
    answers = []
    for n, (_, args, _, text) in enumerate(TURNS):
        raw = json.dumps(args)
        events = anth.stream_events(
            text=(),
            tools=((f"toolu_{n}", "add", (raw,)),),
            stop="tool_use",
            thinking=((thought(n)[:7], thought(n)[7:]), f"sig-{n}=="),
            redacted="REDACTED-0" if n == 0 else None,
        )
        answers.append(sse_answer(sse_body(events)))
        answers.append(sse_answer(sse_body(anth.stream_events(text=(text,)))))
    return answers


def anthropic_thinking_turn(n: int) -> list[dict[str, Any]]:
    question, args, result, text = TURNS[n]
    reasoning: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": thought(n), "signature": f"sig-{n}=="}
    ]
    if n == 0:
        reasoning.append({"type": "redacted_thinking", "data": "REDACTED-0"})
    return [
        {"role": "user", "content": [{"type": "text", "text": question}]},
        {
            "role": "assistant",
            "content": [
                *reasoning,
                {"type": "tool_use", "id": f"toolu_{n}", "name": "add", "input": args},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": result}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": text}]},
    ]


def responses_answers() -> list[Answer]:
    """Each tool round starts with an encrypted reasoning item (with a summary)."""
    answers = []
    for n, (_, args, _, text) in enumerate(TURNS):
        items = [
            rsp.reasoning(f"rs_{n}", [thought(n)], f"ENC-{n}"),
            rsp.function_call(f"call_{n}", "add", json.dumps(args)),
        ]
        answers.append(sse_answer(sse_body(rsp.stream_events(items))))
        answers.append(sse_answer(sse_body(rsp.stream_events([rsp.message(text)]))))
    return answers


def responses_turn(n: int) -> list[dict[str, Any]]:
    question, args, result, text = TURNS[n]
    return [
        {"role": "user", "content": question},
        {
            "type": "reasoning",
            "id": f"rs_{n}",
            "summary": [{"type": "summary_text", "text": thought(n)}],
            "encrypted_content": f"ENC-{n}",
        },
        {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "add",
            "arguments": json.dumps(args, separators=(",", ":")),
        },
        {"type": "function_call_output", "call_id": f"call_{n}", "output": result},
        {"role": "assistant", "content": text},
    ]


@pytest.mark.parametrize("kind", ["anthropic", "openai-responses"])
async def test_three_turn_conversation_with_reasoning(kind: str, tmp_path: Path) -> None:
    """With thinking on, turn 3 sends every earlier reasoning block back unchanged, signed."""
    store = tether.SQLiteConversationStore(tmp_path / "chats.db")
    if kind == "anthropic":
        answers = anthropic_thinking_answers()
        settings = tether.ModelSettings(thinking_budget=2048)
    else:
        answers = responses_answers()
        settings = tether.ModelSettings(reasoning_effort="high")
    async with fake_server(*answers) as server:
        wire = anth if kind == "anthropic" else rsp
        agent = tether.Agent(
            name="calc",
            instructions="Use the tools.",
            provider=wire.provider(server.url),
            tools=[add],
            settings=settings,
        )
        results = []
        live: list[ev.Event] = []
        async with tether.Runtime(conversations=store) as rt:
            for question, *_ in TURNS:
                handle = rt.start(agent, question, conversation="user-42")
                live.extend([e async for e in handle.events(deltas=True)])
                results.append(await handle.result())
    for n, result in enumerate(results):
        assert_consistent(result)
        assert result.termination is tether.Termination.ANSWERED
        assert result.output == TURNS[n][3]
    streamed = "".join(e.text for e in live if isinstance(e, ev.ReasoningDelta))
    assert streamed == "".join(thought(n) for n in range(3))
    assert len(server.requests) == 6
    turn = anthropic_thinking_turn if kind == "anthropic" else responses_turn
    first, second = (r.json() for r in server.requests[4:6])
    earlier = [*turn(0), *turn(1)]
    if kind == "anthropic":
        assert first["messages"] == [*earlier, turn(2)[0]]
        assert second["messages"] == [*earlier, *turn(2)[:3]]
        for body in (first, second):
            assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
            assert body["max_tokens"] == 4096 + 2048, "thinking comes on top of the answer's cap"
            assert body["system"] == "Use the tools."
    else:
        assert first["input"] == [*earlier, turn(2)[0]]
        assert second["input"] == [*earlier, *turn(2)[:4]]
        for body in (first, second):
            assert body["reasoning"] == {"effort": "high"}
            assert body["include"] == ["reasoning.encrypted_content"]
            assert body["store"] is False
            assert body["instructions"] == "Use the tools."
    # The store keeps the reasoning blocks: the next process would send them back too.
    stored = await store.load("user-42")
    assert stored == list(results[-1].messages)
    kept = [b for m in stored for b in m.content if isinstance(b, Reasoning)]
    assert [b.signature for b in kept if b.signature] == (
        ["sig-0==", "REDACTED-0", "sig-1==", "sig-2=="]
        if kind == "anthropic"
        else ["ENC-0", "ENC-1", "ENC-2"]
    )
    await store.aclose()
