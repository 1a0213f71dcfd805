"""HTTP transport behaviour both providers share, against the fake server (real sockets).

Each test runs once per provider (the ``wire`` fixture): statuses, Retry-After,
timeouts, refused and dropped connections, bodies cut short or malformed, SSE
framing, the shared pool, key redaction, early close and cancellation. What is
specific to one wire format stays in test_anthropic.py and test_openai.py.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import anyio
import attrs
import pytest

from tether.providers import (
    AnthropicProvider,
    AuthenticationFailed,
    ConnectionDropped,
    GeminiProvider,
    HttpPool,
    InvalidRequest,
    MalformedResponse,
    ModelResponse,
    NotFound,
    OpenAIProvider,
    OpenAIResponsesProvider,
    Overloaded,
    PermissionDenied,
    Provider,
    ProviderContext,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    StreamInterrupted,
    TextDelta,
    TransientProviderError,
)

from ..helpers import AUTOJUMP, cancel_once_blocked
from . import anthropic_wire, gemini_wire, openai_wire, responses_wire
from .fakes import (
    REQUEST,
    SECRET,
    Answer,
    closed_port,
    collect,
    failure,
    fake_server,
    final,
    items_and_failure,
    json_answer,
    raw_answer,
    sse_answer,
    sse_body,
)

pytestmark = pytest.mark.anyio

STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])


@attrs.frozen
class Wire:
    """One provider as the transport tests drive it."""

    name: str
    #: ``provider(server_url, stream=..., **kw)``: the provider aimed at the fake server.
    provider: Callable[..., Provider]
    #: ``construct(base_url)``: the provider built on exactly that base URL.
    construct: Callable[[str], Provider]
    #: ``reply(stream, text=(...))``: a good answer reading "Hello, world" by default.
    reply: Callable[..., Answer]
    #: ``stream_body(crlf=...)``: the SSE body of a good streamed answer.
    stream_body: Callable[..., bytes]
    #: The JSON body of a good whole answer.
    json_body: Callable[[], bytes]
    #: ``error_body(kind, message)``: the provider's error object.
    error_body: Callable[[str, str], dict[str, Any]]
    #: ``malformed(stream)``: an answer whose JSON is cut short.
    malformed: Callable[[bool], Answer]


ANTHROPIC = Wire(
    name="anthropic",
    provider=anthropic_wire.provider,
    construct=lambda url: AnthropicProvider(anthropic_wire.MODEL, api_key="k", base_url=url),
    reply=anthropic_wire.reply,
    stream_body=lambda crlf=False: sse_body(anthropic_wire.stream_events(), crlf=crlf),
    json_body=lambda: json.dumps(anthropic_wire.message_json()).encode(),
    error_body=anthropic_wire.error_body,
    malformed=anthropic_wire.malformed,
)

OPENAI = Wire(
    name="openai",
    provider=openai_wire.provider,
    construct=lambda url: OpenAIProvider(openai_wire.MODEL, api_key="k", base_url=url),
    reply=openai_wire.reply,
    stream_body=lambda crlf=False: sse_body(openai_wire.stream_chunks(), crlf=crlf),
    json_body=lambda: json.dumps(openai_wire.completion_json()).encode(),
    error_body=lambda kind, message: openai_wire.error_body(message, kind),
    malformed=openai_wire.malformed,
)


RESPONSES = Wire(
    name="openai-responses",
    provider=responses_wire.provider,
    construct=lambda url: OpenAIResponsesProvider(responses_wire.MODEL, api_key="k", base_url=url),
    reply=responses_wire.reply,
    stream_body=lambda crlf=False: sse_body(
        responses_wire.stream_events(
            [responses_wire.message("Hello, world")],
            text_pieces=("Hello", ", world"),
            in_progress=False,
        ),
        crlf=crlf,
    ),
    json_body=lambda: json.dumps(
        responses_wire.response_json([responses_wire.message("Hello, world")])
    ).encode(),
    error_body=lambda kind, message: responses_wire.error_body(message, kind),
    malformed=responses_wire.malformed,
)


GEMINI = Wire(
    name="gemini",
    provider=gemini_wire.provider,
    construct=lambda url: GeminiProvider(gemini_wire.MODEL, api_key="k", base_url=url),
    reply=gemini_wire.reply,
    stream_body=lambda crlf=False: sse_body(gemini_wire.stream_chunks(), crlf=crlf),
    json_body=lambda: json.dumps(gemini_wire.response_json()).encode(),
    # Google's error object: the kind is its ``status``; the HTTP status classifies it.
    error_body=lambda kind, message: gemini_wire.error_body(0, kind, message),
    malformed=gemini_wire.malformed,
)


@pytest.fixture(params=[ANTHROPIC, OPENAI, RESPONSES, GEMINI], ids=lambda w: w.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    """Each transport test runs against every HTTP provider."""
    return request.param  # type: ignore[no-any-return]


# ---------------------------------------------------------------- good answers


async def test_shared_http_pool_reuses_the_connection(wire: Wire) -> None:
    """Calls through one HttpPool share one keep-alive connection, streamed or whole."""
    answers = (wire.reply(True), wire.reply(False), wire.reply(True))
    async with fake_server(*answers, keep_alive=True) as server, HttpPool() as pool:
        texts = [
            final(await collect(wire.provider(server.url, stream=s), REQUEST, http=pool)).text
            for s in (True, False, True)
        ]
        assert pool.client(server.url) is pool.client(server.url + "/")
    assert texts == ["Hello, world"] * 3
    # a finished stream is read to its end, so its connection goes back to the pool
    assert [r.connection for r in server.requests] == [0, 0, 0]
    assert pool.closed


async def test_sse_with_crlf_line_ends_split_between_cr_and_lf(wire: Wire) -> None:
    """An event stream with CRLF line ends, cut between every CR and its LF, parses whole."""
    body = wire.stream_body(crlf=True)
    cuts = [i + 1 for i in range(len(body)) if body[i : i + 2] == b"\r\n"]
    async with fake_server(sse_answer(body, at=cuts, part_delay=0.0005)) as server:
        response = final(await collect(wire.provider(server.url), REQUEST))
    assert response.text == "Hello, world"


async def test_server_answering_json_to_a_stream_request_is_accepted(wire: Wire) -> None:
    """A server that answers a stream request with one JSON body still gives the reply."""
    async with fake_server(wire.reply(False, text=("whole",))) as server:
        items = await collect(wire.provider(server.url, stream=True), REQUEST)
    assert final(items).text == "whole"
    assert items[0] == TextDelta(text="whole")


# ------------------------------------------------------------------ timeouts


@AUTOJUMP
@STREAM
async def test_slow_first_byte_times_out(wire: Wire, stream: bool, anyio_backend: Any) -> None:
    """No first byte within timeout_s: a transient ProviderTimeout then (trio: virtual time)."""
    async with fake_server(Answer(first_byte_delay=2.0)) as server:
        start = anyio.current_time()
        exc = await failure(wire.provider(server.url, stream=stream, timeout_s=0.05), REQUEST)
        elapsed = anyio.current_time() - start
    assert len(server.requests) == 1, "the request was sent: the wait was for the answer"
    assert elapsed == pytest.approx(0.05)
    assert isinstance(exc, ProviderTimeout)
    assert isinstance(exc, TransientProviderError)
    assert "timeout" in str(exc)


@AUTOJUMP
async def test_slow_event_mid_stream_times_out(wire: Wire, anyio_backend: Any) -> None:
    """A stream stalled past timeout_s between two reads: ProviderTimeout (trio: virtual time)."""
    body = wire.stream_body()
    answer = sse_answer(body, at=[len(body) // 2], part_delay=2.0)
    async with fake_server(answer) as server:
        start = anyio.current_time()
        items, exc = await items_and_failure(wire.provider(server.url, timeout_s=0.05), REQUEST)
        elapsed = anyio.current_time() - start
    assert items, "the first half was read before the stall"
    assert elapsed == pytest.approx(0.05)
    assert isinstance(exc, ProviderTimeout)


# --------------------------------------------------------------- connections


@pytest.mark.parametrize("where", ["half", "after_text"])
async def test_connection_dropped_mid_stream(wire: Wire, where: str) -> None:
    """A stream dropped mid-way is StreamInterrupted; the deltas read before it were yielded."""
    body = wire.stream_body()
    text_end = body.index(b"\n\n", body.index(b'"Hello"')) + 2  # the first text event's end
    cut = len(body) // 2 if where == "half" else text_end
    async with fake_server(sse_answer(body[:cut], drop=True)) as server:
        items, exc = await items_and_failure(wire.provider(server.url), REQUEST)
    assert isinstance(exc, StreamInterrupted)
    assert "mid-stream" in str(exc)
    assert any(isinstance(i, TextDelta) for i in items) is (cut >= text_end)


@STREAM
async def test_connection_closed_without_answer(wire: Wire, stream: bool) -> None:
    """A connection closed before any answer is ConnectionDropped."""
    async with fake_server(Answer(no_answer=True)) as server:
        exc = await failure(wire.provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, ConnectionDropped)


@STREAM
async def test_connection_refused(wire: Wire, stream: bool) -> None:
    """A refused connection is ConnectionDropped, chained to the transport's error."""
    port = await closed_port()
    exc = await failure(wire.provider(f"http://127.0.0.1:{port}", stream=stream), REQUEST)
    assert isinstance(exc, ConnectionDropped)
    assert exc.__cause__ is not None


