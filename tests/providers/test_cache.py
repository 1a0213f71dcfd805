"""Prompt caching: Anthropic's ``cache_control`` breakpoints, and cache usage priced in runs.

The request bodies are checked exactly, as built and as the fake server
received them; the usage of cache reads and writes (Anthropic's
``cache_read_input_tokens``/``cache_creation_input_tokens``, OpenAI's
``prompt_tokens_details.cached_tokens``) is checked in ``ModelCallFinished``,
the charges and the run's ``Usage``, at the price table's cache prices.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import (
    AnthropicProvider,
    Message,
    ModelRequest,
    TextBlock,
    TokenUsage,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
    price_for,
)

from ..helpers import assert_consistent, of
from . import anthropic_wire as anth
from . import openai_wire as oai
from .fakes import SECRET, Answer, fake_server, json_answer, sse_answer, sse_body

pytestmark = pytest.mark.anyio

EPHEMERAL = {"type": "ephemeral"}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
TOOLS = (
    ToolDef(name="first", description="One.", input_schema=SCHEMA),
    ToolDef(name="second", description="Two.", input_schema=SCHEMA),
)
CONVERSATION = (
    Message.user("What is 2 + 3?"),
    Message(
        role="assistant",
        content=(
            TextBlock(text="Adding."),
            ToolUseBlock(id="toolu_1", name="first", input={"a": 2}),
        ),
    ),
    Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_1", content="5"),)),
)


def body(request: ModelRequest, **kw: Any) -> dict[str, Any]:
    return AnthropicProvider("claude-sonnet-4-5", api_key=SECRET, **kw).request_body(request)


def test_auto_marks_the_tools_the_system_prompt_and_the_newest_turns() -> None:
    """cache="auto" marks the last tool, the system prompt, the newest and previous user turns."""
    request = ModelRequest(system="Be brief.", messages=CONVERSATION, tools=TOOLS, max_tokens=100)
    assert body(request, cache="auto") == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "What is 2 + 3?", "cache_control": EPHEMERAL}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Adding."},
                    {"type": "tool_use", "id": "toolu_1", "name": "first", "input": {"a": 2}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "5",
                        "cache_control": EPHEMERAL,
                    }
                ],
            },
        ],
        "tools": [
            {"name": "first", "description": "One.", "input_schema": SCHEMA},
            {
                "name": "second",
                "description": "Two.",
                "input_schema": SCHEMA,
                "cache_control": EPHEMERAL,
            },
        ],
        "stream": True,
    }


def test_off_is_the_default_and_sends_the_body_unchanged() -> None:
    """Without cache="auto" nothing is marked and the system prompt stays a string."""
    request = ModelRequest(system="Be brief.", messages=CONVERSATION, tools=TOOLS)
    plain = body(request)
    assert plain == body(request, cache="off")
    assert "cache_control" not in repr(plain)
    assert plain["system"] == "Be brief."
    marked = body(request, cache="auto")
    for part in (marked["system"][0], marked["tools"][-1]):
        del part["cache_control"]
    marked["system"] = marked["system"][0]["text"]
    for message in marked["messages"]:
        for block in message["content"]:
            block.pop("cache_control", None)
    assert marked == plain, "the markers are the only difference"


@pytest.mark.parametrize(
    ("system", "tools", "messages", "expected"),
    [
        ("", (), CONVERSATION[:1], 1),
        ("sys", (), CONVERSATION[:1], 2),
        ("", TOOLS, CONVERSATION, 3),
        ("sys", TOOLS, CONVERSATION, 4),
        ("sys", TOOLS, CONVERSATION + CONVERSATION[1:] * 3, 4),
    ],
)
def test_never_more_than_four_breakpoints(
    system: str, tools: tuple[ToolDef, ...], messages: tuple[Message, ...], expected: int
) -> None:
    """Only what the request has is marked, and never more than the API's 4 breakpoints."""
    request = ModelRequest(system=system, messages=messages, tools=tools)
    assert repr(body(request, cache="auto")).count("cache_control") == expected


def test_a_bad_cache_mode_is_refused() -> None:
    """cache= takes "auto" or "off"; anything else says so at construction."""
    with pytest.raises(ValueError, match='takes "auto" or "off"'):
        AnthropicProvider("claude-sonnet-4-5", api_key=SECRET, cache="always")  # type: ignore[arg-type]


# ------------------------------------------------------------- whole runs


@tether.tool
async def first(a: int) -> int:
    """Double a number."""
    return 2 * a


