"""Typed output over the real wire formats, against the fake Anthropic and OpenAI servers."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

import tether
from tether import events as ev

from ..helpers import assert_consistent, of
from . import anthropic_wire as anth
from . import openai_wire as oai
from . import wires
from .fakes import Answer, fake_server, sse_answer, sse_body

pytestmark = pytest.mark.anyio

BAD = '{"city": "Lisbon", "days": "two"}'
GOOD = '{"city": "Lisbon", "days": 2}'


@attrs.frozen
class Trip:
    city: str
    days: int


def anthropic_call(call_id: str, arguments: str) -> Answer:
    half = len(arguments) // 2
    pieces = (arguments[:half], arguments[half:])
    events = anth.stream_events(
        text=(), tools=((call_id, "final_result", pieces),), stop="tool_use"
    )
    return sse_answer(sse_body(events))


def openai_call(call_id: str, arguments: str) -> Answer:
    delta = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": "final_result", "arguments": arguments},
    }
    return sse_answer(
        sse_body(oai.stream_chunks(text=(), tool_deltas=(delta,), finish="tool_calls"))
    )


def call(kind: str, call_id: str, arguments: str) -> Answer:
    return (anthropic_call if kind == "anthropic" else openai_call)(call_id, arguments)


def tool_results(kind: str, body: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(id, content, is_error) of every tool result a request body sends."""
    found = []
    for message in body["messages"]:
        if kind == "openai":
            if message["role"] == "tool":
                content = message["content"]
                found.append((message["tool_call_id"], content, content.startswith("Error: ")))
        elif isinstance(message["content"], list):
            for block in message["content"]:
                if block["type"] == "tool_result":
                    found.append((block["tool_use_id"], block["content"], block["is_error"]))
    return found


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_typed_run_with_one_invalid_attempt_ends_answered(kind: str) -> None:
    """The issue's "done when": an invalid first final_result, then the typed answer."""
    async with fake_server(call(kind, "c1", BAD), call(kind, "c2", GOOD)) as server:
        agent = tether.Agent(
            name="planner", provider=wires.make_provider(kind, server.url), output_type=Trip
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "Plan a weekend in Lisbon")
        first, second = (r.json() for r in server.requests)
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == Trip(city="Lisbon", days=2)
    # The trail shows the validation feedback.
    bad, good = of(result.events, ev.ToolCallFinished)
    assert (bad.call_id, bad.outcome, bad.is_error) == ("c1", "model_error", True)
    assert "days: expected int, got str ('two')" in bad.content
    assert (good.call_id, good.outcome) == ("c2", "ok")
    # The model got the output tool with the type's schema, and then the problems.
    tools = first["tools"]
    schema = tools[0]["input_schema"] if kind == "anthropic" else tools[0]["function"]["parameters"]
    assert schema["properties"] == {"city": {"type": "string"}, "days": {"type": "integer"}}
    ((call_id, content, is_error),) = tool_results(kind, second)
    assert (call_id, is_error) == ("c1", True)
    assert "days: expected int, got str ('two')" in content
    # The transcript ends answered: every tool_use has its result.
    assert result.messages[-1].role == "user"


async def test_native_mode_on_the_openai_wire() -> None:
    """output_mode="native" sends response_format json_schema (strict) and reads the text."""
    answers = [
        sse_answer(sse_body(oai.stream_chunks(text=('{"city": "Lisbon",', ' "days": 2}')))),
    ]
    async with fake_server(*answers) as server:
        provider = wires.make_provider("openai", server.url)
        agent = tether.Agent(name="p", provider=provider, output_type=Trip, output_mode="native")
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "Plan")
        (request,) = server.requests
    assert result.output == Trip("Lisbon", 2)
    body = request.json()
    assert "tools" not in body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "final_result",
            "schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
    assert json.loads(of(result.events, ev.RunFinished)[0].output or "") == {
        "city": "Lisbon",
        "days": 2,
    }


def test_native_mode_is_not_strict_where_openai_would_refuse_the_schema() -> None:
    """A schema with optional fields (defaults) is sent with strict false."""

    @attrs.frozen
    class Loose:
        city: str
        days: int = 1

    agent = tether.Agent(
        name="p",
        provider=oai.provider("http://127.0.0.1:1"),
        output_type=Loose,
        output_mode="native",
    )
    assert agent.typed_output is not None
    assert agent.typed_output.format is not None
    assert agent.typed_output.format.strict is False


async def test_native_mode_on_the_anthropic_wire() -> None:
    """output_mode="native" sends output_config.format json_schema and reads the text."""
    events = anth.stream_events(text=('{"city": "Lisbon",', ' "days": 2}'))
    async with fake_server(sse_answer(sse_body(events))) as server:
        provider = wires.make_provider("anthropic", server.url)
        agent = tether.Agent(name="p", provider=provider, output_type=Trip, output_mode="native")
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "Plan")
        (request,) = server.requests
    assert result.output == Trip("Lisbon", 2)
    body = request.json()
    assert "tools" not in body
    assert body["output_config"] == {
        "format": {
            "type": "json_schema",
            "schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"],
                "additionalProperties": False,
            },
        }
    }


def test_native_mode_needs_a_provider_with_one() -> None:
    """A provider without a native structured-output mode: a ValueError says to use "tool"."""

    @attrs.define
    class Plain:
        model: str = "m"
        backoff: Any = None

        def stream(self, request: Any, ctx: Any) -> Any:
            raise NotImplementedError

        def price(self) -> None:
            return None

    with pytest.raises(ValueError, match="output_mode='tool'"):
        tether.Agent(name="p", provider=Plain(), output_type=Trip, output_mode="native")
