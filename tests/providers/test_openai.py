"""OpenAIProvider against a fake Chat Completions server (real sockets)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.providers import (
    AuthenticationFailed,
    MalformedResponse,
    Message,
    ModelRequest,
    OpenAIProvider,
    PermissionDenied,
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
    UsageDelta,
)

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
from .openai_wire import (
    EXPECTED_USAGE,
    MODEL,
    USAGE,
    chunk,
    completion_json,
    error_body,
    provider,
    reply,
    stream_chunks,
)

pytestmark = pytest.mark.anyio


def of_type(items: list[Any], cls: type[Any]) -> list[Any]:
    """The stream items of one class, in order."""
    return [i for i in items if isinstance(i, cls)]


# ---------------------------------------------------------------- happy path


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_text_reply_and_request_shape(stream: bool) -> None:
    """A text reply parses (content, stop, usage) and the request has the Chat Completions shape."""
    async with fake_server(reply(stream)) as server:
        items = await collect(provider(server.url, stream=stream), REQUEST)
    response = final(items)
    assert response.content == (TextBlock(text="Hello, world"),)
    assert response.stop_reason is StopReason.END_TURN
    assert response.raw_stop_reason == "stop"
    assert response.model == MODEL
    assert response.usage == EXPECTED_USAGE
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Hello, world"
    assert [i.usage for i in items if isinstance(i, UsageDelta)] == [EXPECTED_USAGE]

    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert sent.headers["content-type"] == "application/json"
    assert "x-api-key" not in sent.headers
    body = sent.json()
    assert body["model"] == MODEL
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert body["max_tokens"] == 4096  # not api.openai.com: the field local servers know
    assert "max_completion_tokens" not in body
    assert "tools" not in body
    if stream:
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
    else:
        assert "stream" not in body


async def test_request_mapping_tools_results_and_pairing() -> None:
    """Tools, tool calls and results map to Chat Completions messages; errors and raw JSON kept."""
    request = ModelRequest(
        system="sys",
        messages=(
            Message.user("Weather in Paris and Oslo?"),
            Message(
                role="assistant",
                content=(
                    ToolUseBlock(id="call_1", name="weather", input={"city": "Paris"}),
                    ToolUseBlock(id="call_2", name="weather", input='{"city": "Os'),
                ),
            ),
            Message(
                role="user",
                content=(
                    ToolResultBlock(tool_use_id="call_1", content="18°C"),
                    ToolResultBlock(tool_use_id="call_2", content="bad arguments", is_error=True),
                    TextBlock(text="Also, be quick."),
                ),
            ),
            Message(role="assistant", content=(TextBlock(text="Paris: 18°C."),)),
        ),
        tools=(
            ToolDef(
                name="weather",
                description="Current weather.",
                input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
            ),
        ),
        max_tokens=99,
    )
    async with fake_server(reply(True)) as server:
        await collect(provider(server.url, max_tokens_field="max_completion_tokens"), request)
    body = server.requests[0].json()
    assert body["max_completion_tokens"] == 99
    assert "max_tokens" not in body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Current weather.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    # a model's invalid JSON goes back as it was sent
                    "function": {"name": "weather", "arguments": '{"city": "Os'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18°C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: bad arguments"},
        {"role": "user", "content": "Also, be quick."},
        {"role": "assistant", "content": "Paris: 18°C."},
    ]


def test_official_host_uses_max_completion_tokens_and_needs_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """api.openai.com gets max_completion_tokens and needs a key; a local server neither."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    official = OpenAIProvider("gpt-4.1", api_key="k")
    assert official.is_official
    body = official.request_body(REQUEST)
    assert body["max_completion_tokens"] == 4096
    assert "max_tokens" not in body
    local = OpenAIProvider("llama", base_url="http://127.0.0.1:8080/v1")
    assert not local.is_official
    assert local.api_key is None
    forced = OpenAIProvider("llama", base_url="http://x/v1", max_tokens_field="max_tokens")
    assert "max_tokens" in forced.request_body(REQUEST)


