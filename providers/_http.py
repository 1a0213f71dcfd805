"""Shared HTTP pieces of the HTTP providers.

- :class:`HttpPool`: one ``httpx.AsyncClient`` per endpoint, for a Runtime.
- :func:`post_json` and :func:`post_sse`: one attempt of a JSON or SSE request,
  with every foreign failure translated into the error tree of
  :mod:`tether.providers._errors` (``raise Mapped(...) from exc``).
- :func:`error_for_status` and :func:`error_for_exception`: that translation.
- :func:`parse_retry_after` and :func:`retry_after_from_headers`.
- :class:`Shape`: small checks of a decoded JSON body's shape; a wrong shape
  raises :class:`MalformedResponse`.

Classification of HTTP statuses (see :func:`error_for_status`):

=========================  ======================================================
status                     error
=========================  ======================================================
400, 413, 422, other 4xx   ``InvalidRequest`` (fatal)
401                        ``AuthenticationFailed`` (fatal)
403                        ``PermissionDenied`` (fatal)
404                        ``NotFound`` (fatal)
408                        ``ProviderTimeout`` (transient: the server timed out
                           waiting for us; both vendors' SDKs retry it)
409                        ``ServerError`` (transient: a lock conflict on the
                           server; both vendors' SDKs retry it)
429                        ``RateLimited`` with ``retry_after``; except a body
                           whose error code is ``insufficient_quota`` (billing,
                           which no retry fixes): ``PermissionDenied``
529                        ``Overloaded``
5xx                        ``ServerError`` (``Overloaded`` when the body's error
                           type is ``overloaded_error``)
1xx, 3xx, anything else    ``MalformedResponse``
=========================  ======================================================

Every transient error carries the server's ``retry-after`` (or
``retry-after-ms``) when it sent one. Messages include the server's error
message, truncated, and never an API key: every message is scrubbed of the
provider's secrets before it is raised.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import json
import math
import os
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from datetime import UTC
from typing import Any, cast
from urllib.parse import urlsplit

import anyio
import attrs
import httpx
from httpx_sse import EventSource, ServerSentEvent

from ._errors import (
    AuthenticationFailed,
    ConnectionDropped,
    InvalidRequest,
    MalformedResponse,
    NotFound,
    Overloaded,
    PermissionDenied,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    StreamInterrupted,
    TransientProviderError,
)
from ._types import HttpPoolLike

#: Connect quickly or fail; a model may think for minutes before its next byte.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=60.0)
DEFAULT_LIMITS = httpx.Limits(
    max_connections=200, max_keepalive_connections=50, keepalive_expiry=30.0
)
#: Longest server message kept in an error message.
MAX_DETAIL_CHARS = 500
REDACTED = "[redacted]"


# --------------------------------------------------------------------------- pool


@attrs.define(eq=False)
class HttpPool:
    """One ``httpx.AsyncClient`` per endpoint, created on first use.

    A Runtime owns one and passes it to providers as ``ProviderContext.http``;
    ``aclose()`` closes every client. A provider used outside a Runtime gets
    ``http=None`` and opens a temporary client per request instead.
    """

    timeout: httpx.Timeout = attrs.field(default=DEFAULT_TIMEOUT)
    limits: httpx.Limits = attrs.field(default=DEFAULT_LIMITS)
    _clients: dict[str, httpx.AsyncClient] = attrs.field(init=False, factory=dict, repr=False)
    _closed: bool = attrs.field(init=False, default=False)

    def client(self, base_url: str) -> httpx.AsyncClient:
        """The shared client for ``base_url`` (requests use absolute URLs)."""
        if self._closed:
            raise RuntimeError("HttpPool is closed")
        key = base_url.rstrip("/")
        client = self._clients.get(key)
        if client is None:
            client = httpx.AsyncClient(
                timeout=self.timeout, limits=self.limits, verify=ssl_context()
            )
            self._clients[key] = client
        return client

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Close every client; idempotent."""
        self._closed = True
        clients = list(self._clients.values())
        self._clients.clear()
        first: BaseException | None = None
        for client in clients:
            try:
                await client.aclose()
            except Exception as exc:  # close the others all the same
                first = first or exc
        if first is not None:
            raise first

    async def __aenter__(self) -> HttpPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One default TLS context for every client (building one costs ~30 ms)."""
    return httpx.create_ssl_context()


@contextlib.asynccontextmanager
async def client_for(http: HttpPoolLike | None, base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The pool's client for ``base_url``, or a temporary one closed on exit."""
    if http is not None:
        yield cast(httpx.AsyncClient, http.client(base_url))
        return
    client = httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS, verify=ssl_context())
    try:
        yield client
    finally:
        with anyio.move_on_after(5.0, shield=True):
            await client.aclose()


