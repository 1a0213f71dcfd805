"""AnthropicProvider against a fake Messages API server (real sockets)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.providers import (
    AnthropicProvider,
    AuthenticationFailed,
    InvalidRequest,
    MalformedResponse,
    Message,
    ModelRequest,
    ModelResponse,
    Provider,
    StopReason,
    StreamErrorEvent,
    StreamInterrupted,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
    TransientProviderError,
    UsageDelta,
)

from .anthropic_wire import MODEL, provider, reply, stream_events
from .fakes import (
    REQUEST,
    SECRET,
    collect,
    failure,
    fake_server,
    final,
    items_and_failure,
    json_answer,
    sse_answer,
    sse_body,
)

pytestmark = pytest.mark.anyio

# ---------------------------------------------------------------- happy path


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_text_reply_and_request_shape(stream: bool) -> None:
    """A text reply parses (content, stop, usage) and the request has the Messages API shape."""
    async with fake_server(reply(stream)) as server:
        items = await collect(provider(server.url, stream=stream), REQUEST)
    response = final(items)
    assert response.text == "Hello, world"
    assert response.content == (TextBlock(text="Hello, world"),)
    assert response.stop_reason is StopReason.END_TURN
    assert response.raw_stop_reason == "end_turn"
    assert response.model == MODEL
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Hello, world"
    usages = [i.usage for i in items if isinstance(i, UsageDelta)]
    assert (
        usages[-1]
        == response.usage
        == TokenUsage(input_tokens=25, output_tokens=15, cache_read_tokens=7, cache_write_tokens=3)
    )
    if stream:  # message_start, then the cumulative count of message_delta
        assert [u.output_tokens for u in usages] == [1, 15]
        assert [type(i).__name__ for i in items][:1] == ["UsageDelta"]

    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == SECRET
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    body = sent.json()
    assert body["model"] == MODEL
    assert body["max_tokens"] == 4096
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert "tools" not in body
    assert body.get("stream", False) is stream


async def test_request_mapping_tools_results_and_pairing() -> None:
    """Tools, uses and results map to API blocks: results first, paired; bad input sent as {}."""
    request = ModelRequest(
        system="",
        messages=(
            Message.user("What's the weather in Paris and Oslo?"),
            Message(
                role="assistant",
                content=(
                    TextBlock(text="Checking."),
                    ToolUseBlock(id="toolu_1", name="weather", input={"city": "Paris"}),
                    ToolUseBlock(id="toolu_2", name="weather", input='{"city": "Os'),
                ),
            ),
            Message(
                role="user",
                content=(
                    TextBlock(text="(results below)"),
                    ToolResultBlock(tool_use_id="toolu_2", content="bad arguments", is_error=True),
                    ToolResultBlock(tool_use_id="toolu_1", content="18°C, sunny"),
                ),
            ),
        ),
        tools=(
            ToolDef(
                name="weather",
                description="Current weather.",
                input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
            ),
        ),
        max_tokens=321,
    )
    async with fake_server(reply(True)) as server:
        await collect(provider(server.url), request)
    body = server.requests[0].json()
    assert "system" not in body  # empty system is omitted
    assert body["max_tokens"] == 321
    assert body["tools"] == [
        {
            "name": "weather",
            "description": "Current weather.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
            # a model's invalid JSON cannot go back as input: the API wants an object
            {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}},
        ],
    }
    # tool results first (the API requires it), paired by id, is_error kept
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": "bad arguments",
                "is_error": True,
            },
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C, sunny"},
            {"type": "text", "text": "(results below)"},
        ],
    }


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("end_turn", StopReason.END_TURN),
        ("stop_sequence", StopReason.STOP_SEQUENCE),
        ("tool_use", StopReason.TOOL_USE),
        ("max_tokens", StopReason.MAX_TOKENS),
        ("pause_turn", StopReason.PAUSE_TURN),
        ("refusal", StopReason.REFUSAL),
        ("model_context_window_exceeded", StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED),
        ("brand_new_reason", StopReason.UNKNOWN),
        (None, StopReason.UNKNOWN),
    ],
)
async def test_stop_reasons(stream: bool, raw: str | None, expected: StopReason) -> None:
    """Each stop_reason maps to its StopReason (unknown or null: UNKNOWN); the raw one is kept."""
    async with fake_server(reply(stream, stop=raw)) as server:
        response = final(await collect(provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is expected
    assert response.raw_stop_reason == raw


async def test_tool_use_streaming_assembled_from_partial_json() -> None:
    """Streamed tool uses are built from input_json_delta fragments; cut-off JSON is kept raw."""
    tools = (
        ("toolu_a", "search", ('{"query": "caf', "\\u00e9 ", 'cr\\u00e8me", "limit"', ": 3}")),
        ("toolu_b", "now", ()),  # no input deltas: the start block's input
        ("toolu_c", "broken", ('{"x": ', "tru")),  # cut off: invalid JSON kept raw
    )
    async with fake_server(sse_answer(sse_body(stream_events(tools=tools, stop="tool_use")))) as s:
        items = await collect(provider(s.url), REQUEST)
    response = final(items)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.text == "Hello, world"
    assert response.tool_calls == (
        ToolUseBlock(id="toolu_a", name="search", input={"query": "café crème", "limit": 3}),
        ToolUseBlock(id="toolu_b", name="now", input={}),
        ToolUseBlock(id="toolu_c", name="broken", input='{"x": tru'),
    )
    # Each input_json_delta piece streamed as it came, with its call's id and name.
    assert [i for i in items if isinstance(i, ToolCallDelta)] == [
        ToolCallDelta(call_id=call_id, name=name, arguments_delta=piece)
        for call_id, name, pieces in tools
        for piece in pieces
    ]


async def test_sse_split_mid_utf8_and_mid_json_escape() -> None:
    """Reads split inside UTF-8 characters, JSON escapes and SSE fields still parse exactly."""
    text = ("Caf\u00e9 \U0001f600 ", 'say "hi" \\ done')
    tools = (("toolu_1", "echo", ('{"s": "\\u00e9\\"\\n', '\U0001f600"}')),)
    body = sse_body(stream_events(text=text, tools=tools, stop="tool_use"))
    cuts: list[int] = []
    for needle, offset in [
        ("\U0001f600".encode(), 1),  # inside a 4-byte character
        ("\U0001f600".encode(), 3),
        ("\u00e9".encode(), 1),  # inside a 2-byte character
        (b"\\u00e9", 3),  # inside a \u escape
        (b'\\"', 1),  # between the backslash and the quote
        (b"\\\\", 1),
        (b"data: ", 3),  # inside a field name
        (b"\n\n", 1),  # between the two newlines ending an event
    ]:
        start = 0
        while (found := body.find(needle, start)) != -1:
            cuts.append(found + offset)
            start = found + 1
    answer = sse_answer(body, at=cuts, part_delay=0.001)
    assert len(answer.parts) > 20
    async with fake_server(answer) as server:
        response = final(await collect(provider(server.url), REQUEST))
    assert response.text == "Caf\u00e9 \U0001f600 " + 'say "hi" \\ done'
    assert response.tool_calls[0].input == {"s": '\u00e9"\n\U0001f600'}


# ------------------------------------------------------------------- faults


async def test_stream_ending_without_message_stop() -> None:
    """A stream that ends without message_stop is StreamInterrupted naming message_stop."""
    async with fake_server(sse_answer(sse_body(stream_events(end=False)))) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, StreamInterrupted)
    assert "message_stop" in str(exc)


@pytest.mark.parametrize(
    "body",
    [
        {"hello": "world"},
        [1, 2, 3],
        {"content": "not a list", "stop_reason": "end_turn"},
        {"content": [{"type": "text", "text": 42}], "stop_reason": "end_turn"},
        {"content": [{"type": "tool_use", "name": "x", "input": {}}], "stop_reason": "tool_use"},
        {"content": [], "stop_reason": 7},
        {"content": [], "stop_reason": "end_turn", "usage": {"input_tokens": "many"}},
    ],
)
async def test_200_with_wrong_shape(body: Any) -> None:
    """A 200 whole answer of the wrong shape is MalformedResponse."""
    async with fake_server(json_answer(body)) as server:
        exc = await failure(provider(server.url, stream=False), REQUEST)
    assert isinstance(exc, MalformedResponse)


@pytest.mark.parametrize(
    "events",
    [
        # a delta for a block that never started
        [
            ("message_start", {"type": "message_start", "message": {"usage": {}}}),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta"}},
            ),
        ],
        # an event that is not an object
        [("message_start", "[1, 2]")],
        # message_stop with no message_start
        [("message_stop", {"type": "message_stop"})],
        # a text delta whose text is not a string
        [
            ("message_start", {"type": "message_start", "message": {}}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": None},
                },
            ),
        ],
    ],
)
async def test_stream_with_wrong_shape(events: list[tuple[str, Any]]) -> None:
    """Stream events of the wrong shape or out of order are MalformedResponse."""
    async with fake_server(sse_answer(sse_body(events))) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, MalformedResponse)


async def test_in_stream_error_event_after_some_text() -> None:
    """An overloaded error event mid-stream is a transient StreamErrorEvent, after the deltas."""
    events = stream_events(end=False)[:5]
    events.append(
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    async with fake_server(sse_answer(sse_body(events))) as server:
        items, exc = await items_and_failure(provider(server.url), REQUEST)
    assert isinstance(exc, StreamErrorEvent)
    assert isinstance(exc, TransientProviderError)
    assert "overloaded_error" in str(exc)
    assert "Overloaded" in str(exc)
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["Hello", ", world"]
    assert not any(isinstance(i, ModelResponse) for i in items)


async def test_in_stream_fatal_error_event() -> None:
    """An invalid_request_error event in the stream is InvalidRequest with the server's message."""
    events = [
        (
            "error",
            {"type": "error", "error": {"type": "invalid_request_error", "message": "bad tools"}},
        )
    ]
    async with fake_server(sse_answer(sse_body(events))) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, InvalidRequest)
    assert "bad tools" in str(exc)


