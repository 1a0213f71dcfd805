"""AnthropicProvider with extended thinking, against the fake Messages server (real sockets).

The three-turn conversation with thinking on is in test_conversation_wire.py.
"""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.providers import (
    Message,
    ModelRequest,
    Reasoning,
    ReasoningDelta,
    StopReason,
    TextBlock,
    ToolUseBlock,
)

from .anthropic_wire import message_json, provider, stream_events
from .fakes import REQUEST, SECRET, collect, fake_server, final, json_answer, sse_answer, sse_body

pytestmark = pytest.mark.anyio

THOUGHT = Reasoning(text="Let me add 1 and 2.", signature="sig==", provider="anthropic")
HIDDEN = Reasoning(redacted=True, signature="REDACTED", provider="anthropic")


def thinking_answer(stream: bool) -> Any:
    if stream:
        events = stream_events(
            text=("It is ", "3."),
            thinking=(("Let me add ", "1 and 2."), "sig=="),
            redacted="REDACTED",
        )
        return sse_answer(sse_body(events))
    body = message_json(text="It is 3.")
    body["content"] = [
        {"type": "thinking", "thinking": THOUGHT.text, "signature": "sig=="},
        {"type": "redacted_thinking", "data": "REDACTED"},
        *body["content"],
    ]
    return json_answer(body)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_thinking_blocks_are_read_in_order(stream: bool) -> None:
    """thinking (text and signature) and redacted_thinking become Reasoning blocks, in order;
    the thinking's text streams as ReasoningDelta items before the answer's."""
    async with fake_server(thinking_answer(stream)) as server:
        items = await collect(provider(server.url, stream=stream), REQUEST)
    response = final(items)
    assert response.content == (THOUGHT, HIDDEN, TextBlock(text="It is 3."))
    assert response.stop_reason is StopReason.END_TURN
    deltas = [i for i in items if isinstance(i, ReasoningDelta)]
    assert "".join(d.text for d in deltas) == THOUGHT.text
    assert items.index(deltas[-1]) < min(
        i for i, item in enumerate(items) if type(item).__name__ == "TextDelta"
    )


def body_for(settings: tether.ModelSettings, max_tokens: int | None = None) -> dict[str, Any]:
    request = ModelRequest(
        system="", messages=(Message.user("q"),), settings=settings, max_tokens=max_tokens
    )
    return provider("http://127.0.0.1:9").request_body(request)


def test_thinking_budget_maps_to_the_thinking_field() -> None:
    """The budget goes as budget_tokens; unclamped, the answer's cap comes on top of it."""
    body = body_for(tether.ModelSettings(thinking_budget=2048))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 4096 + 2048
    body = body_for(tether.ModelSettings(thinking_budget=2048, max_tokens=3000))
    assert (body["thinking"]["budget_tokens"], body["max_tokens"]) == (2048, 3000)
    assert body_for(tether.ModelSettings(thinking_budget=0))["thinking"] == {"type": "disabled"}
    assert "thinking" not in body_for(tether.ModelSettings(temperature=0.5))


def test_a_clamped_cap_lowers_the_budget_and_below_the_minimum_turns_thinking_off() -> None:
    """budget_tokens stays below max_tokens; a clamp under 1,025 sends no thinking at all."""
    clamped = body_for(tether.ModelSettings(thinking_budget=8000), max_tokens=5000)
    assert clamped["max_tokens"] == 5000
    assert clamped["thinking"] == {"type": "enabled", "budget_tokens": 4999}
    tight = body_for(tether.ModelSettings(thinking_budget=8000), max_tokens=900)
    assert tight["max_tokens"] == 900
    assert "thinking" not in tight


def test_thinking_settings_are_checked() -> None:
    """max_tokens must exceed the budget; extra_body may not replace the thinking field."""
    anthropic = provider("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="must be more than thinking_budget"):
        anthropic.check_settings(tether.ModelSettings(thinking_budget=2048, max_tokens=2048))
    with pytest.raises(ValueError, match="may not replace 'thinking'"):
        anthropic.check_settings(
            tether.ModelSettings(extra_body={"thinking": {"type": "enabled", "budget_tokens": 1}})
        )
    anthropic.check_settings(tether.ModelSettings(thinking_budget=1024, temperature=1, top_p=0.95))


def test_only_anthropics_own_reasoning_is_sent_back() -> None:
    """A signed thinking block and a redacted one go back as they came; another vendor's
    reasoning (and one without a signature) is left out."""
    request = ModelRequest(
        system="",
        messages=(
            Message.user("q"),
            Message(
                role="assistant",
                content=(
                    THOUGHT,
                    HIDDEN,
                    Reasoning(text="x", signature="ENC", provider="openai-responses", id="rs_1"),
                    Reasoning(text="unsigned", provider="anthropic"),
                    ToolUseBlock(id="toolu_1", name="add", input={"a": 1}),
                ),
            ),
        ),
    )
    body = provider("http://127.0.0.1:9").request_body(request)
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": THOUGHT.text, "signature": "sig=="},
        {"type": "redacted_thinking", "data": "REDACTED"},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}},
    ]
    assert SECRET not in repr(body)