# ------------------------------------------------------------------ retry-after


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``retry-after`` value.

    Accepts delay-seconds (``"7"``, ``"1.5"``) or an HTTP date; a negative
    delay or a date in the past gives ``0.0``; anything else ``None``.
    ``now`` (a POSIX timestamp) defaults to the current time.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def retry_after_from_headers(
    headers: Mapping[str, str] | httpx.Headers, now: float | None = None
) -> float | None:
    """``retry-after-ms`` (milliseconds) if valid, else ``retry-after``."""
    lowered = httpx.Headers(headers)
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            ms = float(millis.strip())
        except ValueError:
            ms = math.nan
        if math.isfinite(ms):
            return max(0.0, ms / 1000.0)
    return parse_retry_after(lowered.get("retry-after"), now=now)


# --------------------------------------------------------------- error mapping


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret replaced by ``[redacted]``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text


def _truncate(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _error_object(body: bytes | str | None) -> tuple[str | None, str | None, str | None]:
    """``(type, code, message)`` from a JSON error body, or the body's text as message."""
    if not body:
        return None, None, None
    raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(raw)
    except ValueError:
        return None, None, raw
    return error_fields(data, fallback=raw)


def error_fields(
    data: Any, *, fallback: str | None = None
) -> tuple[str | None, str | None, str | None]:
    """``(type, code, message)`` of ``{"error": {...}}`` and common variants."""
    if not isinstance(data, dict):
        return None, None, fallback
    err: Any = data.get("error", data)
    if isinstance(err, str):
        return None, None, err
    if not isinstance(err, dict):
        return None, None, fallback
    kind = err.get("type")
    code = err.get("code")
    message = err.get("message", err.get("detail"))
    return (
        kind if isinstance(kind, str) else None,
        str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None,
        message if isinstance(message, str) else fallback,
    )


def describe(
    provider: str,
    what: str,
    kind: str | None,
    message: str | None,
    secrets: Iterable[str | None] = (),
) -> str:
    """``"<provider>: <what>: <kind>: <message>"``, redacted, then truncated."""
    detail = redact(": ".join(part for part in (kind, message) if part), secrets)
    return f"{provider}: {what}" + (f": {_truncate(detail)}" if detail else "")


def error_for_status(
    status: int,
    *,
    body: bytes | str | None = None,
    headers: Mapping[str, str] | httpx.Headers | None = None,
    provider: str = "provider",
    secrets: Iterable[str | None] = (),
    now: float | None = None,
) -> ProviderError:
    """The typed error for an HTTP error answer (see the module's table)."""
    kind, code, message = _error_object(body)
    reason = httpx.codes.get_reason_phrase(status)
    what = f"HTTP {status}" + (f" {reason}" if reason else "")
    text = describe(provider, what, kind, message, secrets)
    retry_after = retry_after_from_headers(headers, now=now) if headers is not None else None

    transient: type[TransientProviderError]
    if status == 400 or (400 <= status < 500 and status not in (401, 403, 404, 408, 409, 429)):
        return InvalidRequest(text, status=status)
    if status == 401:
        return AuthenticationFailed(text, status=status)
    if status == 403:
        return PermissionDenied(text, status=status)
    if status == 404:
        return NotFound(text, status=status)
    if status == 429:
        if "insufficient_quota" in (kind, code):
            return PermissionDenied(text, status=status)
        transient = RateLimited
    elif status == 408:
        transient = ProviderTimeout
    elif status == 529 or (status >= 500 and kind == "overloaded_error"):
        transient = Overloaded
    elif status == 409 or 500 <= status < 600:
        transient = ServerError
    else:
        transient = MalformedResponse
    return transient(text, status=status, retry_after=retry_after)


def error_for_exception(
    exc: BaseException,
    *,
    provider: str = "provider",
    mid_stream: bool = False,
    secrets: Iterable[str | None] = (),
) -> ProviderError:
    """The typed error for an httpx failure.

    Timeouts are :class:`ProviderTimeout`; a connection refused, reset or
    closed is :class:`ConnectionDropped`, or :class:`StreamInterrupted` when
    it happened mid-stream (after a streaming answer had begun); undecodable
    bodies are :class:`MalformedResponse`; a URL or request that httpx cannot
    send at all is :class:`InvalidRequest`.
    """
    detail = redact(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, secrets)
    detail = _truncate(detail)
    if isinstance(exc, httpx.TimeoutException):
        phase = {
            httpx.ConnectTimeout: "connect",
            httpx.ReadTimeout: "read",
            httpx.WriteTimeout: "write",
            httpx.PoolTimeout: "connection-pool",
        }.get(type(exc), "request")
        return ProviderTimeout(f"{provider}: {phase} timeout ({detail})")
    if isinstance(exc, httpx.DecodingError):
        return MalformedResponse(f"{provider}: undecodable response body ({detail})")
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError | httpx.InvalidURL):
        return InvalidRequest(f"{provider}: request could not be sent ({detail})")
    if mid_stream:
        return StreamInterrupted(f"{provider}: connection dropped mid-stream ({detail})")
    return ConnectionDropped(f"{provider}: connection failed ({detail})")


