"""ModelSettings on the wire: the exact bodies and headers each fake server receives."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import tether
from tether.providers import InvalidRequest, ModelSettings

from . import wires
from .fakes import REQUEST, SECRET, collect, failure, fake_server

pytestmark = pytest.mark.anyio


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOL_REQUEST = attrs.evolve(REQUEST, tools=(add.definition(),))
ADD_TOOL = {
    "name": "add",
    "description": "Add two integers.",
    "input_schema": dict(add.input_schema),
}


def anthropic_body(*, tools: bool, **extra: Any) -> dict[str, Any]:
    """What the Anthropic provider sends for (TOOL_)REQUEST, plus ``extra``."""
    body: dict[str, Any] = {
        "model": wires.anthropic_wire.MODEL,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "system": "Be brief.",
        "stream": True,
    }
    if tools:
        body["tools"] = [ADD_TOOL]
    return {**body, **extra}


def openai_body(*, tools: bool, **extra: Any) -> dict[str, Any]:
    """What the OpenAI provider sends for (TOOL_)REQUEST, plus ``extra``."""
    body: dict[str, Any] = {
        "model": wires.openai_wire.MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "max_tokens": 4096,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Add two integers.",
                    "parameters": dict(add.input_schema),
                },
            }
        ]
    return {**body, **extra}


ANTHROPIC_CASES: list[tuple[ModelSettings, bool, dict[str, Any]]] = [
    (ModelSettings(), True, {}),
    (ModelSettings(temperature=0.3), False, {"temperature": 0.3}),
    (ModelSettings(top_p=0.5), False, {"top_p": 0.5}),
    (ModelSettings(max_tokens=123), False, {"max_tokens": 123}),
    (ModelSettings(stop_sequences=["END", "STOP"]), False, {"stop_sequences": ["END", "STOP"]}),
    (ModelSettings(tool_choice="auto"), True, {"tool_choice": {"type": "auto"}}),
    (ModelSettings(tool_choice="required"), True, {"tool_choice": {"type": "any"}}),
    (ModelSettings(tool_choice="none"), True, {"tool_choice": {"type": "none"}}),
    (ModelSettings(tool_choice="add"), True, {"tool_choice": {"type": "tool", "name": "add"}}),
    (
        ModelSettings(parallel_tool_calls=False),
        True,
        {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
    ),
    (
        ModelSettings(tool_choice="add", parallel_tool_calls=False),
        True,
        {"tool_choice": {"type": "tool", "name": "add", "disable_parallel_tool_use": True}},
    ),
    (
        ModelSettings(tool_choice="none", parallel_tool_calls=False),
        True,
        {"tool_choice": {"type": "none"}},
    ),
    (ModelSettings(parallel_tool_calls=True), True, {}),
    # Without tools there is nothing to choose: the API refuses tool_choice then.
    (ModelSettings(tool_choice="auto", parallel_tool_calls=False), False, {}),
    (ModelSettings(metadata={"user_id": "u-42"}), False, {"metadata": {"user_id": "u-42"}}),
    (ModelSettings(extra_body={"top_k": 5}), False, {"top_k": 5}),
]

OPENAI_CASES: list[tuple[ModelSettings, bool, dict[str, Any]]] = [
    (ModelSettings(), True, {}),
    (ModelSettings(temperature=1.5), False, {"temperature": 1.5}),
    (ModelSettings(top_p=0.25), False, {"top_p": 0.25}),
    (ModelSettings(max_tokens=77), False, {"max_tokens": 77}),
    (ModelSettings(stop_sequences=["END"]), False, {"stop": ["END"]}),
    (ModelSettings(seed=7), False, {"seed": 7}),
    (ModelSettings(tool_choice="auto"), True, {"tool_choice": "auto"}),
    (ModelSettings(tool_choice="required"), True, {"tool_choice": "required"}),
    (ModelSettings(tool_choice="none"), True, {"tool_choice": "none"}),
    (
        ModelSettings(tool_choice="add"),
        True,
        {"tool_choice": {"type": "function", "function": {"name": "add"}}},
    ),
    (ModelSettings(parallel_tool_calls=False), True, {"parallel_tool_calls": False}),
    (ModelSettings(parallel_tool_calls=True), True, {"parallel_tool_calls": True}),
    # Without tools the API refuses tool_choice and parallel_tool_calls.
    (ModelSettings(tool_choice="auto", parallel_tool_calls=False), False, {}),
    (
        ModelSettings(extra_body={"logprobs": True, "top_logprobs": 2}),
        False,
        {"logprobs": True, "top_logprobs": 2},
    ),
]


@pytest.mark.parametrize(("settings", "tools", "expected"), ANTHROPIC_CASES)
async def test_anthropic_body_per_setting(
    settings: ModelSettings, tools: bool, expected: dict[str, Any]
) -> None:
    """Each set field lands in the Messages API's own field; unset ones are not sent."""
    request = attrs.evolve(TOOL_REQUEST if tools else REQUEST, settings=settings)
    async with fake_server(wires.anthropic_wire.reply(True)) as server:
        await collect(wires.make_provider("anthropic", server.url), request)
    assert server.requests[0].json() == anthropic_body(tools=tools, **expected)