WRITE = {
    "input_tokens": 20,
    "output_tokens": 9,
    "cache_creation_input_tokens": 1500,
    "cache_read_input_tokens": 0,
}
READ = {
    "input_tokens": 30,
    "output_tokens": 4,
    "cache_creation_input_tokens": 40,
    "cache_read_input_tokens": 1500,
}


def anthropic_answer(stream: bool, usage: dict[str, Any], tool: bool) -> Answer:
    tools = (("toolu_1", "first", ('{"a": 2}',)),) if tool else ()
    stop = "tool_use" if tool else "end_turn"
    if not stream:
        whole = {"toolu_1": {"a": 2}} if tool else {}
        message = anth.message_json(
            text="Doubling." if tool else "It is 4.",
            tools=tuple((i, "first", a) for i, a in whole.items()),
            stop=stop,
            usage=usage,
        )
        return json_answer(message)
    events = anth.stream_events(
        text=("Doubling.",) if tool else ("It is ", "4."),
        tools=tools,
        stop=stop,
        output_tokens=usage["output_tokens"],
    )
    events = copy.deepcopy(events)
    start_usage = dict(usage, output_tokens=1)
    events[0][1]["message"]["usage"] = start_usage
    return sse_answer(sse_body(events))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_anthropic_cache_writes_and_reads_are_in_usage_and_priced(stream: bool) -> None:
    """A cached run: markers on the wire, cache counts in each call, the charges and Usage,
    priced at the table's cache prices."""
    answers = [anthropic_answer(stream, WRITE, True), anthropic_answer(stream, READ, False)]
    async with fake_server(*answers) as server:
        provider = anth.provider(server.url, stream=stream, cache="auto")
        agent = tether.Agent(
            name="doubler", instructions="Double.", provider=provider, tools=[first]
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "Double 2.")
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    one, two = (r.json() for r in server.requests)
    assert one["system"] == [{"type": "text", "text": "Double.", "cache_control": EPHEMERAL}]
    assert one["tools"][-1]["cache_control"] == EPHEMERAL
    assert one["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert [m["content"][-1].get("cache_control") for m in two["messages"]] == [
        EPHEMERAL,
        None,
        EPHEMERAL,
    ]

    written = TokenUsage(input_tokens=20, output_tokens=9, cache_write_tokens=1500)
    read = TokenUsage(
        input_tokens=30, output_tokens=4, cache_read_tokens=1500, cache_write_tokens=40
    )
    assert [c.usage for c in of(result.events, ev.ModelCallFinished)] == [written, read]
    charges = of(result.events, ev.UsageCharged)
    assert [(c.input_tokens, c.cache_read_tokens, c.cache_write_tokens) for c in charges] == [
        (1520, 0, 1500),
        (1570, 1500, 40),
    ]
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens) == (1520 + 1570, 13)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (1500, 1540)
    price = price_for(anth.MODEL)
    assert price is not None
    assert (price.cache_read, price.cache_write) == (0.3, 3.75)
    expected = (50 * 3.0 + 13 * 15.0 + 1500 * 0.3 + 1540 * 3.75) / 1_000_000
    assert usage.cost_usd == pytest.approx(expected)
    assert usage.cost_usd == pytest.approx(price.cost(written) + price.cost(read))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_openai_cached_tokens_are_read_the_same_way(stream: bool) -> None:
    """OpenAI's cached_tokens (part of prompt_tokens) are cache reads, counted as Anthropic's."""
    usage = {
        "prompt_tokens": 2000,
        "completion_tokens": 12,
        "total_tokens": 2012,
        "prompt_tokens_details": {"cached_tokens": 1792},
    }
    if stream:
        answer = sse_answer(sse_body(oai.stream_chunks(usage=usage)))
    else:
        answer = json_answer(oai.completion_json(usage=usage))
    async with fake_server(answer) as server:
        agent = tether.Agent(name="a", provider=oai.provider(server.url, stream=stream))
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "Hi")
    assert_consistent(result)
    (call,) = of(result.events, ev.ModelCallFinished)
    assert call.usage == TokenUsage(input_tokens=208, output_tokens=12, cache_read_tokens=1792)
    assert call.usage.prompt_tokens == 2000
    assert call.usage.total_tokens == 2012
    assert (result.usage.input_tokens, result.usage.cache_read_tokens) == (2000, 1792)
    assert result.usage.cache_write_tokens == 0
    price = price_for(oai.MODEL)
    assert price is not None
    assert price.cache_read == 0.075
    expected = (208 * price.input + 1792 * 0.075 + 12 * price.output) / 1_000_000
    assert result.usage.cost_usd == pytest.approx(expected)
