"""Whole runs against the fake Anthropic and OpenAI servers, through a Runtime.

Multi-round tool use with streaming (and without), a 429 retried with its
retry-after, usage and cost summed over every call, the provider gate pausing
concurrent runs after a 429, and backoff timing on trio's autojump clock.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import AnthropicProvider, Backoff, price_for

from ..helpers import AUTOJUMP, assert_consistent, of
from . import anthropic_wire as anth
from . import openai_wire as oai
from . import wires
from .fakes import SECRET, Answer, fake_server, json_answer, sse_answer, sse_body

pytestmark = pytest.mark.anyio


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def rate_limited(seconds: str = "1", header: str = "retry-after") -> Answer:
    return json_answer(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
        status=429,
        headers=[(header, seconds)],
    )


def rate_limited_ms(ms: int) -> Answer:
    return rate_limited(str(ms), header="retry-after-ms")


# Anthropic: round 1 asks for add(2, 3); round 2 answers. Usage per call is fixed.
def anthropic_answers(stream: bool) -> list[Answer]:
    if stream:
        tool_round = sse_answer(
            sse_body(
                anth.stream_events(
                    text=("Let me add.",),
                    tools=(("toolu_1", "add", ('{"a": 2,', ' "b": 3}')),),
                    stop="tool_use",
                    output_tokens=20,
                )
            ),
            at=[57, 301],
        )
        final = sse_answer(
            sse_body(anth.stream_events(text=("The sum ", "is 5."), output_tokens=8))
        )
    else:
        usage = {"input_tokens": 25, "output_tokens": 20}
        tool_round = json_answer(
            anth.message_json(
                text="Let me add.",
                tools=(("toolu_1", "add", {"a": 2, "b": 3}),),
                stop="tool_use",
                usage=usage,
            )
        )
        final = json_answer(
            anth.message_json(text="The sum is 5.", usage={"input_tokens": 25, "output_tokens": 8})
        )
    return [tool_round, rate_limited_ms(50), final]


def openai_answers(stream: bool) -> list[Answer]:
    usage1 = {"prompt_tokens": 30, "completion_tokens": 20, "total_tokens": 50}
    usage2 = {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}
    if stream:
        tool_round = sse_answer(
            sse_body(
                oai.stream_chunks(
                    text=("Let me add.",),
                    tool_deltas=(
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "add", "arguments": '{"a": 2,'},
                        },
                        {"index": 0, "function": {"arguments": ' "b": 3}'}},
                    ),
                    finish="tool_calls",
                    usage=usage1,
                )
            )
        )
        final = sse_answer(sse_body(oai.stream_chunks(text=("The sum ", "is 5."), usage=usage2)))
    else:
        tool_round = json_answer(
            oai.completion_json(
                text="Let me add.",
                tools=(("call_1", "add", '{"a": 2, "b": 3}'),),
                finish="tool_calls",
                usage=usage1,
            )
        )
        final = json_answer(oai.completion_json(text="The sum is 5.", usage=usage2))
    return [tool_round, rate_limited_ms(50), final]


def make_provider(kind: str, url: str, stream: bool) -> Any:
    return wires.make_provider(
        kind, url, stream, backoff=Backoff(initial=0.01, cap=2.0, jitter=False)
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_run_streams_its_deltas_from_the_wire(kind: str, stream: bool) -> None:
    """Text and tool-call deltas reach handle.events(deltas=True) and stream_text() from the
    fake servers' streams (a whole answer as one delta each), the retried call included."""
    answers = anthropic_answers(stream) if kind == "anthropic" else openai_answers(stream)
    async with fake_server(*answers) as server:
        provider = make_provider(kind, server.url, stream)
        agent = tether.Agent(name="adder", instructions="Add.", provider=provider, tools=[add])
        async with tether.Runtime() as rt:
            handle = rt.start(agent, "What is 2 + 3?")
            text = handle.stream_text()
            live = [e async for e in handle.events(deltas=True)]
            chunks = [c async for c in text]
            result = await handle.result()
    assert result.output == "The sum is 5."
    assert [e for e in live if not isinstance(e, ev.DELTA_TYPES)] == list(result.events)
    texts = of(live, ev.TextDelta)
    # However they were joined for this reader (it may fall behind): each call's text.
    by_call = ["".join(t.text for t in texts if t.call_index == i) for i in (0, 1)]
    assert by_call == ["Let me add.", "The sum is 5."]
    assert "".join(chunks) == "Let me add.The sum is 5."
    calls = of(live, ev.ToolCallDelta)
    assert {(c.call_id, c.name, c.call_index) for c in calls} == {
        ("toolu_1" if kind == "anthropic" else "call_1", "add", 0)
    }
    assert json.loads("".join(c.arguments_delta for c in calls)) == {"a": 2, "b": 3}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_multi_round_tool_use_run(kind: str, stream: bool) -> None:
    """A run goes through tool use, a 429 retry and an answer, with usage and cost right."""
    answers = anthropic_answers(stream) if kind == "anthropic" else openai_answers(stream)
    async with fake_server(*answers) as server:
        provider = make_provider(kind, server.url, stream)
        agent = tether.Agent(name="adder", instructions="Add.", provider=provider, tools=[add])
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "What is 2 + 3?")
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    assert result.usage.steps == 2
    assert result.usage.provider_attempts == 3
    (retry,) = of(result.events, ev.ProviderRetry)
    assert (retry.error_type, retry.attempt) == ("rate_limited", 1)
    assert retry.wait_s >= 0.05
    (tool,) = of(result.events, ev.ToolCallFinished)
    assert (tool.outcome, tool.content) == ("ok", "5")

    _, failed, resent = server.requests
    assert failed.body == resent.body, "a retry resends a byte-identical body"
    body = resent.json()
    if kind == "anthropic":
        assert resent.headers["x-api-key"] == SECRET
        results = [
            block
            for message in body["messages"]
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        assert [(r["tool_use_id"], r["content"], r.get("is_error", False)) for r in results] == [
            ("toolu_1", "5", False)
        ]
    else:
        assert resent.headers["authorization"] == f"Bearer {SECRET}"
        tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
        assert tool_messages == [{"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    # Usage is the sum of the two answered calls; cost from the price table.
    calls = of(result.events, ev.ModelCallFinished)
    total_in = sum(
        c.usage.input_tokens + c.usage.cache_read_tokens + c.usage.cache_write_tokens for c in calls
    )
    total_out = sum(c.usage.output_tokens for c in calls)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (total_in, total_out)
    price = price_for(provider.model)
    assert price is not None
    expected = sum(price.cost(c.usage) for c in calls)
    assert result.usage.cost_usd == pytest.approx(expected)
    assert SECRET not in json.dumps([ev.dump(e) for e in result.events])


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_gate_pauses_every_run_after_a_429(kind: str) -> None:
    """One run's 429 with retry-after pauses the other runs on that provider; they show it."""
    final = anthropic_answers(True)[2] if kind == "anthropic" else openai_answers(True)[2]
    async with fake_server(rate_limited_ms(200), final, final, final, keep_alive=True) as server:
        provider = make_provider(kind, server.url, True)
        agent = tether.Agent(name="a", provider=provider)
        async with tether.Runtime() as rt:
            first = rt.start(agent, "first")
            async for event in first.events():
                if isinstance(event, ev.ProviderRetry):
                    break
            others = [rt.start(agent, f"q{i}") for i in range(2)]
            results = [await h.result() for h in (first, *others)]
    assert {r.termination for r in results} == {tether.Termination.ANSWERED}
    assert len(of(results[0].events, ev.ProviderRetry)) == 1
    for other in results[1:]:
        assert not of(other.events, ev.ProviderRetry)
        (wait,) = of(other.events, ev.ProviderWait)
        # The gate holds for the 200 ms the 429 asked; the wait is measured on the wall
        # clock (real sockets), so the bound is loose: a loaded machine stretches it.
        assert 0 < wait.wait_s <= 2.0, "each run's events show the wait"
    assert len(server.requests) == 4


@AUTOJUMP
async def test_backoff_timing_is_exact_on_virtual_time() -> None:
    """Waits follow Backoff (initial × multiplier^n, capped) and retry-after, exactly."""
    answers = [
        json_answer({"type": "error", "error": {"type": "api_error", "message": "x"}}, status=500),
        json_answer({"type": "error", "error": {"type": "api_error", "message": "x"}}, status=503),
        rate_limited("7"),
        json_answer({"type": "error", "error": {"type": "api_error", "message": "x"}}, status=502),
        json_answer(anth.message_json(text="ok")),
    ]
    async with fake_server(*answers) as server:
        provider = AnthropicProvider(
            anth.MODEL,
            api_key=SECRET,
            base_url=server.url,
            stream=False,
            backoff=Backoff(initial=1.0, multiplier=3.0, cap=5.0, jitter=False),
        )
        agent = tether.Agent(
            name="a", provider=provider, limits=tether.Limits(max_provider_attempts=5)
        )
        async with tether.Runtime() as rt:
            start = anyio.current_time()
            result = await rt.run(agent, "q")
            elapsed = anyio.current_time() - start
    assert result.termination is tether.Termination.ANSWERED
    waits = [r.wait_s for r in of(result.events, ev.ProviderRetry)]
    # 1, 3, then retry-after 7 capped at 5, then 1 × 3³ = 27 capped at 5.
    assert waits == [1.0, 3.0, 5.0, 5.0]
    assert [r.error_type for r in of(result.events, ev.ProviderRetry)] == [
        "server_error",
        "server_error",
        "rate_limited",
        "server_error",
    ]
    assert elapsed == pytest.approx(sum(waits), abs=0.5)
