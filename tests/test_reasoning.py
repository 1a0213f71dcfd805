"""Reasoning as content (docs/guides/reasoning.md): ``tether.Reasoning`` in the
transcript, live ``ReasoningDelta`` events, the settings, and thinking tokens as output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import (
    AnthropicProvider,
    Message,
    OpenAIProvider,
    Reasoning,
    Reply,
    ScriptedProvider,
    TextBlock,
)

from .helpers import assert_consistent, of

THOUGHT = Reasoning(text="The user wants a sum.", signature="sig-1", provider="anthropic")
HIDDEN = Reasoning(redacted=True, signature="ENCRYPTED==", provider="anthropic")


def test_reasoning_is_checked_when_made() -> None:
    """A redacted block has no text; fields of the wrong type are refused at once."""
    with pytest.raises(ValueError, match="redacted Reasoning has no text"):
        Reasoning(text="secret", redacted=True)
    with pytest.raises(TypeError, match=r"Reasoning\.signature"):
        Reasoning(text="x", signature=b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Reasoning\.text"):
        Reasoning(text=None)  # type: ignore[arg-type]
    assert "ENCRYPTED" not in repr(HIDDEN), "the payload is not shown in full"


def test_the_json_form_of_reasoning() -> None:
    """Reasoning blocks dump as tagged objects without their empty fields, and load back equal."""
    transcript = [Message(role="assistant", content=(THOUGHT, HIDDEN, TextBlock(text="5")))]
    data = tether.dump_messages(transcript)
    assert data[0]["content"][:2] == [
        {"type": "reasoning", "text": THOUGHT.text, "signature": "sig-1", "provider": "anthropic"},
        {
            "type": "reasoning",
            "redacted": True,
            "signature": "ENCRYPTED==",
            "provider": "anthropic",
        },
    ]
    assert tether.load_messages(json.loads(json.dumps(data))) == transcript


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ({"type": "reasoning", "text": 3}, r"content\[0\]\.text: must be a string"),
        ({"type": "reasoning", "redacted": "yes"}, r"content\[0\]\.redacted: must be true"),
        ({"type": "reasoning", "signature": 1}, r"content\[0\]\.signature: must be a string"),
        (
            {"type": "reasoning", "text": "t", "redacted": True},
            r"content\[0\]: a redacted Reasoning has no text",
        ),
    ],
)
def test_malformed_reasoning_says_where(block: dict[str, Any], error: str) -> None:
    """A bad reasoning block is a ValueError naming its place."""
    with pytest.raises(ValueError, match=error):
        tether.load_messages([{"role": "assistant", "content": [block]}])


def test_the_settings_are_checked() -> None:
    """reasoning_effort takes the vendors' levels; thinking_budget is tokens, or -1."""
    assert tether.ModelSettings(reasoning_effort="high", thinking_budget=2048).given() == {
        "reasoning_effort": "high",
        "thinking_budget": 2048,
    }
    with pytest.raises(ValueError, match="reasoning_effort must be one of"):
        tether.ModelSettings(reasoning_effort="max")
    with pytest.raises(TypeError, match="reasoning_effort must be a str"):
        tether.ModelSettings(reasoning_effort=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="thinking_budget must be"):
        tether.ModelSettings(thinking_budget=-2)
    with pytest.raises(TypeError, match="thinking_budget must be an int"):
        tether.ModelSettings(thinking_budget=True)


