"""GeminiProvider against a fake Gemini API server (real sockets): what it sends, what it reads.

The transport matrix (statuses, Retry-After, timeouts, dropped and cut
connections, malformed bodies, keys) runs for Gemini in test_transport.py;
whole runs (the fault matrix, conversations, fallback) in test_gemini_runs.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.providers import (
    AuthenticationFailed,
    ContextWindowExceeded,
    GeminiProvider,
    Image,
    InvalidRequest,
    Message,
    ModelRequest,
    ModelSettings,
    NotFound,
    OutputFormat,
    PermissionDenied,
    RateLimited,
    Reasoning,
    ReasoningDelta,
    ServerError,
    StopReason,
    StreamErrorEvent,
    StreamInterrupted,
    TextBlock,
    TextDelta,
    ToolCallDelta,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
    UsageDelta,
)
from tether.providers._gemini_schema import gemini_schema, parameters_of

from . import gemini_wire as gem
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
STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
ADD = ToolDef(
    name="add",
    description="Add two integers.",
    input_schema={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)


# ---------------------------------------------------------------- happy path


@STREAM
async def test_text_reply_and_request_shape(stream: bool) -> None:
    """A text answer parses (content, stop, usage with thinking as output); the request is
    Gemini's: the path, the key in x-goog-api-key (never in the URL), contents, system."""
    async with fake_server(gem.reply(stream)) as server:
        items = await collect(gem.provider(server.url, stream=stream), REQUEST)
    response = final(items)
    assert response.content == (TextBlock(text="Hello, world"),)
    assert response.stop_reason is StopReason.END_TURN
    assert response.raw_stop_reason == "STOP"
    assert response.model == gem.MODEL
    assert response.usage == gem.EXPECTED_USAGE
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Hello, world"
    reported = [i.usage for i in items if isinstance(i, UsageDelta)]
    assert reported[-1] == gem.EXPECTED_USAGE
    # Streamed, every chunk reports usage; the first (the prompt) and the last are passed on.
    assert len(reported) == (2 if stream else 1)

    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", gem.path(stream))
    assert sent.headers["x-goog-api-key"] == SECRET
    assert SECRET not in sent.path
    assert "authorization" not in sent.headers
    assert sent.json() == {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "systemInstruction": {"role": "user", "parts": [{"text": "Be brief."}]},
        "generationConfig": {"maxOutputTokens": 4096},
    }


async def test_transcript_tools_and_settings_map_to_gemini() -> None:
    """Calls and results (by name, ids tether made not sent), errors as {"error": ...}, images as
    inlineData, tools in Gemini's schema dialect, tool_choice and generationConfig."""
    image = Image.from_bytes(PNG)
    request = ModelRequest(
        system="sys",
        messages=(
            Message(role="user", content=(TextBlock(text="What is this?"), image)),
            Message(
                role="assistant",
                content=(
                    TextBlock(text="Let me add."),
                    ToolUseBlock(id="gemini-call-1", name="add", input={"a": 1, "b": 2}),
                    ToolUseBlock(id="server-id-2", name="look", input='{"bad'),
                ),
            ),
            Message(
                role="user",
                content=(
                    ToolResultBlock(tool_use_id="gemini-call-1", content="3"),
                    ToolResultBlock(
                        tool_use_id="server-id-2",
                        content="bad arguments",
                        is_error=True,
                        images=(image,),
                    ),
                    TextBlock(text="Go on."),
                ),
            ),
        ),
        tools=(ADD, ToolDef(name="look", description="Look.", input_schema={"type": "object"})),
        max_tokens=100,
        settings=ModelSettings(
            temperature=0.2,
            top_p=0.5,
            stop_sequences=["X"],
            seed=3,
            tool_choice="required",
            extra_body={"safetySettings": []},
        ),
    )
    body = gem.provider("http://127.0.0.1:9").request_body(request)
    inline = {"inlineData": {"mimeType": "image/png", "data": image.base64()}}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "What is this?"}, inline]},
        {
            "role": "model",
            "parts": [
                {"text": "Let me add."},
                {"functionCall": {"name": "add", "args": {"a": 1, "b": 2}}},
                {"functionCall": {"name": "look", "args": {}, "id": "server-id-2"}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "add", "response": {"output": "3"}}},
                {
                    "functionResponse": {
                        "name": "look",
                        "response": {"error": "bad arguments"},
                        "id": "server-id-2",
                    }
                },
                inline,
                {"text": "Go on."},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "add",
                    "description": "Add two integers.",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                        "required": ["a", "b"],
                    },
                },
                {"name": "look", "description": "Look."},  # no arguments: no parameters
            ]
        }
    ]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert body["generationConfig"] == {
        "maxOutputTokens": 100,
        "temperature": 0.2,
        "topP": 0.5,
        "stopSequences": ["X"],
        "seed": 3,
    }
    assert body["safetySettings"] == []


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("add", {"mode": "ANY", "allowedFunctionNames": ["add"]}),
    ],
)
def test_tool_choice_is_the_function_calling_mode(choice: str, config: dict[str, Any]) -> None:
    request = ModelRequest(
        system="",
        messages=(Message.user("q"),),
        tools=(ADD,),
        settings=ModelSettings(tool_choice=choice),
    )
    body = gem.provider("http://127.0.0.1:9").request_body(request)
    assert body["toolConfig"] == {"functionCallingConfig": config}
    assert "systemInstruction" not in body


