"""The README's "A first agent" with Pydantic types, over the real wire formats.

``output_type`` a Pydantic model and a tool whose parameter is one, against the
fake Anthropic and OpenAI servers (real sockets on 127.0.0.1): the schemas the
model is sent are Pydantic's, bad arguments go back with Pydantic's messages,
and the run ends with the typed answer.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

import tether
from tether import events as ev

from ..helpers import assert_consistent, of
from . import anthropic_wire as anth
from . import openai_wire as oai
from . import wires
from .fakes import Answer, fake_server, sse_answer, sse_body

pytestmark = pytest.mark.anyio


class Sum(BaseModel):
    """Two integers to add."""

    a: int = Field(description="the first")
    b: Annotated[int, Field(ge=0)]


class Answered(BaseModel):
    value: int
    explanation: str = Field(description="one sentence")


def tool_call(kind: str, call_id: str, name: str, arguments: str) -> Answer:
    """The model asks for one tool, its arguments streamed in two pieces."""
    if kind == "anthropic":
        half = len(arguments) // 2
        pieces = (arguments[:half], arguments[half:])
        events = anth.stream_events(text=(), tools=((call_id, name, pieces),), stop="tool_use")
        return sse_answer(sse_body(events))
    delta = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
    chunks = oai.stream_chunks(text=(), tool_deltas=(delta,), finish="tool_calls")
    return sse_answer(sse_body(chunks))


def tool_results(kind: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(id, content) of every tool result a request body sends."""
    found = []
    for message in body["messages"]:
        if kind == "openai":
            if message["role"] == "tool":
                found.append((message["tool_call_id"], message["content"]))
        elif isinstance(message["content"], list):
            found.extend(
                (block["tool_use_id"], block["content"])
                for block in message["content"]
                if block["type"] == "tool_result"
            )
    return found


def schemas(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """Each offered tool's input schema, by name."""
    if kind == "anthropic":
        return {t["name"]: t["input_schema"] for t in body["tools"]}
    return {t["function"]["name"]: t["function"]["parameters"] for t in body["tools"]}


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_first_agent_with_pydantic_types(kind: str) -> None:
    """The issue's "done when": Pydantic output type and tool parameter, on both wires."""
    added: list[Sum] = []

    @tether.tool
    async def add(numbers: Sum) -> int:
        """Add two integers."""
        added.append(numbers)
        return numbers.a + numbers.b

    answers = [
        tool_call(kind, "c1", "add", '{"numbers": {"a": 2, "b": -3}}'),
        tool_call(kind, "c2", "add", '{"numbers": {"a": 2, "b": 3}}'),
        tool_call(kind, "c3", "final_result", '{"value": 5}'),
        tool_call(kind, "c4", "final_result", '{"value": 5, "explanation": "2 + 3 is 5"}'),
    ]
    async with fake_server(*answers) as server:
        agent = tether.Agent(
            name="adder",
            instructions="Use the tools to compute.",
            provider=wires.make_provider(kind, server.url),
            tools=[add],
            output_type=Answered,
            limits=tether.Limits(max_steps=5, timeout_s=30),
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "What is 2 + 3?")
        bodies = [r.json() for r in server.requests]
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == Answered(value=5, explanation="2 + 3 is 5")
    assert added == [Sum(a=2, b=3)]  # the tool ran once, with a model
    outcomes = [(e.call_id, e.outcome) for e in of(result.events, ev.ToolCallFinished)]
    assert outcomes == [("c1", "model_error"), ("c2", "ok"), ("c3", "model_error"), ("c4", "ok")]
    # The model was sent Pydantic's schemas, closed, with descriptions and constraints.
    offered = schemas(kind, bodies[0])
    numbers = offered["add"]["properties"]["numbers"]
    assert numbers["properties"]["a"]["description"] == "the first"
    assert numbers["properties"]["b"]["minimum"] == 0
    assert numbers["additionalProperties"] is False
    final = offered["final_result"]
    assert final["required"] == ["value", "explanation"]
    assert final["properties"]["explanation"]["description"] == "one sentence"
    # ... and Pydantic's messages for each mistake, then the tool's result.
    results = dict(tool_results(kind, bodies[-1]))
    assert "numbers.b: Input should be greater than or equal to 0 (got -3)" in results["c1"]
    assert results["c2"] == "5"
    assert "explanation: Field required" in results["c3"]
    assert json.loads(of(result.events, ev.RunFinished)[0].output or "") == {
        "value": 5,
        "explanation": "2 + 3 is 5",
    }


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_native_mode_with_a_pydantic_model_on_the_wire(kind: str) -> None:
    """output_mode="native": the response format carries Pydantic's schema (strict on OpenAI,
    every field being required) and the text answer is checked by Pydantic."""
    texts = [
        ('{"value": "five", ', '"explanation": "x"}'),
        ('{"value": 5, ', '"explanation": "x"}'),
    ]
    if kind == "anthropic":
        answers = [sse_answer(sse_body(anth.stream_events(text=t))) for t in texts]
    else:
        answers = [sse_answer(sse_body(oai.stream_chunks(text=t))) for t in texts]
    async with fake_server(*answers) as server:
        agent = tether.Agent(
            name="p",
            provider=wires.make_provider(kind, server.url),
            output_type=Answered,
            output_mode="native",
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "What is 2 + 3?")
        first, second = (r.json() for r in server.requests)
    assert result.output == Answered(value=5, explanation="x")
    if kind == "openai":
        sent = first["response_format"]["json_schema"]
        assert sent["strict"] is True
        schema = sent["schema"]
    else:
        schema = first["output_config"]["format"]["schema"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["value", "explanation"]
    feedback = json.dumps(second["messages"])
    assert "value: Input should be a valid integer" in feedback