@pytest.mark.parametrize(("settings", "tools", "expected"), OPENAI_CASES)
async def test_openai_body_per_setting(
    settings: ModelSettings, tools: bool, expected: dict[str, Any]
) -> None:
    """Each set field lands in Chat Completions' own field; unset ones are not sent."""
    request = attrs.evolve(TOOL_REQUEST if tools else REQUEST, settings=settings)
    async with fake_server(wires.openai_wire.reply(True)) as server:
        await collect(wires.make_provider("openai", server.url), request)
    assert server.requests[0].json() == openai_body(tools=tools, **expected)


async def test_the_clamped_cap_wins_over_the_settings_max_tokens() -> None:
    """A request's (clamped) max_tokens is what is sent, whatever the settings ask."""
    request = attrs.evolve(REQUEST, max_tokens=9, settings=ModelSettings(max_tokens=500))
    async with fake_server(wires.anthropic_wire.reply(True)) as server:
        await collect(wires.make_provider("anthropic", server.url), request)
    assert server.requests[0].json()["max_tokens"] == 9


@pytest.mark.parametrize(
    ("kind", "own"),
    [("anthropic", ("x-api-key", SECRET)), ("openai", ("authorization", f"Bearer {SECRET}"))],
)
async def test_extra_headers_are_sent_beside_the_key(kind: str, own: tuple[str, str]) -> None:
    """extra_headers reach the server; the API key header is still tether's own."""
    settings = ModelSettings(extra_headers={"X-Trace-Id": "t-1", "anthropic-beta": "b-1"})
    request = attrs.evolve(REQUEST, settings=settings)
    async with fake_server(wires.WIRES[kind].reply(True)) as server:
        await collect(wires.make_provider(kind, server.url), request)
    headers = server.requests[0].headers
    assert headers["x-trace-id"] == "t-1"
    assert headers["anthropic-beta"] == "b-1"
    assert headers[own[0]] == own[1]


@pytest.mark.parametrize(
    ("kind", "header"), [("anthropic", "X-API-Key"), ("openai", "Authorization")]
)
async def test_a_request_built_by_hand_cannot_replace_the_key_header(
    kind: str, header: str
) -> None:
    """Past Runtime.start's check, the provider itself refuses to send a replaced key."""
    request = attrs.evolve(REQUEST, settings=ModelSettings(extra_headers={header: "stolen"}))
    async with fake_server(wires.WIRES[kind].reply(True)) as server:
        error = await failure(wires.make_provider(kind, server.url), request)
    assert isinstance(error, InvalidRequest)
    assert "stolen" not in str(error)
    assert server.requests == []


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_request_built_by_hand_cannot_replace_a_body_field(kind: str) -> None:
    """extra_body adds fields; one tether writes (here the model) is refused, not replaced."""
    request = attrs.evolve(REQUEST, settings=ModelSettings(extra_body={"model": "other"}))
    async with fake_server(wires.WIRES[kind].reply(True)) as server:
        error = await failure(wires.make_provider(kind, server.url), request)
    assert isinstance(error, InvalidRequest)
    assert "model" in str(error)
    assert server.requests == []


async def test_a_run_sends_its_merged_settings_on_every_request() -> None:
    """Through a Runtime: the agent's settings merged with the run's, on each round's body."""
    async with fake_server(
        wires.openai_wire.reply(
            True,
            text=(),
            tool_deltas=(
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                },
            ),
            finish="tool_calls",
        ),
        wires.openai_wire.reply(True),
    ) as server:
        agent = tether.Agent(
            name="merged",
            instructions="Be brief.",
            provider=wires.make_provider("openai", server.url),
            tools=[add],
            settings=ModelSettings(temperature=0.2, stop_sequences=["END"], tool_choice="auto"),
        )
        async with tether.Runtime() as rt:
            result = await rt.run(
                agent,
                "Hi",
                settings=ModelSettings(seed=7, temperature=0.9, extra_headers={"x-run": "r"}),
            )
    assert result.termination == "answered"
    assert len(server.requests) == 2
    for sent in server.requests:
        body = sent.json()
        picked = {k: body[k] for k in ("temperature", "stop", "seed", "tool_choice")}
        assert picked == {"temperature": 0.9, "stop": ["END"], "seed": 7, "tool_choice": "auto"}
        assert sent.headers["x-run"] == "r"
    assert server.requests[0].json()["messages"] == openai_body(tools=True)["messages"]