async def test_missing_key_official_fails_without_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no key the official host fails AuthenticationFailed naming OPENAI_API_KEY, unsent."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # never connects: the error comes before any request
    exc = await failure(OpenAIProvider("gpt-4o"), REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert "OPENAI_API_KEY" in str(exc)


async def test_missing_key_local_server_sends_no_authorization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local server without a key is called with no Authorization header."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with fake_server(reply(True)) as server:
        response = final(await collect(provider(server.url, api_key=None), REQUEST))
    assert response.text == "Hello, world"
    assert "authorization" not in server.requests[0].headers


async def test_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_API_KEY is read, sent as a Bearer token, and kept out of repr."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    async with fake_server(reply(False)) as server:
        p = provider(server.url, stream=False, api_key=None)
        await collect(p, REQUEST)
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(p)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("stop", StopReason.END_TURN),
        ("tool_calls", StopReason.TOOL_USE),
        ("function_call", StopReason.TOOL_USE),
        ("length", StopReason.MAX_TOKENS),
        ("content_filter", StopReason.REFUSAL),
        ("something_else", StopReason.UNKNOWN),
    ],
)
async def test_finish_reasons(stream: bool, raw: str, expected: StopReason) -> None:
    """Each finish_reason maps to its StopReason (unknown: UNKNOWN); the raw one is kept."""
    async with fake_server(reply(stream, finish=raw)) as server:
        response = final(await collect(provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is expected
    assert response.raw_stop_reason == raw


async def test_null_finish_reason_in_a_whole_response_is_unknown() -> None:
    """A null finish_reason in a whole answer is UNKNOWN with raw None."""
    async with fake_server(json_answer(completion_json(finish=None))) as server:
        response = final(await collect(provider(server.url, stream=False), REQUEST))
    assert response.stop_reason is StopReason.UNKNOWN
    assert response.raw_stop_reason is None


async def test_tool_calls_streamed_in_fragments_by_index() -> None:
    """Streamed tool calls are assembled by index from fragments; cut-off JSON is kept raw."""
    deltas = (
        {
            "index": 0,
            "id": "call_a",
            "type": "function",
            "function": {"name": "search", "arguments": ""},
        },
        {
            "index": 1,
            "id": "call_b",
            "type": "function",
            "function": {"name": "fetch", "arguments": '{"url": '},
        },
        {"index": 0, "function": {"arguments": '{"q": "caf\\u00e9'}},
        {"index": 1, "function": {"arguments": '"https://x.test"}'}},
        {"index": 0, "function": {"arguments": ' cr\\u00e8me"}'}},
        {
            "index": 2,
            "id": "call_c",
            "type": "function",
            "function": {"name": "broken", "arguments": '{"x": tr'},
        },
    )
    body = sse_body(stream_chunks(text=(), tool_deltas=deltas, finish="tool_calls"))
    async with fake_server(sse_answer(body)) as server:
        items = await collect(provider(server.url), REQUEST)
    response = final(items)
    # Each arguments piece streamed as it came, with its call's id and name.
    assert [(d.call_id, d.name, d.arguments_delta) for d in of_type(items, ToolCallDelta)] == [
        ("call_b", "fetch", '{"url": '),
        ("call_a", "search", '{"q": "caf\\u00e9'),
        ("call_b", "fetch", '"https://x.test"}'),
        ("call_a", "search", ' cr\\u00e8me"}'),
        ("call_c", "broken", '{"x": tr'),
    ]
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.content == (
        ToolUseBlock(id="call_a", name="search", input={"q": "café crème"}),
        ToolUseBlock(id="call_b", name="fetch", input={"url": "https://x.test"}),
        ToolUseBlock(id="call_c", name="broken", input='{"x": tr'),
    )


async def test_whole_response_with_tool_calls() -> None:
    """A whole answer's tool calls parse; empty arguments are {}, invalid JSON is kept raw."""
    tools = (("call_1", "now", ""), ("call_2", "add", '{"a": 1, "b": 2}'), ("call_3", "x", "{"))
    answer = json_answer(completion_json(text=None, tools=tools, finish="tool_calls"))
    async with fake_server(answer) as server:
        items = await collect(provider(server.url, stream=False), REQUEST)
    response = final(items)
    # Played as a stream: each call's whole arguments as one delta.
    assert [(d.call_id, d.arguments_delta) for d in of_type(items, ToolCallDelta)] == [
        ("call_1", "{}"),
        ("call_2", '{"a":1,"b":2}'),
        ("call_3", "{"),
    ]
    assert response.text == ""
    assert response.tool_calls == (
        ToolUseBlock(id="call_1", name="now", input={}),
        ToolUseBlock(id="call_2", name="add", input={"a": 1, "b": 2}),
        ToolUseBlock(id="call_3", name="x", input="{"),
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_stop_with_tool_calls_counts_as_tool_use(stream: bool) -> None:
    """finish_reason "stop" with tool calls is TOOL_USE, the raw reason kept."""
    if stream:
        deltas = ({"index": 0, "id": "c1", "function": {"name": "now", "arguments": "{}"}},)
        answer = sse_answer(sse_body(stream_chunks(text=(), tool_deltas=deltas, finish="stop")))
    else:
        answer = json_answer(completion_json(text=None, tools=(("c1", "now", "{}"),)))
    async with fake_server(answer) as server:
        response = final(await collect(provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.raw_stop_reason == "stop"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_refusal(stream: bool) -> None:
    """A refusal (streamed in pieces or whole) is REFUSAL with the refusal as the text."""
    if stream:
        chunks = stream_chunks(text=())
        chunks.insert(1, (None, chunk({"refusal": "I can't help "})))
        chunks.insert(2, (None, chunk({"refusal": "with that."})))
        answer = sse_answer(sse_body(chunks))
    else:
        answer = json_answer(completion_json(text=None, refusal="I can't help with that."))
    async with fake_server(answer) as server:
        response = final(await collect(provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is StopReason.REFUSAL
    assert response.text == "I can't help with that."


async def test_server_without_usage() -> None:
    """A server that sends no usage gives an empty TokenUsage and no UsageDelta."""
    body = sse_body(stream_chunks(usage=None))
    async with fake_server(sse_answer(body), json_answer(completion_json(usage=None))) as server:
        items = await collect(provider(server.url), REQUEST)
        whole = await collect(provider(server.url, stream=False), REQUEST)
    assert final(items).usage == TokenUsage()
    assert not any(isinstance(i, UsageDelta) for i in items)
    assert final(whole).usage == TokenUsage()


async def test_usage_sent_with_the_last_choice_chunk() -> None:
    """Some servers put usage on the finish chunk instead of a chunk with no choices."""
    events = stream_chunks(finish=None, usage=None, done=False)
    events += [(None, chunk({}, "stop", usage=USAGE)), (None, "[DONE]")]
    async with fake_server(sse_answer(sse_body(events))) as server:
        items = await collect(provider(server.url), REQUEST)
    assert final(items).usage == EXPECTED_USAGE
    assert [i.usage for i in items if isinstance(i, UsageDelta)] == [EXPECTED_USAGE]


async def test_stream_ending_cleanly_after_finish_without_done() -> None:
    """A stream that ends after its finish chunk without [DONE] is a good reply."""
    async with fake_server(sse_answer(sse_body(stream_chunks(done=False)))) as server:
        response = final(await collect(provider(server.url), REQUEST))
    assert response.text == "Hello, world"


@pytest.mark.parametrize("done", [True, False], ids=["done", "eof"])
async def test_stream_without_finish_reason_is_interrupted(done: bool) -> None:
    """A stream with no finish_reason ([DONE] or EOF) is StreamInterrupted naming it."""
    body = sse_body(stream_chunks(finish=None, usage=None, done=done))
    async with fake_server(sse_answer(body)) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, StreamInterrupted)
    assert "finish_reason" in str(exc)


async def test_sse_split_mid_utf8_and_mid_json_escape() -> None:
    """Reads split inside UTF-8 characters, JSON escapes and [DONE] still parse exactly."""
    text = ("h\u00e9llo \U0001f600", ' "q" \\')
    deltas = (
        {"index": 0, "id": "c1", "function": {"name": "echo", "arguments": '{"s": "\\u00e9\\"'}},
        {"index": 0, "function": {"arguments": '\U0001f600"}'}},
    )
    body = sse_body(stream_chunks(text=text, tool_deltas=deltas, finish="tool_calls"))
    cuts = []
    for needle, offset in [
        ("\U0001f600".encode(), 2),
        ("\u00e9".encode(), 1),
        (b"\\u00e9", 2),
        (b'\\"', 1),
        (b"[DONE]", 3),
        (b"\n\n", 1),
    ]:
        start = 0
        while (found := body.find(needle, start)) != -1:
            cuts.append(found + offset)
            start = found + 1
    async with fake_server(sse_answer(body, at=cuts, part_delay=0.001)) as server:
        response = final(await collect(provider(server.url), REQUEST))
    assert response.text == 'h\u00e9llo \U0001f600 "q" \\'
    assert response.tool_calls[0].input == {"s": '\u00e9"\U0001f600'}


# ------------------------------------------------------------------- faults


@pytest.mark.parametrize(
    "body",
    [
        {"object": "list"},
        {"choices": []},
        {"choices": [{"index": 0, "finish_reason": "stop"}]},
        {"choices": [{"message": {"content": 5}, "finish_reason": "stop"}]},
        {"choices": [{"message": {"content": "x"}, "finish_reason": 1}]},
        {
            "choices": [
                {"message": {"content": None, "tool_calls": [{"id": "c"}]}, "finish_reason": "x"}
            ]
        },
        {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -1}},
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
        [(None, "[1, 2]")],
        [(None, {"choices": "nope"})],
        [(None, {"choices": [{"index": 0, "delta": {"content": 3}}]})],
        # a tool call that never got a name
        [
            (None, chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})),
            (None, chunk({}, "tool_calls")),
            (None, "[DONE]"),
        ],
    ],
)
async def test_stream_with_wrong_shape(events: list[tuple[str | None, Any]]) -> None:
    """Stream chunks of the wrong shape (or a tool call with no name) are MalformedResponse."""
    async with fake_server(sse_answer(sse_body(events))) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, MalformedResponse)


async def test_error_object_inside_the_stream() -> None:
    """An error object mid-stream is StreamErrorEvent with its message, after the text deltas."""
    events = stream_chunks(finish=None, usage=None, done=False)
    error = {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
    events.append((None, error))
    async with fake_server(sse_answer(sse_body(events))) as server:
        items, exc = await items_and_failure(provider(server.url), REQUEST)
    assert isinstance(exc, StreamErrorEvent)
    assert "The server had an error" in str(exc)
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Hello, world"


async def test_error_object_in_a_200_body() -> None:
    """An error object in a 200 whole answer is StreamErrorEvent with its message."""
    answer = json_answer({"error": {"message": "model crashed", "type": "server_error"}})
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url, stream=False), REQUEST)
    assert isinstance(exc, StreamErrorEvent)
    assert "model crashed" in str(exc)


async def test_429_insufficient_quota_is_permission_denied() -> None:
    """A 429 for an exhausted quota is PermissionDenied: billing, which no retry helps."""
    answer = json_answer(
        error_body("You exceeded your current quota", "insufficient_quota", "insufficient_quota"),
        status=429,
    )
    async with fake_server(answer) as server:
        quota = await failure(provider(server.url), REQUEST)
    assert isinstance(quota, PermissionDenied)  # billing: no retry helps
    assert quota.status == 429


def test_protocol_price_and_gate_key() -> None:
    """OpenAIProvider is a Provider with its name, gate key and price; a local model has none."""
    p = OpenAIProvider("gpt-4o-2024-08-06", api_key="k")
    assert isinstance(p, Provider)
    assert p.name == "openai"
    assert p.gate_key() == "openai:https://api.openai.com/v1"
    price = p.price()
    assert price is not None
    assert (price.input, price.output, price.cache_read) == (2.5, 10.0, 1.25)
    assert OpenAIProvider("my-local-llama", base_url="http://h/v1").price() is None


async def test_tool_arguments_sent_back_as_compact_json() -> None:
    """Tool arguments go back as a JSON string of the input; content is None beside them."""
    message = Message(
        role="assistant",
        content=(ToolUseBlock(id="c", name="t", input={"nested": {"é": [1, 2]}}),),
    )
    body = provider("http://h").request_body(ModelRequest(system="", messages=(message,)))
    arguments = body["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"nested": {"é": [1, 2]}}
    assert body["messages"][0]["content"] is None