async def test_body_cut_short_of_its_content_length(wire: Wire) -> None:
    """A whole answer shorter than its Content-Length is ConnectionDropped."""
    body = wire.json_body()
    answer = raw_answer(body[:20], content_length=len(body))
    async with fake_server(answer) as server:
        exc = await failure(wire.provider(server.url, stream=False), REQUEST)
    assert isinstance(exc, ConnectionDropped)


# ------------------------------------------------------------------ bad bodies


@STREAM
async def test_malformed_json(wire: Wire, stream: bool) -> None:
    """JSON cut short (an event's data or the whole body) is MalformedResponse from ValueError."""
    async with fake_server(wire.malformed(stream)) as server:
        exc = await failure(wire.provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, MalformedResponse)
    assert isinstance(exc.__cause__, ValueError)


async def test_stream_with_wrong_content_type(wire: Wire) -> None:
    """A stream request answered as text/plain is not the API: fatal InvalidRequest naming it."""
    async with fake_server(raw_answer(b"data: hi\n\n", content_type="text/plain")) as server:
        exc = await failure(wire.provider(server.url), REQUEST)
    assert isinstance(exc, InvalidRequest)
    assert "text/plain" in str(exc)


# ------------------------------------------------------------------ statuses


@STREAM
@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [
        (400, "invalid_request_error", InvalidRequest),
        (401, "authentication_error", AuthenticationFailed),
        (403, "permission_error", PermissionDenied),
        (404, "not_found_error", NotFound),
        (408, "timeout_error", ProviderTimeout),
        (409, "conflict_error", ServerError),
        (413, "request_too_large", InvalidRequest),
        (422, "unprocessable_entity", InvalidRequest),
        (429, "rate_limit_error", RateLimited),
        (500, "api_error", ServerError),
        (502, "api_error", ServerError),
        (503, "api_error", ServerError),
        (504, "api_error", ServerError),
        (529, "overloaded_error", Overloaded),
    ],
)
async def test_http_errors(
    wire: Wire, stream: bool, status: int, kind: str, error: type[ProviderError]
) -> None:
    """Each error status maps to its typed error, with the status, error type and message."""
    answer = json_answer(wire.error_body(kind, f"server says {status}"), status=status)
    async with fake_server(answer) as server:
        exc = await failure(wire.provider(server.url, stream=stream), REQUEST)
    assert type(exc) is error
    assert exc.status == status
    assert f"server says {status}" in str(exc)
    assert kind in str(exc)


