"""Content parts: a run's input as text and images, and tools that return images.

On the ScriptedProvider (both backends) and through the fake Anthropic and
OpenAI servers, where the test reads the exact request bodies.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import (
    IMAGE_TOKENS_ESTIMATE,
    Image,
    Message,
    ModelRequest,
    Reply,
    ScriptedProvider,
    TextBlock,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.providers._scripted import estimate_input_tokens
from tether.runtime._estimate import estimate_input

from .helpers import assert_consistent, of
from .providers import anthropic_wire as anth
from .providers import openai_wire as oai
from .providers import wires
from .providers.fakes import Answer, fake_server, sse_answer, sse_body

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
JPEG = b"\xff\xd8\xff\xe0" + bytes(12)
CAT = Image.from_bytes(PNG)
CHART = Image.from_bytes(JPEG)
PNG_B64 = base64.b64encode(PNG).decode()
JPEG_B64 = base64.b64encode(JPEG).decode()
QUESTION = ["What is in this picture?", CAT]
TEXT_FORM = "What is in this picture?\n[image: image/png, 32 bytes]"


@tether.tool
async def chart(name: str) -> list[str | Image]:
    """Draw a chart."""
    return [f"chart {name}:", CHART]


async def test_a_parts_input_reaches_the_model_and_the_transcript() -> None:
    """The first user message carries the parts; events, policy and judge get the text form."""
    seen: list[object] = []
    questions: list[str] = []

    def policy(point: tether.PolicyPoint, subject: object) -> None:
        if point == "input":
            seen.append(subject)

    def judged(c: tether.Candidate) -> bool:
        questions.append(c.question)
        return True

    provider = ScriptedProvider([Reply(text="A cat.")], record=True)
    agent = tether.Agent(
        name="eyes",
        provider=provider,
        policies=[policy],
        judge=tether.RuleJudge({"any": judged}),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, QUESTION)
    assert_consistent(result)
    assert result.output == "A cat."
    first = Message(role="user", content=(TextBlock(text="What is in this picture?"), CAT))
    assert provider.requests[0][1].messages == (first,)
    assert result.messages[0] == first
    assert of(result.events, ev.RunStarted)[0].input == TEXT_FORM
    assert seen == [TEXT_FORM]
    assert questions == [TEXT_FORM]
    # the whole transcript, image included, survives JSON
    dumped = json.dumps(tether.dump_messages(result.messages))
    assert tether.load_messages(json.loads(dumped)) == list(result.messages)


async def test_images_only_and_empty_text_parts() -> None:
    """An input of only images is fine; empty str parts are left out of the message."""
    provider = ScriptedProvider([Reply(text="ok")], record=True)
    agent = tether.Agent(name="eyes", provider=provider)
    async with tether.Runtime() as rt:
        result = await rt.run(agent, ("", CAT, CHART))
    assert result.termination is tether.Termination.ANSWERED
    assert provider.requests[0][1].messages[0].content == (CAT, CHART)
    assert of(result.events, ev.RunStarted)[0].input == (
        "[image: image/png, 32 bytes]\n[image: image/jpeg, 16 bytes]"
    )


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (42, TypeError, "a run's input must be a str or a list of str and tether.Image parts"),
        (b"raw", TypeError, "got bytes"),
        (CAT, TypeError, "got Image"),
        (["look", 3], TypeError, "part 1 of a run's input is a int; parts are str or"),
        ([], ValueError, "a run's input has no content"),
        ([""], ValueError, "a run's input has no content"),
    ],
)
async def test_bad_input_is_refused_at_start(bad: Any, error: type[Exception], match: str) -> None:
    """A malformed input is a TypeError or ValueError from start(), before any run exists."""
    agent = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="x")]))
    async with tether.Runtime() as rt:
        with pytest.raises(error, match=match):
            rt.start(agent, bad)
        assert rt.running == 0


async def test_a_tool_returns_an_image() -> None:
    """The tool_result carries the image after its text; the trail keeps the text form."""
    provider = ScriptedProvider(
        [
            Reply(tool_calls=[ToolCall(name="chart", arguments={"name": "sales"})]),
            Reply(text="Up."),
        ],
        record=True,
    )
    agent = tether.Agent(name="charts", provider=provider, tools=[chart])
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "How are sales?")
    assert_consistent(result)
    assert result.output == "Up."
    sent = provider.requests[1][1].messages[-1]
    assert sent == Message(
        role="user",
        content=(ToolResultBlock(tool_use_id="call_0_0", content="chart sales:", images=(CHART,)),),
    )
    finished = of(result.events, ev.ToolCallFinished)[0]
    assert finished.outcome == "ok"
    assert finished.content == "chart sales:\n[image: image/jpeg, 16 bytes]"
    assert tether.load_messages(tether.dump_messages(result.messages)) == list(result.messages)


async def test_terminal_tool_image_and_a_bare_image_result() -> None:
    """A bare Image is a result with no text; a terminal tool's output is its text form."""

    @tether.tool(terminal=True)
    def snap() -> Image:
        """Take a photo."""
        return CAT

    agent = tether.Agent(
        name="camera",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="snap")])]),
        tools=[snap],
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "Photo, please.")
    assert result.termination is tether.Termination.TERMINAL_TOOL
    assert result.output == "[image: image/png, 32 bytes]"
    block = result.messages[-1].content[0]
    assert isinstance(block, ToolResultBlock)
    assert (block.content, block.images) == ("", (CAT,))