# ---------------------------------------------------------------------- keys


def resolve_key(value: str | None, env: str) -> str | None:
    """``value``, else the environment variable ``env``; stripped; ``None`` when empty."""
    key = value if value is not None else os.environ.get(env)
    key = key.strip() if key else None
    return key or None


def check_base_url(url: str) -> str:
    """``url`` without a trailing slash; ``ValueError`` unless it is an http(s) URL with a host."""
    parts = urlsplit(url.strip())
    try:
        parts.port  # noqa: B018  (raises ValueError when out of range)
    except ValueError as exc:
        raise ValueError(f"base_url {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be an http:// or https:// URL with a host, got {url!r}")
    return url.strip().rstrip("/")


def check_key(key: str, provider: str) -> None:
    """Refuse a key httpx could not put in a header, without echoing it."""
    if not key.isascii() or not key.isprintable() or any(ch.isspace() for ch in key):
        raise AuthenticationFailed(
            f"{provider}: the API key contains characters not allowed in an HTTP header"
        )


# ---------------------------------------------------------------- JSON shapes


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


@attrs.frozen
class Shape:
    """Checks on a decoded body; a mismatch raises :class:`MalformedResponse`."""

    provider: str

    def fail(self, what: str, value: Any = None, expected: str = "") -> MalformedResponse:
        got = f", got {_type_name(value)}" if expected else ""
        exp = f" to be {expected}" if expected else ""
        return MalformedResponse(f"{self.provider}: malformed response: expected {what}{exp}{got}")

    def obj(self, value: Any, what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(what, value, "an object")
        return value

    def arr(self, value: Any, what: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(what, value, "an array")
        return value

    def text(self, value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise self.fail(what, value, "a string")
        return value

    def opt_text(self, value: Any, what: str) -> str | None:
        return None if value is None else self.text(value, what)

    def opt_int(self, value: Any, what: str, default: int = 0) -> int:
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.fail(what, value, "a non-negative integer")
        return value

    def json(self, raw: bytes | str, what: str) -> Any:
        try:
            return json.loads(raw)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise MalformedResponse(
                f"{self.provider}: malformed response: {what} is not valid JSON "
                f"({_truncate(str(exc), 120)})"
            ) from exc


def parse_tool_arguments(raw: str) -> Any:
    """Decoded tool arguments; the raw string when they are not valid JSON; ``{}`` if empty."""
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def plain(value: Any) -> Any:
    """``value`` with every Mapping made a dict and every tuple a list (for json.dumps)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def encode_body(payload: Mapping[str, Any], provider: str) -> bytes:
    try:
        text = json.dumps(plain(payload), ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"{provider}: request is not JSON-serializable ({exc})") from exc
    return text.encode("utf-8")


# ------------------------------------------------------------------- requests


@attrs.frozen(kw_only=True)
class HttpCall:
    """One HTTP attempt: where to send what, and how to name failures."""

    provider: str
    base_url: str
    url: str
    headers: Mapping[str, str] = attrs.field(repr=False)
    payload: Mapping[str, Any] = attrs.field(repr=False)
    timeout_s: float | None = None
    secrets: tuple[str, ...] = attrs.field(default=(), repr=False)

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "content": encode_body(self.payload, self.provider),
            "headers": dict(self.headers),
        }
        if self.timeout_s is not None:
            kwargs["timeout"] = httpx.Timeout(self.timeout_s)
        return kwargs

    def status_error(self, response: httpx.Response) -> ProviderError:
        return error_for_status(
            response.status_code,
            body=response.content,
            headers=response.headers,
            provider=self.provider,
            secrets=self.secrets,
        )

    def transport_error(self, exc: Exception, *, mid_stream: bool) -> ProviderError:
        return error_for_exception(
            exc, provider=self.provider, mid_stream=mid_stream, secrets=self.secrets
        )


@attrs.frozen
class JsonBody:
    """A whole JSON answer where an event stream was asked for (see :func:`post_sse`)."""

    value: Any


async def post_json(http: HttpPoolLike | None, call: HttpCall) -> Any:
    """POST ``call`` and return the decoded JSON of a 2xx answer; raise a typed error otherwise."""
    kwargs = call.request_kwargs()
    async with client_for(http, call.base_url) as client:
        try:
            response = await client.post(call.url, **kwargs)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise call.transport_error(exc, mid_stream=False) from exc
    if not response.is_success:
        raise call.status_error(response)
    return Shape(call.provider).json(response.content, "the response body")


def _media_type(response: httpx.Response) -> str:
    value: str = response.headers.get("content-type") or ""
    return value.partition(";")[0].strip().lower()


async def post_sse(
    http: HttpPoolLike | None, call: HttpCall
) -> AsyncGenerator[ServerSentEvent | JsonBody, None]:
    """POST ``call`` and yield the server-sent events of a 2xx answer.

    Event boundaries do not depend on how the bytes were split across reads
    (httpx decodes UTF-8 incrementally; httpx-sse reassembles lines). A 2xx
    ``application/json`` answer (a server that ignored ``stream``) is yielded
    once as :class:`JsonBody`. Any other content type is a
    :class:`MalformedResponse`. The caller detects a missing terminal event.
    """
    kwargs = call.request_kwargs()
    kwargs["headers"].setdefault("accept", "text/event-stream")
    mid_stream = False
    async with client_for(http, call.base_url) as client:
        try:
            async with client.stream("POST", call.url, **kwargs) as response:
                if not response.is_success:
                    await response.aread()
                    raise call.status_error(response)
                media = _media_type(response)
                if media != "text/event-stream":
                    if media == "application/json" or media.endswith("+json"):
                        await response.aread()
                        yield JsonBody(Shape(call.provider).json(response.content, "the body"))
                        return
                    raise MalformedResponse(
                        f"{call.provider}: malformed response: expected an event stream, "
                        f"got content-type {media or 'none'!r}"
                    )
                mid_stream = True
                events = EventSource(response).aiter_sse()
                try:
                    async for event in events:
                        yield event
                finally:
                    await unwind(events)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise call.transport_error(exc, mid_stream=mid_stream) from exc


async def drain(events: AsyncIterator[Any], limit_s: float = 1.0) -> None:
    """Consume what is left of a finished answer (its body's end), for at most ``limit_s``.

    Reading to the end lets httpx return the connection to the pool; a
    server that keeps the body open is given up on after ``limit_s``. Errors
    are ignored: the answer is already complete.
    """
    with anyio.move_on_after(limit_s), contextlib.suppress(ProviderError):
        async for _ in events:
            pass


async def unwind(agen: AsyncGenerator[Any, None]) -> None:
    """Finish an abandoned httpx/httpx-sse iterator chain without leaving it suspended.

    httpx 0.28 and httpx-sse iterate a response through nested async
    generators that are not closed when the outermost one is (encode/httpx
    #3686): a chain given up mid-stream is garbage collected suspended, and
    trio warns (``ResourceWarning``) for each. Resuming the chain inside a
    cancelled (and shielded) scope drains what is already buffered and then
    raises ``Cancelled`` at its first network read, which unwinds every frame
    of the chain; the connection is closed rather than reused.
    """
    with anyio.CancelScope(shield=True) as scope:
        scope.cancel()
        with contextlib.suppress(Exception):
            async for _ in agen:
                pass


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT",
    "HttpCall",
    "HttpPool",
    "JsonBody",
    "Shape",
    "check_base_url",
    "check_key",
    "client_for",
    "drain",
    "error_for_exception",
    "error_for_status",
    "parse_retry_after",
    "parse_tool_arguments",
    "post_json",
    "post_sse",
    "redact",
    "resolve_key",
    "retry_after_from_headers",
    "unwind",
]