@STREAM
async def test_429_retry_after_seconds(wire: Wire, stream: bool) -> None:
    """A 429's Retry-After in seconds becomes the RateLimited error's retry_after."""
    answer = json_answer(
        wire.error_body("rate_limit_error", "slow down"),
        status=429,
        headers=[("retry-after", "7")],
    )
    async with fake_server(answer) as server:
        exc = await failure(wire.provider(server.url, stream=stream), REQUEST)
    assert isinstance(exc, RateLimited)
    assert exc.retry_after == 7.0


async def test_429_retry_after_http_date(wire: Wire) -> None:
    """A 429's Retry-After as an HTTP date becomes the seconds until that date."""
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    answer = json_answer(
        wire.error_body("rate_limit_error", "slow down"),
        status=429,
        headers=[("retry-after", when)],
    )
    async with fake_server(answer) as server:
        exc = await failure(wire.provider(server.url), REQUEST)
    assert isinstance(exc, RateLimited)
    assert exc.retry_after is not None
    assert 100 < exc.retry_after <= 120


async def test_429_retry_after_ms_wins_over_retry_after(wire: Wire) -> None:
    """retry-after-ms, when sent, is preferred to Retry-After."""
    answer = json_answer(
        wire.error_body("rate_limit_error", "Rate limit reached"),
        status=429,
        headers=[("retry-after-ms", "1500"), ("retry-after", "9")],
    )
    async with fake_server(answer) as server:
        exc = await failure(wire.provider(server.url), REQUEST)
    assert isinstance(exc, RateLimited)
    assert exc.retry_after == 1.5


