"""AnthropicProvider against a fake Messages API server (real sockets)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from tether.providers import (
    AnthropicProvider,
    AuthenticationFailed,
    ConnectionDropped,
    HttpPool,
    InvalidRequest,
    MalformedResponse,
    Message,
    ModelRequest,
    ModelResponse,
    NotFound,
    OpenAIProvider,
    Overloaded,
    PermissionDenied,
    Provider,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    StopReason,
    StreamErrorEvent,
    StreamInterrupted,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
    TransientProviderError,
    UsageDelta,
)

from .fakes import (
    SECRET,
    Answer,
    closed_port,
    collect,
    failure,
    fake_server,
    items_and_failure,
    json_answer,
    raw_answer,
    sse_answer,
    sse_body,
)

pytestmark = pytest.mark.anyio

MODEL = "claude-sonnet-4-5-20250929"
REQUEST = ModelRequest(system="Be brief.", messages=(Message.user("Hi"),))


def provider(url: str, *, stream: bool = True, **kw: Any) -> AnthropicProvider:
    return AnthropicProvider(MODEL, api_key=SECRET, base_url=url, stream=stream, **kw)


def message_json(
    *,
    text: str = "Hello!",
    tools: tuple[tuple[str, str, Any], ...] = (),
    stop: str | None = "end_turn",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in tools]
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage
        or {
            "input_tokens": 25,
            "output_tokens": 15,
            "cache_read_input_tokens": 7,
            "cache_creation_input_tokens": 3,
        },
    }


def stream_events(
    *,
    text: tuple[str, ...] = ("Hello", ", world"),
    tools: tuple[tuple[str, str, tuple[str, ...]], ...] = (),
    stop: str | None = "end_turn",
    output_tokens: int = 15,
    end: bool = True,
) -> list[tuple[str | None, Any]]:
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 25,
                        "output_tokens": 1,
                        "cache_read_input_tokens": 7,
                        "cache_creation_input_tokens": 3,
                    },
                },
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    index = 0
    if text:
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        for piece in text:
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    for offset, (call_id, name, fragments) in enumerate(tools):
        i = index + offset
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                },
            )
        )
        for fragment in fragments:
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": fragment},
                    },
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    if end:
        events.append(("message_stop", {"type": "message_stop"}))
    return events


def final(items: list[Any]) -> ModelResponse:
    assert isinstance(items[-1], ModelResponse)
    assert sum(isinstance(i, ModelResponse) for i in items) == 1
    return items[-1]


def reply(stream: bool, **kw: Any) -> Answer:
    """The same answer, as an event stream or as one JSON body."""
    if stream:
        return sse_answer(sse_body(stream_events(**kw)))
    text = "".join(kw.get("text", ("Hello", ", world")))
    tools = tuple((i, n, json.loads("".join(f) or "{}")) for i, n, f in kw.get("tools", ()))
    return json_answer(message_json(text=text, tools=tools, stop=kw.get("stop", "end_turn")))


# ---------------------------------------------------------------- happy path


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_text_reply_and_request_shape(stream: bool) -> None:
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
    async with fake_server(reply(stream, stop=raw)) as server:
        response = final(await collect(provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is expected
    assert response.raw_stop_reason == raw


async def test_tool_use_streaming_assembled_from_partial_json() -> None:
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


async def test_sse_split_mid_utf8_and_mid_json_escape() -> None:
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


async def test_sse_with_crlf_line_ends_split_between_cr_and_lf() -> None:
    body = sse_body(stream_events(), crlf=True)
    cuts = [i + 1 for i in range(len(body)) if body[i : i + 2] == b"\r\n"]
    async with fake_server(sse_answer(body, at=cuts, part_delay=0.0005)) as server:
        response = final(await collect(provider(server.url), REQUEST))
    assert response.text == "Hello, world"


async def test_server_answering_json_to_a_stream_request_is_accepted() -> None:
    async with fake_server(json_answer(message_json(text="whole"))) as server:
        items = await collect(provider(server.url, stream=True), REQUEST)
    assert final(items).text == "whole"
    assert items[0] == TextDelta(text="whole")


async def test_shared_http_pool_reuses_the_connection() -> None:
    answers = (reply(True), reply(False), reply(True))
    async with fake_server(*answers, keep_alive=True) as server, HttpPool() as pool:
        texts = [
            final(await collect(provider(server.url, stream=s), REQUEST, http=pool)).text
            for s in (True, False, True)
        ]
        assert pool.client(server.url) is pool.client(server.url + "/")
    assert texts == ["Hello, world"] * 3
    # a finished stream is read to its end, so its connection goes back to the pool
    assert [r.connection for r in server.requests] == [0, 0, 0]
    assert pool.closed


# ------------------------------------------------------------------- faults


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_slow_first_byte_times_out(stream: bool) -> None:
    async with fake_server(Answer(first_byte_delay=2.0)) as server:
        exc = await failure(provider(server.url, stream=stream, timeout_s=0.05), REQUEST)
    assert isinstance(exc, ProviderTimeout)
    assert isinstance(exc, TransientProviderError)
    assert "timeout" in str(exc)


async def test_slow_event_mid_stream_times_out() -> None:
    body = sse_body(stream_events())
    answer = sse_answer(body, at=[len(body) // 2], part_delay=2.0)
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url, timeout_s=0.05), REQUEST)
    assert isinstance(exc, ProviderTimeout)


async def test_connection_dropped_mid_stream() -> None:
    body = sse_body(stream_events())
    answer = sse_answer(body[: len(body) // 2], drop=True)
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, StreamInterrupted)
    assert "mid-stream" in str(exc)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_connection_closed_without_answer(stream: bool) -> None:
    async with fake_server(Answer(no_answer=True)) as server:
        exc = await failure(provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, ConnectionDropped)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_connection_refused(stream: bool) -> None:
    port = await closed_port()
    exc = await failure(provider(f"http://127.0.0.1:{port}", stream=stream), REQUEST)
    assert isinstance(exc, ConnectionDropped)
    assert exc.__cause__ is not None


async def test_body_cut_short_of_its_content_length() -> None:
    body = json.dumps(message_json()).encode()
    answer = raw_answer(body[:20], content_length=len(body))
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url, stream=False), REQUEST)
    assert isinstance(exc, ConnectionDropped)


async def test_stream_ending_without_message_stop() -> None:
    async with fake_server(sse_answer(sse_body(stream_events(end=False)))) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, StreamInterrupted)
    assert "message_stop" in str(exc)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_malformed_json(stream: bool) -> None:
    answer = (
        sse_answer(sse_body([("message_start", '{"type": "message_start", "mess')]))
        if stream
        else raw_answer(b'{"id": "msg_01", "content": [')
    )
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, MalformedResponse)
    assert isinstance(exc.__cause__, ValueError)


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
    async with fake_server(sse_answer(sse_body(events))) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, MalformedResponse)


async def test_stream_with_wrong_content_type() -> None:
    """A 200 text/plain answer is not the API: fatal, with what came back."""
    async with fake_server(raw_answer(b"data: hi\n\n", content_type="text/plain")) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, InvalidRequest)
    assert "text/plain" in str(exc)


async def test_in_stream_error_event_after_some_text() -> None:
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


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [
        (400, "invalid_request_error", InvalidRequest),
        (401, "authentication_error", AuthenticationFailed),
        (403, "permission_error", PermissionDenied),
        (404, "not_found_error", NotFound),
        (413, "request_too_large", InvalidRequest),
        (429, "rate_limit_error", RateLimited),
        (500, "api_error", ServerError),
        (502, "api_error", ServerError),
        (503, "api_error", ServerError),
        (504, "api_error", ServerError),
        (529, "overloaded_error", Overloaded),
    ],
)
async def test_http_errors(
    stream: bool, status: int, kind: str, error: type[ProviderError]
) -> None:
    answer = json_answer(error_body(kind, f"server says {status}"), status=status)
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url, stream=stream), REQUEST)
    assert type(exc) is error
    assert exc.status == status
    assert f"server says {status}" in str(exc)
    assert kind in str(exc)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_429_retry_after_seconds(stream: bool) -> None:
    answer = json_answer(
        error_body("rate_limit_error", "slow down"), status=429, headers=[("retry-after", "7")]
    )
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, RateLimited)
    assert exc.retry_after == 7.0


async def test_429_retry_after_http_date() -> None:
    import email.utils
    import time

    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    answer = json_answer(
        error_body("rate_limit_error", "slow down"), status=429, headers=[("retry-after", when)]
    )
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, RateLimited)
    assert exc.retry_after is not None
    assert 100 < exc.retry_after <= 120


async def test_529_carries_retry_after_and_error_without_json_body() -> None:
    answers = (
        json_answer(
            error_body("overloaded_error", "busy"), status=529, headers=[("retry-after", "2")]
        ),
        raw_answer(b"<html>Bad gateway</html>", status=502, content_type="text/html"),
    )
    async with fake_server(*answers) as server:
        first = await failure(provider(server.url), REQUEST)
        second = await failure(provider(server.url), REQUEST)
    assert isinstance(first, Overloaded)
    assert first.retry_after == 2.0
    assert isinstance(second, ServerError)
    assert "Bad gateway" in str(second)


# ------------------------------------------------------------------ secrets


async def test_key_never_leaks() -> None:
    echo = error_body("authentication_error", f"invalid x-api-key: {SECRET}")
    async with fake_server(json_answer(echo, status=401)) as server:
        p = provider(server.url)
        exc = await failure(p, REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert "[redacted]" in str(exc)
    assert SECRET not in repr(p)
    assert SECRET not in str(p)
    assert "api_key" not in repr(p)


async def test_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", f"  {SECRET}\n")
    async with fake_server(reply(True)) as server:
        p = AnthropicProvider(MODEL, base_url=server.url)
        await collect(p, REQUEST)
    assert server.requests[0].headers["x-api-key"] == SECRET
    assert SECRET not in repr(p)


async def test_missing_key_fails_at_first_request_without_sending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    async with fake_server(reply(True)) as server:
        p = AnthropicProvider(MODEL, base_url=server.url)
        exc = await failure(p, REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert "ANTHROPIC_API_KEY" in str(exc)
    assert server.requests == []


async def test_key_with_a_newline_inside_is_refused_without_echo() -> None:
    bad = SECRET[:10] + "\n" + SECRET[10:]
    p = AnthropicProvider(MODEL, api_key=bad, base_url="http://127.0.0.1:9")
    exc = await failure(p, REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert SECRET[10:] not in str(exc)


# ------------------------------------------------------------------ protocol


def test_protocol_price_and_gate_key() -> None:
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


async def test_consumer_stopping_early_closes_the_stream_cleanly() -> None:
    """A run that cuts a stream (a ceiling crossed) closes it mid-way: no error, no leak.

    Under trio, an httpx iterator left suspended would be reported as a
    ResourceWarning, which this suite turns into a failure.
    """
    from contextlib import aclosing

    from tether.providers import ProviderContext

    body = sse_body(stream_events())
    answer = sse_answer(body, at=[len(body) // 2], part_delay=0.5)
    async with fake_server(answer) as server:
        stream = provider(server.url).stream(REQUEST, ProviderContext(run_id="r", call_index=0))
        with anyio.fail_after(2):
            async with aclosing(stream):  # type: ignore[type-var]
                async for item in stream:
                    if isinstance(item, TextDelta):
                        break


async def test_cancelled_while_waiting_for_the_next_event() -> None:
    body = sse_body(stream_events())
    answer = sse_answer(body, at=[len(body) // 2], part_delay=2.0)
    async with fake_server(answer) as server:
        with anyio.move_on_after(0.05) as scope:
            await collect(provider(server.url), REQUEST)
    assert scope.cancelled_caught


@pytest.mark.parametrize("url", ["ftp://127.0.0.1", "http://127.0.0.1:99999", "localhost:8080"])
def test_unusable_base_url_is_refused_at_construction(url: str) -> None:
    with pytest.raises(ValueError, match="base_url"):
        AnthropicProvider(MODEL, api_key="k", base_url=url)
    with pytest.raises(ValueError, match="base_url"):
        OpenAIProvider(MODEL, api_key="k", base_url=url)
