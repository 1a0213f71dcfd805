"""Shared HTTP pieces: retry-after, error mapping, the pool, SSE splits, Backoff."""

from __future__ import annotations

import email.utils
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tether.providers import (
    AnthropicProvider,
    AuthenticationFailed,
    Backoff,
    ConnectionDropped,
    FatalProviderError,
    HttpPool,
    InvalidRequest,
    MalformedResponse,
    ModelResponse,
    NotFound,
    OpenAIProvider,
    OpenAIResponsesProvider,
    Overloaded,
    PermissionDenied,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    StreamInterrupted,
    TransientProviderError,
    parse_retry_after,
)
from tether.providers._wire_errors import (
    error_for_exception,
    error_for_status,
    retry_after_from_headers,
)

from .fakes import SECRET, assert_no_secret, collect, sse_body

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0


# -------------------------------------------------------------- retry-after


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("0", 0.0),
        ("-3", 0.0),
        (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
        ("soon", None),
        ("", None),
        ("nan", None),
        ("inf", None),
        (None, None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    """Retry-After parses seconds and HTTP dates (never negative); junk, nan and inf are None."""
    assert parse_retry_after(value, now=NOW) == expected


def test_retry_after_headers_prefer_milliseconds() -> None:
    """retry-after-ms wins over Retry-After when valid, any case; no header gives None."""
    assert retry_after_from_headers({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_from_headers({"Retry-After-Ms": "junk", "Retry-After": "9"}) == 9.0
    assert retry_after_from_headers({"retry-after-ms": "-5"}) == 0.0
    assert retry_after_from_headers({}) is None


# ------------------------------------------------------------ error mapping


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, InvalidRequest),
        (401, AuthenticationFailed),
        (403, PermissionDenied),
        (404, NotFound),
        (405, InvalidRequest),
        (408, ProviderTimeout),
        (409, ServerError),
        (413, InvalidRequest),
        (422, InvalidRequest),
        (429, RateLimited),
        (500, ServerError),
        (502, ServerError),
        (503, ServerError),
        (504, ServerError),
        (529, Overloaded),
        (599, ServerError),
        (302, InvalidRequest),
    ],
)
def test_error_for_status(status: int, error: type[ProviderError]) -> None:
    """Each status maps to its error class and keeps it; transient ones carry the Retry-After."""
    exc = error_for_status(status, body=b"", headers={"retry-after": "3"}, provider="p")
    assert type(exc) is error
    assert exc.status == status
    if isinstance(exc, TransientProviderError):
        assert exc.retry_after == 3.0
    else:
        assert isinstance(exc, FatalProviderError)


def test_error_message_is_the_servers_truncated_and_redacted() -> None:
    """An error's message is the server's, prefixed, the key redacted and the text truncated."""
    body = json.dumps(
        {"error": {"type": "invalid_request_error", "message": f"key {SECRET} " + "x" * 2000}}
    )
    exc = error_for_status(400, body=body, provider="anthropic", secrets=[SECRET])
    text = str(exc)
    assert text.startswith("anthropic: HTTP 400 Bad Request: invalid_request_error: key [redacted]")
    assert len(text) < 600
    assert_no_secret(exc)


def test_overloaded_error_type_on_a_5xx_is_overloaded() -> None:
    """A 5xx whose error type is overloaded_error is Overloaded."""
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert isinstance(error_for_status(503, body=json.dumps(body)), Overloaded)


@pytest.mark.parametrize(
    ("exc", "mid_stream", "error"),
    [
        (httpx.ConnectTimeout("t"), False, ProviderTimeout),
        (httpx.ReadTimeout("t"), True, ProviderTimeout),
        (httpx.WriteTimeout("t"), False, ProviderTimeout),
        (httpx.PoolTimeout("t"), False, ProviderTimeout),
        (httpx.ConnectError("refused"), False, ConnectionDropped),
        (httpx.ReadError("reset"), False, ConnectionDropped),
        (httpx.WriteError("broken pipe"), False, ConnectionDropped),
        (httpx.RemoteProtocolError("closed"), False, ConnectionDropped),
        (httpx.ReadError("reset"), True, StreamInterrupted),
        (httpx.RemoteProtocolError("incomplete chunked read"), True, StreamInterrupted),
        (httpx.DecodingError("bad gzip"), True, MalformedResponse),
        (httpx.UnsupportedProtocol("ftp"), False, InvalidRequest),
    ],
)
def test_error_for_exception(exc: Exception, mid_stream: bool, error: type[ProviderError]) -> None:
    """Each httpx exception maps to its error class (mid-stream reads: StreamInterrupted)."""
    mapped = error_for_exception(exc, provider="p", mid_stream=mid_stream)
    assert type(mapped) is error
    assert mapped.status is None


def test_error_for_exception_redacts() -> None:
    """A key inside an httpx exception's message is redacted."""
    mapped = error_for_exception(httpx.ConnectError(f"x {SECRET}"), secrets=[SECRET])
    assert SECRET not in str(mapped)


# ---------------------------------------------------------------- Backoff


def test_backoff_wait_honours_retry_after_and_cap() -> None:
    """Backoff grows to its cap, a longer Retry-After wins but is capped, jitter stays in range."""
    backoff = Backoff(initial=0.5, multiplier=2.0, cap=10.0, jitter=False)
    assert [backoff.wait(n) for n in (1, 2, 3, 4, 5, 6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert backoff.wait(1, retry_after=3.0) == 3.0  # the server's longer wait wins
    assert backoff.wait(4, retry_after=1.0) == 4.0  # ... only when longer
    assert backoff.wait(1, retry_after=600.0) == 10.0  # still capped
    jittered = Backoff(initial=1.0, cap=10.0, jitter=True)
    for attempt in range(1, 8):
        base = min(10.0, 2.0 ** (attempt - 1))
        assert base / 2 <= jittered.wait(attempt) <= base
        assert jittered.wait(attempt, retry_after=7.0) >= 7.0


# ----------------------------------------------------------------- HttpPool


async def test_http_pool_one_client_per_endpoint() -> None:
    """HttpPool keeps one client per endpoint, closes them all, and refuses use once closed."""
    pool = HttpPool()
    a = pool.client("https://api.anthropic.com")
    assert pool.client("https://api.anthropic.com/") is a
    b = pool.client("https://api.openai.com/v1")
    assert b is not a
    await pool.aclose()
    assert a.is_closed
    assert b.is_closed
    with pytest.raises(RuntimeError, match="closed"):
        pool.client("https://api.anthropic.com")
    await pool.aclose()  # idempotent


# ------------------------------------------- SSE: every split point, both formats


class _Parts(httpx.AsyncByteStream):
    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            await anyio.lowlevel.checkpoint()
            yield part


class _OneClientPool:
    """An ``HttpPoolLike`` whose client answers from an in-memory transport."""

    def __init__(self, handler: Any) -> None:
        self.http = httpx.AsyncClient(transport=httpx.MockTransport(handler))

    def client(self, base_url: str) -> httpx.AsyncClient:
        return self.http


ANTHROPIC_EVENTS: list[tuple[str | None, Any]] = [
    (
        "message_start",
        {
            "type": "message_start",
            "message": {"model": "m", "usage": {"input_tokens": 3, "output_tokens": 1}},
        },
    ),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": 'é\U0001f600"\\\n'},
        },
    ),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"k": "\\u00e9'},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '\\"€"}'},
        },
    ),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]