def test_native_output_is_a_response_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}}
    request = ModelRequest(
        system="",
        messages=(Message.user("q"),),
        output_format=OutputFormat(name="out", schema=schema),
    )
    config = gem.provider("http://127.0.0.1:9").request_body(request)["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseSchema"] == {
        "type": "object",
        "properties": {"n": {"type": "integer", "nullable": True}},
    }


def test_a_result_without_its_call_or_a_url_image_is_a_clear_error() -> None:
    provider = gem.provider("http://127.0.0.1:9")
    orphan = ModelRequest(
        system="",
        messages=(Message(role="user", content=(ToolResultBlock(tool_use_id="x", content="1"),)),),
    )
    with pytest.raises(InvalidRequest, match="no matching function call"):
        provider.request_body(orphan)
    url = ModelRequest(
        system="",
        messages=(Message(role="user", content=(Image.from_url("https://example.com/a.png"),)),),
    )
    with pytest.raises(InvalidRequest, match="image URL cannot be sent"):
        provider.request_body(url)


# ----------------------------------------------------------------- answers


@STREAM
async def test_calls_without_ids_get_stable_ids(stream: bool) -> None:
    """Calls Gemini sends without an id get one, the same on the delta and in the response;
    a server's id is kept; STOP with calls is tool_use."""
    calls = ((None, "add", {"a": 2, "b": 3}), ("srv-7", "add", {"a": 1, "b": 1}))
    async with fake_server(gem.call_reply(stream, calls, text="Adding.")) as server:
        items = await collect(gem.provider(server.url, stream=stream), REQUEST)
    response = final(items)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.raw_stop_reason == "STOP"
    first, second = response.tool_calls
    assert first.id.startswith("gemini-call-")
    assert (first.name, first.input) == ("add", {"a": 2, "b": 3})
    assert (second.id, second.input) == ("srv-7", {"a": 1, "b": 1})
    assert isinstance(response.content[0], TextBlock)
    deltas = [i for i in items if isinstance(i, ToolCallDelta)]
    assert [(d.call_id, json.loads(d.arguments_delta)) for d in deltas] == [
        (first.id, {"a": 2, "b": 3}),
        ("srv-7", {"a": 1, "b": 1}),
    ]