async def test_images_mixed_with_other_values_are_a_fatal_tool_error() -> None:
    """A list mixing images with non-str values cannot be sent: fatal, with what to do."""

    @tether.tool
    async def bad() -> list[object]:
        """Return a mess."""
        return ["ok", CAT, {"x": 1}]

    agent = tether.Agent(
        name="m",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="bad")]), Reply(text="x")]),
        tools=[bad],
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "go")
    assert result.termination is tether.Termination.FATAL_TOOL_ERROR
    assert result.error is not None
    assert "part 2 is a dict (make it a str" in result.error


# ------------------------------------------------------- over the real wires


def _anthropic_answers() -> list[Answer]:
    return [
        anth.reply(
            True, text=(), tools=(("toolu_1", "chart", ('{"name": "q3"}',)),), stop="tool_use"
        ),
        anth.reply(True, text=("A cat; sales are up.",)),
    ]


def _openai_answers() -> list[Answer]:
    call = {
        "index": 0,
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "chart", "arguments": '{"name": "q3"}'},
    }
    return [
        sse_answer(sse_body(oai.stream_chunks(text=(), tool_deltas=(call,), finish="tool_calls"))),
        oai.reply(True, text=("A cat; sales are up.",)),
    ]


EXPECTED_SECOND_CALL = {
    "anthropic": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "chart", "input": {"name": "q3"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "chart q3:"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/jpeg",
                                "data": JPEG_B64,
                            },
                        },
                    ],
                }
            ],
        },
    ],
    "openai": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "chart", "arguments": '{"name":"q3"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "toolu_1",
            "content": "chart q3:\n[image: image/jpeg, 16 bytes]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by tool call toolu_1:"},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG_B64}"}},
            ],
        },
    ],
}


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_image_input_and_image_tool_result_on_the_wire(kind: str) -> None:
    """A whole run over a fake server: both calls carry the image input, the second the
    tool's image, each as its vendor's wire format has it."""
    answers = _anthropic_answers() if kind == "anthropic" else _openai_answers()
    async with fake_server(*answers) as server:
        agent = tether.Agent(
            name="eyes", provider=wires.make_provider(kind, server.url), tools=[chart]
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, QUESTION)
    assert_consistent(result)
    assert result.output == "A cat; sales are up."
    bodies = [r.json() for r in server.requests]
    assert len(bodies) == 2
    expected = EXPECTED_SECOND_CALL[kind]
    assert bodies[0]["messages"] == expected[:1]
    assert bodies[1]["messages"] == expected
    uses = [b for m in result.messages for b in m.content if isinstance(b, ToolUseBlock)]
    assert [u.id for u in uses] == ["toolu_1"]


def test_images_count_in_token_estimates() -> None:
    """Where tether estimates tokens, each image counts IMAGE_TOKENS_ESTIMATE input tokens."""

    def request(*content: TextBlock | Image | ToolResultBlock) -> ModelRequest:
        return ModelRequest(system="", messages=(Message(role="user", content=content),))

    text = request(TextBlock(text="abcd"))
    with_images = request(
        TextBlock(text="abcd"),
        CAT,
        ToolResultBlock(tool_use_id="t", content="", images=(CHART, CAT)),
    )
    assert estimate_input(with_images) - estimate_input(text) == 3 * IMAGE_TOKENS_ESTIMATE
    assert (
        estimate_input_tokens(with_images) - estimate_input_tokens(text)
        == 3 * IMAGE_TOKENS_ESTIMATE
    )