async def test_529_carries_retry_after_and_error_without_json_body(wire: Wire) -> None:
    """A 529 keeps its Retry-After; a 502 with an HTML body is a ServerError quoting it."""
    answers = (
        json_answer(
            wire.error_body("overloaded_error", "busy"),
            status=529,
            headers=[("retry-after", "2")],
        ),
        raw_answer(b"<html>Bad gateway</html>", status=502, content_type="text/html"),
    )
    async with fake_server(*answers) as server:
        first = await failure(wire.provider(server.url), REQUEST)
        second = await failure(wire.provider(server.url), REQUEST)
    assert isinstance(first, Overloaded)
    assert first.retry_after == 2.0
    assert isinstance(second, ServerError)
    assert "Bad gateway" in str(second)


# ------------------------------------------------------------------- secrets


async def test_key_never_leaks(wire: Wire) -> None:
    """A key the server echoes is redacted from the error; the provider's repr never shows it."""
    echo = wire.error_body("authentication_error", f"Incorrect API key provided: {SECRET}.")
    async with fake_server(json_answer(echo, status=401)) as server:
        p = wire.provider(server.url)
        exc = await failure(p, REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert "[redacted]" in str(exc)
    assert SECRET not in repr(p)
    assert SECRET not in str(p)
    assert "api_key" not in repr(p)


async def test_key_with_a_newline_inside_is_refused_without_echo(wire: Wire) -> None:
    """A key with a newline inside fails as AuthenticationFailed without quoting the key."""
    bad = SECRET[:10] + "\n" + SECRET[10:]
    exc = await failure(wire.provider("http://127.0.0.1:9", api_key=bad), REQUEST)
    assert isinstance(exc, AuthenticationFailed)
    assert SECRET[10:] not in str(exc)


# ---------------------------------------------------------- closing, cancelling


async def test_consumer_stopping_early_closes_the_stream_cleanly(wire: Wire) -> None:
    """A run that cuts a stream (a ceiling crossed) closes it mid-way: no error, no leak.

    Under trio, an httpx iterator left suspended would be reported as a
    ResourceWarning, which this suite turns into a failure.
    """
    body = wire.stream_body()
    answer = sse_answer(body, at=[len(body) // 2], part_delay=0.5)
    async with fake_server(answer) as server:
        ctx = ProviderContext(run_id="r", call_index=0)
        stream = wire.provider(server.url).stream(REQUEST, ctx)
        with anyio.fail_after(2):
            async with aclosing(stream):  # type: ignore[type-var]
                async for item in stream:
                    if isinstance(item, TextDelta):
                        break


async def test_cancelled_while_waiting_for_the_next_event(wire: Wire) -> None:
    """Cancelling a call parked between two parts of its stream ends it, no reply given."""
    body = wire.stream_body()
    answer = sse_answer(body, at=[len(body) // 2], part_delay=2.0)
    items: list[Any] = []
    async with fake_server(answer) as server:
        ctx = ProviderContext(run_id="r", call_index=0)
        with anyio.fail_after(5), anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                stream = wire.provider(server.url).stream(REQUEST, ctx)
                async with aclosing(stream):  # type: ignore[type-var]
                    async for item in stream:
                        items.append(item)
                        if len(items) == 1:  # the first half is in: cancel once parked
                            tg.start_soon(cancel_once_blocked, scope)
    assert scope.cancelled_caught
    assert items
    assert not any(isinstance(i, ModelResponse) for i in items)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1", "http://127.0.0.1:99999", "localhost:8080"])
def test_unusable_base_url_is_refused_at_construction(wire: Wire, url: str) -> None:
    """A base_url that is not http(s)://host[:port] is refused when the provider is built."""
    with pytest.raises(ValueError, match="base_url"):
        wire.construct(url)
