"""OpenAIResponsesProvider against a fake Responses API server (real sockets).

The transport faults every HTTP provider shares (statuses, Retry-After,
timeouts, dropped connections, malformed bodies) run in test_transport.py;
this file has what is the Responses API's own: the request's shape, the
stream's events, reasoning items, stop reasons, usage, errors inside a
response, and whole runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import (
    AuthenticationFailed,
    Backoff,
    Image,
    InvalidRequest,
    MalformedResponse,
    Message,
    ModelRequest,
    OpenAIResponsesProvider,
    OutputFormat,
    Provider,
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
    price_for,
)

from ..helpers import assert_consistent, of
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
from .responses_wire import (
    EXPECTED_USAGE,
    MODEL,
    error_body,
    function_call,
    message,
    provider,
    reasoning,
    reply,
    response_json,
    stream_events,
)

pytestmark = pytest.mark.anyio

STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
FAST = Backoff(initial=0.001, cap=0.01, jitter=False)
ADD = ToolDef(
    name="add",
    description="Add two integers.",
    input_schema={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
THOUGHT = reasoning("rs_1", ["Adding.", "Then answering."], "ENC-1")


def of_type(items: list[Any], cls: type[Any]) -> list[Any]:
    return [i for i in items if isinstance(i, cls)]


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# ---------------------------------------------------------------- happy path


@STREAM
async def test_text_reply_and_request_shape(stream: bool) -> None:
    """A text answer: deltas, usage with cache reads and reasoning tokens; the request's shape."""
    async with fake_server(reply(stream)) as server:
        items = await collect(provider(server.url, stream=stream), REQUEST)
    response = final(items)
    assert response.text == "Hello, world"
    assert response.stop_reason is StopReason.END_TURN
    assert response.raw_stop_reason == "completed"
    assert response.usage == EXPECTED_USAGE
    assert response.model == MODEL
    assert "".join(d.text for d in of_type(items, TextDelta)) == "Hello, world"
    assert of_type(items, UsageDelta)[-1].usage == EXPECTED_USAGE
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    body = request.json()
    expected = {
        "model": MODEL,
        "input": [{"role": "user", "content": "Hi"}],
        "instructions": "Be brief.",
        "max_output_tokens": 4096,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    if stream:
        expected["stream"] = True
    assert body == expected


async def test_a_model_that_does_not_reason_is_not_asked_for_encrypted_reasoning() -> None:
    """gpt-4.1 refuses include=reasoning.encrypted_content: not sent to it (reasoning= says)."""
    async with fake_server(reply(False), reply(False), reply(False)) as server:
        for kw in ({}, {"reasoning": True}, {"store": True}):
            p = OpenAIResponsesProvider(
                "gpt-4.1", api_key=SECRET, base_url=f"{server.url}/v1", stream=False, **kw
            )
            await collect(p, REQUEST)
    bodies = [r.json() for r in server.requests]
    assert "include" not in bodies[0]
    assert bodies[1]["include"] == ["reasoning.encrypted_content"]
    assert "include" not in bodies[2]
    assert bodies[2]["store"] is True


@STREAM
async def test_tool_calls_and_reasoning_items(stream: bool) -> None:
    """Reasoning items become Reasoning blocks (one per summary part), calls ToolUseBlocks."""
    output = [
        THOUGHT,
        function_call("call_1", "add", '{"a": 1, "b": 2}'),
        function_call("call_2", "add", '{"a": 3, "b": 4}'),
    ]
    async with fake_server(reply(stream, text="", output=output)) as server:
        items = await collect(provider(server.url, stream=stream), REQUEST)
    response = final(items)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.content == (
        Reasoning(text="Adding.", signature="ENC-1", provider="openai-responses", id="rs_1"),
        Reasoning(text="Then answering.", provider="openai-responses", id="rs_1"),
        ToolUseBlock(id="call_1", name="add", input={"a": 1, "b": 2}),
        ToolUseBlock(id="call_2", name="add", input={"a": 3, "b": 4}),
    )
    assert "".join(d.text for d in of_type(items, ReasoningDelta)) == "Adding.Then answering."
    deltas = of_type(items, ToolCallDelta)
    assert {d.call_id for d in deltas} == {"call_1", "call_2"}
    joined = "".join(d.arguments_delta for d in deltas if d.call_id == "call_1")
    assert json.loads(joined) == {"a": 1, "b": 2}


async def test_the_answer_is_read_from_the_done_items_when_completed_has_no_output() -> None:
    """A response.completed without output: the items of response.output_item.done count."""
    events = stream_events([THOUGHT, message("ok")], completed_output=False)
    async with fake_server(sse_answer(sse_body(events))) as server:
        response = final(await collect(provider(server.url), REQUEST))
    assert response.text == "ok"
    assert response.reasoning[0].signature == "ENC-1"


async def test_request_mapping_of_a_whole_transcript() -> None:
    """Reasoning, text, calls, results (errors, images) and images map to Responses items."""
    png = Image.from_bytes(b"\x89PNG\r\n\x1a\n" + bytes(8))
    mine = {"provider": "openai-responses", "id": "rs_9"}
    request = ModelRequest(
        system="sys",
        tools=(ADD,),
        messages=(
            Message(role="user", content=(TextBlock(text="Look"), png)),
            Message(
                role="assistant",
                content=(
                    Reasoning(text="a", signature="ENC", **mine),
                    Reasoning(text="b", **mine),
                    Reasoning(text="theirs", signature="sig", provider="anthropic"),
                    Reasoning(text="no payload", provider="openai-responses", id="rs_8"),
                    TextBlock(text="Adding."),
                    ToolUseBlock(id="call_1", name="add", input={"a": 1, "b": 2}),
                    ToolUseBlock(id="call_2", name="add", input="{not json"),
                ),
            ),
            Message(
                role="user",
                content=(
                    ToolResultBlock(tool_use_id="call_1", content="3"),
                    ToolResultBlock(
                        tool_use_id="call_2", content="bad", is_error=True, images=(png,)
                    ),
                ),
            ),
        ),
    )
    p = OpenAIResponsesProvider(MODEL, api_key=SECRET)
    body = p.request_body(request)
    assert body["tools"] == [
        {
            "type": "function",
            "name": "add",
            "description": "Add two integers.",
            "parameters": ADD.input_schema,
            "strict": False,
        }
    ]
    url = png.data_url()
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Look"},
                {"type": "input_image", "image_url": url, "detail": "auto"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_9",
            "summary": [
                {"type": "summary_text", "text": "a"},
                {"type": "summary_text", "text": "b"},
            ],
            "encrypted_content": "ENC",
        },
        {"role": "assistant", "content": "Adding."},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a":1,"b":2}'},
        {"type": "function_call", "call_id": "call_2", "name": "add", "arguments": "{not json"},
        {"type": "function_call_output", "call_id": "call_1", "output": "3"},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": f"Error: bad\n{png.describe()}",
        },
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Images returned by tool call call_2:"},
                {"type": "input_image", "image_url": url, "detail": "auto"},
            ],
        },
    ]
    # With store=True, an item without its encrypted content is sent by id (OpenAI has it).
    stored = OpenAIResponsesProvider(MODEL, api_key=SECRET, store=True).request_body(request)
    assert [i.get("id") for i in stored["input"] if i.get("type") == "reasoning"] == [
        "rs_9",
        "rs_8",
    ]