async def test_thought_parts_are_reasoning_not_the_answer() -> None:
    """Parts marked thought (summaries) are Reasoning, not text of the answer; their tokens
    are output (and reasoning) tokens."""
    thought = {"text": "Let me think...", "thought": True}
    answer = json_answer(gem.response_json(text="42", extra_parts=(thought,)))
    async with fake_server(answer) as server:
        response = final(await collect(gem.provider(server.url, stream=False), REQUEST))
    assert response.content == (
        Reasoning(text="Let me think...", provider="gemini"),
        TextBlock(text="42"),
    )
    assert response.text == "42"
    assert (response.usage.output_tokens, response.usage.reasoning_tokens) == (12 + 5, 5)


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("MAX_TOKENS", StopReason.MAX_TOKENS),
        ("SAFETY", StopReason.REFUSAL),
        ("RECITATION", StopReason.REFUSAL),
        ("PROHIBITED_CONTENT", StopReason.REFUSAL),
        ("BLOCKLIST", StopReason.REFUSAL),
        ("OTHER", StopReason.UNKNOWN),
        ("SOMETHING_NEW", StopReason.UNKNOWN),
    ],
)
@STREAM
async def test_finish_reasons(stream: bool, finish: str, stop: StopReason) -> None:
    async with fake_server(gem.reply(stream, finish=finish)) as server:
        response = final(await collect(gem.provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is stop
    assert response.raw_stop_reason == finish


@STREAM
async def test_a_blocked_prompt_is_a_refusal(stream: bool) -> None:
    """promptFeedback.blockReason with no candidate: a refusal naming the reason."""
    body = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 8}}
    answer = sse_answer(sse_body([(None, body)])) if stream else json_answer(body)
    async with fake_server(answer) as server:
        response = final(await collect(gem.provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is StopReason.REFUSAL
    assert response.raw_stop_reason == "SAFETY"
    assert response.content == ()
    assert response.usage.input_tokens == 8


@STREAM
async def test_a_malformed_function_call_is_retried_not_answered(stream: bool) -> None:
    """MALFORMED_FUNCTION_CALL has no call to answer: a transient error, with Gemini's message."""
    body = gem.response_json(text=None, finish="MALFORMED_FUNCTION_CALL")
    body["candidates"][0]["finishMessage"] = "Malformed function call: add(a=)"
    answer = sse_answer(sse_body([(None, body)])) if stream else json_answer(body)
    async with fake_server(answer) as server:
        exc = await failure(gem.provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, StreamErrorEvent)
    assert "MALFORMED_FUNCTION_CALL" in str(exc)
    assert "add(a=)" in str(exc)


async def test_a_stream_without_a_finish_reason_is_interrupted() -> None:
    body = sse_body(gem.stream_chunks(finish=None))
    async with fake_server(sse_answer(body)) as server:
        items, exc = await items_and_failure(gem.provider(server.url), REQUEST)
    assert isinstance(exc, StreamInterrupted)
    assert "finishReason" in str(exc)
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Hello, world"


# ------------------------------------------------------------------ errors


@STREAM
async def test_429_waits_the_retry_delay_of_retry_info(stream: bool) -> None:
    """RESOURCE_EXHAUSTED's RetryInfo.retryDelay is the wait, unless a Retry-After header says."""
    async with fake_server(gem.rate_limited("17s")) as server:
        exc = await failure(gem.provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, RateLimited)
    assert exc.retry_after == 17.0
    assert exc.status == 429
    assert "RESOURCE_EXHAUSTED" in str(exc)
    header = json_answer(
        gem.error_body(429, "RESOURCE_EXHAUSTED", "slow", "17s"),
        status=429,
        headers=[("retry-after", "3")],
    )
    async with fake_server(header) as server:
        exc = await failure(gem.provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, RateLimited)
    assert exc.retry_after == 3.0


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        (400, "INVALID_ARGUMENT", InvalidRequest),
        (400, "FAILED_PRECONDITION", InvalidRequest),
        (403, "PERMISSION_DENIED", PermissionDenied),
        (404, "NOT_FOUND", NotFound),
        (500, "INTERNAL", ServerError),
        (503, "UNAVAILABLE", ServerError),
    ],
)
async def test_google_error_statuses(code: int, status: str, error: type[Exception]) -> None:
    async with fake_server(gem.error(code, status, f"server says {code}")) as server:
        exc = await failure(gem.provider(server.url), REQUEST)
    assert type(exc) is error
    assert f"{status}: server says {code}" in str(exc)


async def test_an_error_list_body_and_an_in_stream_error() -> None:
    """The streaming endpoint may wrap its error in a list; an error chunk mid-stream is typed."""
    listed = json_answer([gem.error_body(503, "UNAVAILABLE", "overloaded")], status=503)
    in_stream = sse_answer(
        sse_body(
            [
                *gem.stream_chunks(finish=None)[:1],
                (None, gem.error_body(400, "INVALID_ARGUMENT", "bad tool")),
            ]
        )
    )
    async with fake_server(listed, in_stream) as server:
        first = await failure(gem.provider(server.url), REQUEST)
        second = await failure(gem.provider(server.url), REQUEST)
    assert isinstance(first, ServerError)
    assert "UNAVAILABLE: overloaded" in str(first)
    assert type(second) is InvalidRequest
    assert "bad tool" in str(second)


@STREAM
async def test_a_prompt_too_long_is_context_window_exceeded(stream: bool) -> None:
    async with fake_server(gem.too_long()) as server:
        exc = await failure(gem.provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, ContextWindowExceeded)
    assert exc.status == 400


async def test_a_token_quota_429_is_a_rate_limit_not_a_prompt_too_long() -> None:
    message = "Quota exceeded: input tokens per minute exceeds the maximum number of tokens"
    async with fake_server(gem.error(429, "RESOURCE_EXHAUSTED", message, "2s")) as server:
        exc = await failure(gem.provider(server.url), REQUEST)
    assert type(exc) is RateLimited
    assert exc.retry_after == 2.0