# ------------------------------------------------------------------ secrets


async def test_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """ANTHROPIC_API_KEY is read (whitespace stripped), sent as x-api-key, and kept out of repr."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", f"  {SECRET}\n")
    async with fake_server(reply(True)) as server:
        p = AnthropicProvider(MODEL, base_url=server.url)
        await collect(p, REQUEST)
    assert server.requests[0].headers["x-api-key"] == SECRET
    assert SECRET not in repr(p)


async def test_missing_key_fails_at_first_request_without_sending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no key the first call is AuthenticationFailed naming the variable; nothing is sent."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    async with fake_server(reply(True)) as server:
        p = AnthropicProvider(MODEL, base_url=server.url)
        exc = await failure(p, REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert "ANTHROPIC_API_KEY" in str(exc)
    assert server.requests == []


# ------------------------------------------------------------------ protocol


def test_protocol_price_and_gate_key() -> None:
    """AnthropicProvider is a Provider with its name, gate key and price; max_tokens must be > 0."""
    p = AnthropicProvider(MODEL, api_key="k", base_url="https://example.test/")
    assert isinstance(p, Provider)
    assert p.name == "anthropic"
    assert p.gate_key() == "anthropic:https://example.test"
    price = p.price()
    assert price is not None
    assert price.input == 3.0
    assert price.output == 15.0
    assert AnthropicProvider("claude-unknown-9", api_key="k").price() is None
    with pytest.raises(ValueError, match="max_tokens"):
        AnthropicProvider(MODEL, api_key="k", max_tokens=0)