async def test_settings_and_output_format_map_to_the_body() -> None:
    """ModelSettings go to their Responses fields; a native output format to text.format."""
    settings = tether.ModelSettings(
        temperature=0.5,
        top_p=0.9,
        max_tokens=99,
        tool_choice="add",
        parallel_tool_calls=False,
        metadata={"user": "u1"},
        reasoning_effort="low",
        extra_body={"service_tier": "flex"},
        extra_headers={"x-trace": "t1"},
    )
    out = OutputFormat(name="answer", schema={"type": "object"}, strict=True)
    request = ModelRequest(
        system="", messages=(Message.user("q"),), tools=(ADD,), settings=settings, max_tokens=50
    )
    request = ModelRequest(
        system=request.system,
        messages=request.messages,
        tools=request.tools,
        settings=settings,
        max_tokens=50,
        output_format=out,
    )
    p = OpenAIResponsesProvider(MODEL, api_key=SECRET, reasoning_summary="auto")
    body = p.request_body(request)
    assert body["max_output_tokens"] == 50, "the clamped cap wins"
    assert body["temperature"] == 0.5
    assert body["top_p"] == 0.9
    assert body["tool_choice"] == {"type": "function", "name": "add"}
    assert body["parallel_tool_calls"] is False
    assert body["metadata"] == {"user": "u1"}
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["service_tier"] == "flex"
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "answer",
            "schema": {"type": "object"},
            "strict": True,
        }
    }
    assert "instructions" not in body
    assert p._http_call(request).headers["x-trace"] == "t1"


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        (tether.ModelSettings(stop_sequences=["END"]), "stop_sequences"),
        (tether.ModelSettings(seed=1), "seed"),
        (tether.ModelSettings(thinking_budget=2048), "thinking_budget"),
        (tether.ModelSettings(extra_body={"store": True}), "may not replace 'store'"),
        (tether.ModelSettings(extra_headers={"Authorization": "x"}), "authorization"),
    ],
)
def test_settings_the_api_cannot_take_are_refused(
    settings: tether.ModelSettings, error: str
) -> None:
    """Stop sequences, seeds and thinking budgets have no place here: a ValueError at once."""
    with pytest.raises(ValueError, match=error):
        tether.Agent(
            name="a", provider=OpenAIResponsesProvider(MODEL, api_key="k"), settings=settings
        )