async def test_a_key_echoed_in_a_google_error_is_redacted() -> None:
    echo = gem.error(400, "INVALID_ARGUMENT", f"API key not valid: {SECRET}")
    async with fake_server(echo) as server:
        exc = await failure(gem.provider(server.url), REQUEST)  # failure() checks the chain too
    assert "[redacted]" in str(exc)


# ------------------------------------------------------------ keys, settings


async def test_no_key_fails_before_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    async with fake_server(gem.reply(True)) as server:
        exc = await failure(GeminiProvider(gem.MODEL, base_url=server.url), REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert "GEMINI_API_KEY" in str(exc)
    assert server.requests == []


def test_keys_come_from_gemini_api_key_then_google_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google")
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    assert GeminiProvider(gem.MODEL).api_key == "from-google"
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini")
    assert GeminiProvider(gem.MODEL).api_key == "from-gemini"
    assert GeminiProvider(gem.MODEL, api_key="given").api_key == "given"
    assert "given" not in repr(GeminiProvider(gem.MODEL, api_key="given"))


def test_model_ids_and_bad_construction() -> None:
    assert GeminiProvider("models/gemini-2.5-pro", api_key="k").model == "gemini-2.5-pro"
    with pytest.raises(ValueError, match="model id"):
        GeminiProvider("a/b", api_key="k")
    with pytest.raises(ValueError, match="api_version"):
        GeminiProvider(gem.MODEL, api_key="k", api_version="../x")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (ModelSettings(parallel_tool_calls=False), "parallel_tool_calls"),
        (ModelSettings(metadata={"user_id": "u"}), "metadata"),
        (ModelSettings(stop_sequences=["a", "b", "c", "d", "e", "f"]), "at most 5"),
        (ModelSettings(extra_body={"contents": []}), "contents"),
        (ModelSettings(extra_headers={"x-goog-api-key": "other"}), "x-goog-api-key"),
    ],
)
def test_settings_gemini_cannot_honour_are_refused(settings: ModelSettings, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gem.provider("http://127.0.0.1:9").check_settings(settings)


# ------------------------------------------------------------ schema dialect


def test_json_schema_is_converted_to_geminis_dialect() -> None:
    """$ref inlined (a recursive one cut), type lists and null members made nullable, oneOf as
    anyOf, const and non-string enums, exclusive bounds; unsupported keywords dropped."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "title": "Args",
        "properties": {
            "where": {"$ref": "#/$defs/Place"},
            "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
            "unit": {"const": "C"},
            "level": {"enum": [1, 2, 3], "description": "How loud"},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "n": {"type": ["number", "null"], "exclusiveMinimum": 0, "multipleOf": 2},
            "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "node": {"$ref": "#/$defs/Node"},
        },
        "required": ["where", "ghost"],
        "additionalProperties": False,
        "$defs": {
            "Place": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
            "Node": {
                "type": "object",
                "description": "A tree node",
                "properties": {"child": {"$ref": "#/$defs/Node"}},
            },
        },
    }
    converted = gemini_schema(schema)
    assert converted == {
        "type": "object",
        "title": "Args",
        "properties": {
            "where": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
            "when": {"type": "string", "format": "date-time", "nullable": True},
            "unit": {"type": "string", "enum": ["C"]},
            "level": {"type": "integer", "description": "How loud (one of: 1, 2, 3)"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "n": {"type": "number", "minimum": 0, "nullable": True},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "node": {
                "type": "object",
                "description": "A tree node",
                "properties": {"child": {"type": "object", "description": "A tree node"}},
            },
        },
        "required": ["where"],
    }
    assert "$defs" in schema  # the tool's own schema is not changed
    assert parameters_of({"type": "object", "properties": {}}) is None


async def test_a_usage_report_that_would_take_back_tokens_is_not_reported_live() -> None:
    """Reports are cumulative and charged by difference: one whose counts went down (a cached
    count that arrived late) is not yielded; the response has the last report."""
    early = {"promptTokenCount": 30, "candidatesTokenCount": 1}
    chunks = [
        (None, gem.response_json(text="Hi", finish=None, usage=early)),
        (None, gem.response_json(text=None, usage=gem.USAGE)),
    ]
    async with fake_server(sse_answer(sse_body(chunks))) as server:
        items = await collect(gem.provider(server.url), REQUEST)
    reported = [i.usage for i in items if isinstance(i, UsageDelta)]
    assert [(u.input_tokens, u.cache_read_tokens) for u in reported] == [(30, 0)]
    assert final(items).usage == gem.EXPECTED_USAGE


# ------------------------------------------------------------------ thinking


@pytest.mark.parametrize(
    ("settings", "config"),
    [
        (ModelSettings(thinking_budget=1024), {"thinkingBudget": 1024, "includeThoughts": True}),
        (ModelSettings(thinking_budget=-1), {"thinkingBudget": -1, "includeThoughts": True}),
        (ModelSettings(thinking_budget=0), {"thinkingBudget": 0}),
        (ModelSettings(reasoning_effort="low"), {"thinkingLevel": "low", "includeThoughts": True}),
    ],
)
def test_thinking_settings_are_the_thinking_config(
    settings: ModelSettings, config: dict[str, Any]
) -> None:
    provider = gem.provider("http://127.0.0.1:9")
    provider.check_settings(settings)
    request = ModelRequest(system="", messages=(Message.user("q"),), settings=settings)
    assert provider.request_body(request)["generationConfig"]["thinkingConfig"] == config


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (ModelSettings(reasoning_effort="xhigh"), "thinkingLevel"),
        (ModelSettings(reasoning_effort="none"), "thinkingLevel"),
        (ModelSettings(reasoning_effort="low", thinking_budget=100), "not both"),
    ],
)
def test_thinking_settings_gemini_cannot_take(settings: ModelSettings, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gem.provider("http://127.0.0.1:9").check_settings(settings)


async def test_thoughts_and_signatures_are_kept_in_place_and_sent_back_unchanged() -> None:
    """Thought text streams as ReasoningDelta and is kept as Reasoning; each thoughtSignature
    is kept just before the part it came on, and goes back on that same part, unchanged."""
    async with fake_server(sse_answer(sse_body(gem.thinking_chunks()))) as server:
        items = await collect(gem.provider(server.url), REQUEST)
    response = final(items)
    assert [i.text for i in items if isinstance(i, ReasoningDelta)] == ["I should ", "add."]
    call_id = response.tool_calls[0].id
    assert response.content == (
        Reasoning(text="I should add.", provider="gemini"),
        Reasoning(signature=gem.SIG_CALL, provider="gemini"),
        ToolUseBlock(id=call_id, name="add", input={"a": 2, "b": 3}),
        TextBlock(text="Adding now."),
        Reasoning(signature=gem.SIG_TEXT, provider="gemini"),
    )
    assert response.text == "Adding now."
    sent = gem.provider("http://127.0.0.1:9").request_body(
        ModelRequest(system="", messages=(Message(role="assistant", content=response.content),))
    )
    assert sent["contents"] == [
        {
            "role": "model",
            "parts": [
                {"text": "I should add.", "thought": True},
                {
                    "functionCall": {"name": "add", "args": {"a": 2, "b": 3}},
                    "thoughtSignature": gem.SIG_CALL,
                },
                {"text": "Adding now."},
                {"text": "", "thoughtSignature": gem.SIG_TEXT},
            ],
        }
    ]


def test_other_providers_reasoning_is_not_sent_to_gemini() -> None:
    """A signature is good only to its vendor: Anthropic's thinking is skipped."""
    message = Message(
        role="assistant",
        content=(
            Reasoning(text="hm", signature="anthropic-sig", provider="anthropic"),
            TextBlock(text="ok"),
        ),
    )
    sent = gem.provider("http://127.0.0.1:9").request_body(
        ModelRequest(system="", messages=(message,))
    )
    assert sent["contents"] == [{"role": "model", "parts": [{"text": "ok"}]}]


def test_a_tools_schema_is_converted_once_and_forgotten_with_the_tool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every request offers the same ToolDef: its declaration is made once, and dropped when
    the tool is (no cache grows with tools that are gone)."""
    import gc

    from tether.providers import _gemini

    calls = []
    real = _gemini.parameters_of
    monkeypatch.setattr(_gemini, "parameters_of", lambda schema: calls.append(1) or real(schema))
    tool = ToolDef(name="t", description="d", input_schema=dict(ADD.input_schema))
    provider = gem.provider("http://127.0.0.1:9")
    request = ModelRequest(system="", messages=(Message.user("q"),), tools=(tool,))
    bodies = [provider.request_body(request) for _ in range(3)]
    assert len(calls) == 1
    assert bodies[0]["tools"] == bodies[2]["tools"]
    before = len(_gemini._DECLARATIONS)
    del request, tool, bodies
    gc.collect()
    assert len(_gemini._DECLARATIONS) == before - 1
