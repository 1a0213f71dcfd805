"""One HTTP attempt of the HTTP providers.

- :class:`HttpCall`: where to send what (a JSON payload, see :func:`encode_body`).
- :func:`post_json` and :func:`post_sse`: one attempt of a JSON or SSE request,
  with every foreign failure translated into the error tree of
  :mod:`tether.providers._errors` (``raise Mapped(...) from exc``; see
  :mod:`tether.providers._wire_errors`).
- :func:`drain` and :func:`unwind`: finishing an answer's event stream.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import anyio
import attrs
import httpx
from httpx_sse import EventSource, ServerSentEvent

from ._arguments import arguments_text as arguments_text
from ._arguments import plain
from ._clients import client_for
from ._errors import InvalidRequest, MalformedResponse, ProviderError, ResponseTooLarge
from ._shape import Shape
from ._types import HttpPoolLike
from ._wire_errors import error_for_exception, error_for_status, redact


def encode_body(payload: Mapping[str, Any], provider: str) -> bytes:
    try:
        text = json.dumps(plain(payload), ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        # RecursionError: a value nested past the recursion limit, which the
        # providers never put in a history (see ._arguments); a typed error anyway.
        raise InvalidRequest(f"{provider}: request is not JSON-serializable ({exc!r})") from exc
    return text.encode("utf-8")


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
    #: Added to a 4xx error's message (e.g. that no API key was sent).
    note: str | None = None
    #: The most bytes one answer's body may have.
    max_bytes: int = 8 * 1024 * 1024

    def too_large(self, size: int) -> ResponseTooLarge:
        return ResponseTooLarge(
            f"{self.provider}: the answer's body passed {self.max_bytes:,} bytes ({size:,} read); "
            "raise the provider's max_response_bytes if such answers are expected"
        )

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "content": encode_body(self.payload, self.provider),
            "headers": dict(self.headers),
        }
        if self.timeout_s is not None:
            kwargs["timeout"] = httpx.Timeout(self.timeout_s)
        return kwargs

    def status_error(self, response: httpx.Response, body: bytes) -> ProviderError:
        return error_for_status(
            response.status_code,
            body=body,
            headers=response.headers,
            provider=self.provider,
            secrets=self.secrets,
            note=self.note,
        )

    def transport_error(self, exc: Exception, *, mid_stream: bool) -> ProviderError:
        return error_for_exception(
            exc, provider=self.provider, mid_stream=mid_stream, secrets=self.secrets, url=self.url
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
            async with client.stream("POST", call.url, **kwargs) as response:
                body = await _read_bounded(response, call)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise call.transport_error(exc, mid_stream=False) from exc
    if not response.is_success:
        raise call.status_error(response, body)
    media = _media_type(response)
    if media and not _is_json(media):
        raise _not_the_api(call, response, media, body)
    return Shape(call.provider).json(body, "the response body")


def _media_type(response: httpx.Response) -> str:
    value: str = response.headers.get("content-type") or ""
    return value.partition(";")[0].strip().lower()


def _is_json(media: str) -> bool:
    return media == "application/json" or media.endswith("+json")


def _not_the_api(
    call: HttpCall, response: httpx.Response, media: str, body: bytes
) -> InvalidRequest:
    """A 2xx answer that is neither JSON nor an event stream: the URL is not the API
    (a web page, a login portal, a proxy's notice); retrying cannot help."""
    start = redact(body[:200].decode("utf-8", "replace"), call.secrets)
    seen = f"; it begins {' '.join(start.split())!r}" if start.strip() else ""
    return InvalidRequest(
        f"{call.provider}: the server at {call.base_url} answered HTTP "
        f"{response.status_code} with content-type {media!r}, not the API's JSON or event "
        f"stream{seen}; check base_url"
    )


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
                    raise call.status_error(response, await _read_bounded(response, call))
                media = _media_type(response)
                if media != "text/event-stream":
                    if _is_json(media):
                        body = await _read_bounded(response, call)
                        yield JsonBody(Shape(call.provider).json(body, "the body"))
                        return
                    if media:
                        raise _not_the_api(call, response, media, await _read_some(response))
                    raise MalformedResponse(
                        f"{call.provider}: malformed response: expected an event stream, "
                        "got no content-type"
                    )
                mid_stream = True
                events = EventSource(response).aiter_sse()
                limit = call.max_bytes
                try:
                    async for event in events:
                        if response.num_bytes_downloaded > limit:
                            raise call.too_large(response.num_bytes_downloaded)
                        yield event
                finally:
                    await unwind(events)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise call.transport_error(exc, mid_stream=mid_stream) from exc


def _declared_length(response: httpx.Response) -> int | None:
    length = response.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


async def _read_bounded(response: httpx.Response, call: HttpCall) -> bytes:
    """The whole body, unless it is longer than ``call.max_bytes``."""
    length = _declared_length(response)
    if length is not None and length > call.max_bytes:
        raise call.too_large(length)
    chunks = []
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        if response.num_bytes_downloaded > call.max_bytes:
            raise call.too_large(response.num_bytes_downloaded)
    return b"".join(chunks)


async def _read_some(response: httpx.Response, limit: int = 64 * 1024) -> bytes:
    """A small body whole (for its first words in an error); nothing of a large one."""
    length = _declared_length(response)
    if length is not None and length <= limit:
        return await response.aread()
    return b""


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
    "HttpCall",
    "JsonBody",
    "drain",
    "post_json",
    "post_sse",
    "unwind",
]