def test_reasoning_effort_needs_a_reasoning_model() -> None:
    """reasoning_effort on a model that does not reason is refused, unless reasoning=True."""
    settings = tether.ModelSettings(reasoning_effort="high")
    with pytest.raises(ValueError, match="does not look like a reasoning model"):
        tether.Agent(
            name="a", provider=OpenAIResponsesProvider("gpt-4o", api_key="k"), settings=settings
        )
    provider_ = OpenAIResponsesProvider("my-finetune", api_key="k", reasoning=True)
    tether.Agent(name="a", provider=provider_, settings=settings)
    with pytest.raises(ValueError, match="reasoning_summary"):
        OpenAIResponsesProvider("gpt-4o", api_key="k", reasoning_summary="auto")
    with pytest.raises(ValueError, match="reasoning_summary"):
        OpenAIResponsesProvider(MODEL, api_key="k", reasoning_summary="long")  # type: ignore[arg-type]


# ---------------------------------------------------------------- stop reasons


@STREAM
@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("max_output_tokens", StopReason.MAX_TOKENS),
        ("content_filter", StopReason.REFUSAL),
        ("max_messages", StopReason.UNKNOWN),
    ],
)
async def test_incomplete_details_map_to_stop_reasons(
    stream: bool, reason: str, expected: StopReason
) -> None:
    """status incomplete: incomplete_details.reason is the stop reason (and the raw one)."""
    answer = reply(stream, text=("Partial",), status="incomplete", incomplete=reason)
    async with fake_server(answer) as server:
        response = final(await collect(provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is expected
    assert response.raw_stop_reason == reason
    assert response.text == "Partial"


@STREAM
async def test_refusal(stream: bool) -> None:
    """A refusal content part is a refusal; its text is the answer's."""
    answer = reply(stream, text="", output=[message("", refusal="I can't help with that.")])
    async with fake_server(answer) as server:
        response = final(await collect(provider(server.url, stream=stream), REQUEST))
    assert response.stop_reason is StopReason.REFUSAL
    assert response.text == "I can't help with that."


# ---------------------------------------------------------------- failures


@STREAM
@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("server_error", ServerError),
        ("rate_limit_exceeded", RateLimited),
        ("invalid_prompt", StreamErrorEvent),
    ],
)
async def test_a_failed_response_raises_a_typed_error(
    stream: bool, code: str, error: type[Exception]
) -> None:
    """status failed (response.failed, or a whole failed response): its error, typed."""
    failed = response_json(
        status="failed", usage=None, error={"code": code, "message": f"it went {code}"}
    )
    if stream:
        events = [
            *stream_events(end=False),
            ("response.failed", {"type": "response.failed", "response": failed}),
        ]
        answer = sse_answer(sse_body(events))
    else:
        answer = json_answer(failed)
    async with fake_server(answer) as server:
        exc = await failure(provider(server.url, stream=stream), REQUEST)
    assert type(exc) is error
    assert f"it went {code}" in str(exc)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("context_length_exceeded", tether.providers.ContextWindowExceeded),
        ("invalid_api_key", AuthenticationFailed),
        ("ERR_SOMETHING", StreamErrorEvent),
        ("rate_limit_exceeded", RateLimited),
    ],
)
async def test_an_error_event_in_the_stream(code: str, error: type[Exception]) -> None:
    """An ``error`` event raises the error its code names, after the deltas before it."""
    events = [
        *stream_events([message("Hel")], end=False),
        ("error", {"type": "error", "code": code, "message": "boom", "param": None}),
    ]
    async with fake_server(sse_answer(sse_body(events))) as server:
        items, exc = await items_and_failure(provider(server.url), REQUEST)
    assert type(exc) is error
    assert "boom" in str(exc)
    assert of_type(items, TextDelta)


async def test_a_stream_without_its_terminal_event_is_interrupted() -> None:
    """Ending after the items but before response.completed is StreamInterrupted."""
    events = stream_events([message("Hello")], end=False)
    async with fake_server(sse_answer(sse_body(events))) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, StreamInterrupted)
    assert "before response.completed" in str(exc)