@pytest.mark.parametrize(
    ("provider", "settings", "error"),
    [
        (
            AnthropicProvider(model="claude-sonnet-4-5", api_key="k"),
            tether.ModelSettings(reasoning_effort="high"),
            "cannot honour ModelSettings.reasoning_effort",
        ),
        (
            AnthropicProvider(model="claude-sonnet-4-5", api_key="k"),
            tether.ModelSettings(thinking_budget=500),
            "at least 1024",
        ),
        (
            AnthropicProvider(model="claude-sonnet-4-5", api_key="k"),
            tether.ModelSettings(thinking_budget=2048, temperature=0.5),
            "temperature",
        ),
        (
            AnthropicProvider(model="claude-sonnet-4-5", api_key="k"),
            tether.ModelSettings(thinking_budget=2048, tool_choice="required"),
            "tool_choice",
        ),
        (
            OpenAIProvider(model="gpt-4o", api_key="k"),
            tether.ModelSettings(thinking_budget=2048),
            "cannot honour ModelSettings.thinking_budget",
        ),
    ],
)
@pytest.mark.anyio
async def test_a_setting_the_provider_cannot_honour_is_refused(
    provider: Any, settings: tether.ModelSettings, error: str
) -> None:
    """A reasoning setting the provider cannot honour is refused at once (agent or run)."""
    with pytest.raises(ValueError, match=error):
        tether.Agent(name="a", provider=provider, settings=settings)
    agent = tether.Agent(name="a", provider=provider)
    async with tether.Runtime() as rt:
        with pytest.raises(ValueError, match=error):
            rt.start(agent, "hi", settings=settings)


def thinking_agent(**kw: Any) -> tether.Agent:
    script = [Reply(text="Five.", reasoning=[THOUGHT, HIDDEN]), Reply(text="Six.")]
    return tether.Agent(name="a", provider=ScriptedProvider(script, record=True), **kw)


@pytest.mark.anyio
async def test_reasoning_is_kept_in_the_transcript_and_sent_back() -> None:
    """The blocks are in RunResult.messages, and the next run's request carries them."""
    agent = thinking_agent()
    async with tether.Runtime() as rt:
        first = await rt.run(agent, "2 + 3?")
        second = await rt.run(agent, "and + 1?", history=first.messages)
    assert_consistent(first)
    assert first.messages[-1].content == (THOUGHT, HIDDEN, TextBlock(text="Five."))
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    sent = provider.requests[1][1].messages
    assert sent[1].content == (THOUGHT, HIDDEN, TextBlock(text="Five."))
    assert second.messages[:2] == first.messages


@pytest.mark.anyio
async def test_a_conversation_store_keeps_reasoning(tmp_path: Path) -> None:
    """A stored conversation reads back its reasoning blocks, signatures and all."""
    agent = thinking_agent()
    store = tether.SQLiteConversationStore(tmp_path / "c.db")
    async with tether.Runtime(conversations=store) as rt:
        await rt.run(agent, "2 + 3?", conversation="c1")
        await rt.run(agent, "and + 1?", conversation="c1")
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    assert provider.requests[1][1].messages[1].content[:2] == (THOUGHT, HIDDEN)


@pytest.mark.anyio
async def test_reasoning_deltas_are_live_only() -> None:
    """events(deltas=True) has the reasoning's text before the answer's; the trail has none."""
    async with tether.Runtime() as rt:
        handle = rt.start(thinking_agent(), "2 + 3?")
        live = [e async for e in handle.events(deltas=True)]
        result = await handle.result()
    deltas = [e for e in live if isinstance(e, ev.ReasoningDelta | ev.TextDelta)]
    assert [(type(e).__name__, e.text) for e in deltas] == [
        ("ReasoningDelta", THOUGHT.text),
        ("TextDelta", "Five."),
    ]
    assert deltas[0].call_index == 0
    assert not [e for e in result.events if isinstance(e, ev.DELTA_TYPES)]


@pytest.mark.anyio
async def test_thinking_counts_toward_the_token_ceiling() -> None:
    """Streamed reasoning is output: a long thought crosses max_total_tokens before any text."""
    script = [Reply(text="Five.", reasoning=[Reasoning(text="hmm " * 500)])]
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider(script),
        limits=tether.Limits(max_total_tokens=100),
    )
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "2 + 3?")
        live = [e async for e in handle.events(deltas=True)]
        result = await handle.result()
    assert result.termination == tether.Termination.TOKEN_CEILING
    assert of(live, ev.ReasoningDelta)
    assert not of(live, ev.TextDelta), "the ceiling cut the call before its text"
    assert result.usage.output_tokens >= 500


@pytest.mark.anyio
async def test_stream_text_skips_reasoning() -> None:
    """stream_text() gives the answer's text only, never the reasoning's."""
    async with tether.Runtime() as rt:
        chunks = [c async for c in rt.start(thinking_agent(), "2 + 3?").stream_text()]
    assert "".join(chunks) == "Five."