OPENAI_EVENTS: list[tuple[str | None, Any]] = [
    (None, {"choices": [{"index": 0, "delta": {"content": 'é\U0001f600"\\\n'}}]}),
    (
        None,
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "t", "function": {"name": "n", "arguments": '{"k'}}
                        ]
                    },
                }
            ]
        },
    ),
    (
        None,
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": 0, "function": {"arguments": '": "é\\"€"}'}}]
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        },
    ),
    (None, "[DONE]"),
]


_RESPONSES_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "f",
    "arguments": '{"k": "é\\"€"}',
}
RESPONSES_EVENTS: list[tuple[str | None, Any]] = [
    (
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**_RESPONSES_CALL, "arguments": ""},
        },
    ),
    ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "é\U0001f600"}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "delta": '"\\\n'}),
    (
        "response.function_call_arguments.delta",
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 1,
            "delta": _RESPONSES_CALL["arguments"],
        },
    ),
    (
        "response.completed",
        {
            "type": "response.completed",
            "response": {
                "status": "completed",
                "output": [
                    {
                        "type": "message",
                        "id": "msg_1",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": 'é\U0001f600"\\\n'}],
                    },
                    _RESPONSES_CALL,
                ],
            },
        },
    ),
]


def _check(response: ModelResponse) -> None:
    assert response.text == 'é\U0001f600"\\\n'
    assert response.tool_calls[0].input == {"k": 'é"€'}


@pytest.mark.parametrize(
    ("provider", "events"),
    [
        (AnthropicProvider("m", api_key=SECRET, base_url="http://fake"), ANTHROPIC_EVENTS),
        (OpenAIProvider("m", api_key=SECRET, base_url="http://fake/v1"), OPENAI_EVENTS),
        (
            OpenAIResponsesProvider("m", api_key=SECRET, base_url="http://fake/v1"),
            RESPONSES_EVENTS,
        ),
    ],
    ids=["anthropic", "openai", "openai-responses"],
)
@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
async def test_every_split_point(provider: Any, events: Any, crlf: bool) -> None:
    """The body cut in two at every byte offset (CRLF: around every CR), then bytewise."""
    body = sse_body(events, crlf=crlf)
    cuts: list[int] = list(range(1, len(body)))
    if crlf:
        cuts = sorted({i + d for i in range(len(body)) if body[i] == 13 for d in (0, 1, 2)})
    plans = [[body[:i], body[i:]] for i in cuts if 0 < i < len(body)]
    plans.append([body[i : i + 1] for i in range(len(body))])
    plan_iter = iter(plans)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=_Parts(next(plan_iter)),
        )

    pool = _OneClientPool(handler)
    try:
        for _ in plans:
            items = await collect(provider, _request(), http=pool)
            _check(items[-1])
    finally:
        await pool.http.aclose()


def _request() -> Any:
    from tether.providers import Message, ModelRequest

    return ModelRequest(system="", messages=(Message.user("x"),))


def test_a_secret_cut_by_the_truncation_is_still_redacted_whole() -> None:
    """A key the truncation would cut in two is still redacted: no prefix of it shows."""
    body = json.dumps({"error": {"message": "x" * 480 + SECRET}})
    exc = error_for_status(401, body=body, secrets=[SECRET])
    assert "sk-test-" not in str(exc)