@pytest.mark.parametrize(
    "events",
    [
        [("response.output_text.delta", {"type": "response.output_text.delta", "delta": 3})],
        [
            (
                "response.function_call_arguments.delta",
                {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{"},
            )
        ],
        [("response.completed", {"type": "response.completed", "response": {"output": "x"}})],
    ],
)
async def test_events_of_the_wrong_shape_are_malformed(events: list[Any]) -> None:
    """A delta that is not text, arguments for no call, or an output that is no list."""
    async with fake_server(sse_answer(sse_body(events))) as server:
        exc = await failure(provider(server.url), REQUEST)
    assert isinstance(exc, MalformedResponse)


async def test_a_missing_key_for_openai_fails_without_sending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No key for api.openai.com: AuthenticationFailed before any request."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    p = OpenAIResponsesProvider(MODEL)
    exc = await failure(p, REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert "OPENAI_API_KEY" in str(exc)


def test_protocol_price_and_gate_key() -> None:
    """It is a Provider; priced by the table (an unknown model is None); its own gate."""
    p = OpenAIResponsesProvider(MODEL, api_key=SECRET)
    assert isinstance(p, Provider)
    assert p.price() == price_for("gpt-5-mini")
    assert p.price() is not None
    assert OpenAIResponsesProvider("gpt-9-unknown", api_key="k").price() is None
    assert p.gate_key() == "openai-responses:https://api.openai.com/v1"
    assert SECRET not in repr(p)


# ---------------------------------------------------------------- whole runs


@STREAM
async def test_a_run_with_a_tool_round(stream: bool) -> None:
    """A tool round then an answer: the second request carries the reasoning, call and output."""
    first = reply(
        stream, text="", output=[THOUGHT, function_call("call_1", "add", '{"a": 2, "b": 3}')]
    )
    async with fake_server(first, reply(stream, text=("It is ", "5."))) as server:
        agent = tether.Agent(
            name="calc",
            instructions="Use tools.",
            provider=provider(server.url, stream=stream),
            tools=[add],
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "2 + 3?")
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "It is 5."
    second = server.requests[1].json()
    assert second["input"] == [
        {"role": "user", "content": "2 + 3?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": THOUGHT["summary"],
            "encrypted_content": "ENC-1",
        },
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a":2,"b":3}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "5"},
    ]
    price = price_for(MODEL)
    assert price is not None
    calls = of(result.events, ev.ModelCallFinished)
    assert result.usage.cost_usd == pytest.approx(sum(price.cost(c.usage) for c in calls))
    assert calls[0].usage.reasoning_tokens == 5
    assert SECRET not in json.dumps([ev.dump(e) for e in result.events])


async def test_a_429_is_retried_and_the_run_answers() -> None:
    """A 429 with retry-after-ms is retried (ProviderRetry rate_limited), then answered."""
    limited = json_answer(
        error_body("Rate limit reached", "requests", "rate_limit_exceeded"),
        status=429,
        headers=[("retry-after-ms", "5")],
    )
    async with fake_server(limited, reply(True)) as server:
        agent = tether.Agent(name="a", provider=provider(server.url, backoff=FAST))
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "hi")
    assert result.termination is tether.Termination.ANSWERED
    assert [r.error_type for r in of(result.events, ev.ProviderRetry)] == ["rate_limited"]
    assert len(server.requests) == 2


async def test_a_prompt_too_long_takes_the_trim_path() -> None:
    """A 400 context_length_exceeded trims the transcript once and the run answers."""
    too_long = json_answer(
        error_body(
            "Your input exceeds the context window of this model.",
            "invalid_request_error",
            "context_length_exceeded",
        ),
        status=400,
    )
    rounds = [
        reply(False, text="", output=[function_call(f"call_{n}", "add", f'{{"a": {n}, "b": 1}}')])
        for n in range(3)
    ]
    async with fake_server(*rounds, too_long, reply(False, text="Done.")) as server:
        agent = tether.Agent(
            name="a",
            provider=provider(server.url, stream=False),
            tools=[add],
            context=tether.TruncateOldest(keep_last=2),
        )
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "hi")
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "Done."
    assert ("continue", "context_trimmed") in [
        (t.kind, t.reason) for t in of(result.events, ev.Transition)
    ]
    sent = server.requests[4].json()["input"]
    assert sent[0] == {"role": "user", "content": "hi"}
    assert [i.get("type") for i in sent[1:]] == ["function_call", "function_call_output"]


async def test_a_bad_request_is_not_retried() -> None:
    """A 400 that is not about length ends the run provider_failed after one request."""
    bad = json_answer(error_body("Unknown parameter: 'foo'.", "invalid_request_error"), status=400)
    async with fake_server(bad, bad) as server:
        agent = tether.Agent(name="a", provider=provider(server.url, backoff=FAST))
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "hi")
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert result.error.startswith(f"{InvalidRequest.__name__}: ")
    assert len(server.requests) == 1
