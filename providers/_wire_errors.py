"""What a failed HTTP request means: the error tree of :mod:`tether.providers._errors`.

- :func:`error_for_status` and :func:`error_for_exception`: the translation of
  an HTTP error answer or an httpx failure into a typed error.
- :func:`parse_retry_after` and :func:`retry_after_from_headers`.
- :func:`redact`, :func:`error_fields` and :func:`describe`: the pieces of an
  error message; :func:`scrub_logs_of` keeps sent keys out of httpx's and
  httpcore's own log records (httpcore logs response headers at DEBUG).

Classification of HTTP statuses (see :func:`error_for_status`):

=========================  ======================================================
status                     error
=========================  ======================================================
400, 413, 422, other 4xx   ``InvalidRequest`` (fatal); ``ContextWindowExceeded``
                           when the body says the prompt is too long
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
3xx                        ``InvalidRequest`` (fatal: the base URL is not the
                           API's own address; the message names ``location``)
1xx, anything else         ``MalformedResponse``
=========================  ======================================================

An error inside a stream or a 200 body (:func:`error_for_event`) is classified
by its type or code the same way for every provider: invalid requests,
authentication, permission and not-found errors are fatal, a context window
exceeded is :class:`ContextWindowExceeded`, anything else is a transient
``StreamErrorEvent``.

Every transient error carries the server's ``retry-after`` (or
``retry-after-ms``) when it sent one. Messages include the server's error
message, truncated, and never an API key: every message is scrubbed of the
provider's secrets before it is raised.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ._errors import (
    AuthenticationFailed,
    ConnectionDropped,
    ContextWindowExceeded,
    FatalProviderError,
    InvalidRequest,
    MalformedResponse,
    NotFound,
    Overloaded,
    PermissionDenied,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    StreamErrorEvent,
    StreamInterrupted,
    TransientProviderError,
)

if TYPE_CHECKING:
    import httpx  # imported where used: ``import tether`` never loads httpx

#: Longest server message kept in an error message.
MAX_DETAIL_CHARS = 500
REDACTED = "[redacted]"


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
    import email.utils  # here: only an HTTP date needs it

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
    import httpx

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


#: Every provider's key; the HTTP libraries' debug logs are scrubbed of them.
_SENT_SECRETS: set[str] = set()
#: httpcore logs each response's headers at DEBUG, and a server may echo a key in one.
_HTTP_LOGGERS = (
    "tether",  # its own records (runtime/_log.py) carry error texts: scrubbed again
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)


class _Scrub(logging.Filter):
    """Replaces sent secrets in the HTTP libraries' log records."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = redact(message, _SENT_SECRETS)
        if scrubbed != message:
            record.msg, record.args = scrubbed, ()
        return True


_SCRUB = _Scrub()


def scrub_logs_of(secrets: Iterable[str]) -> None:
    """Keep ``secrets`` out of httpx's and httpcore's log records from now on
    (a provider registers its key once, when it is made)."""
    new = {s for s in secrets if s and len(s) >= 4} - _SENT_SECRETS
    if not new:
        return
    if not _SENT_SECRETS:
        for name in _HTTP_LOGGERS:
            logging.getLogger(name).addFilter(_SCRUB)
    _SENT_SECRETS.update(new)


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
    except (ValueError, RecursionError):
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
    note: str | None = None,
) -> ProviderError:
    """The typed error for an HTTP error answer (see the module's table).

    ``note`` is added to the message of a 4xx (what the client knows about its
    own request that may explain it, such as that no API key was sent).
    """
    import httpx

    kind, code, message = _error_object(body)
    reason = httpx.codes.get_reason_phrase(status)
    what = f"HTTP {status}" + (f" {reason}" if reason else "")
    text = describe(provider, what, kind, message, secrets)
    if note and 400 <= status < 500:
        text += f" ({note})"
    retry_after = retry_after_from_headers(headers, now=now) if headers is not None else None

    transient: type[TransientProviderError]
    if 400 <= status < 500 and _context_exceeded(code, message):
        return ContextWindowExceeded(text, status=status)
    if 300 <= status < 400:
        location = httpx.Headers(headers or {}).get("location")
        where = f" to {redact(location, secrets)!r}" if location else ""
        return InvalidRequest(
            f"{provider}: {what}: the server redirected{where}; set base_url to the API's "
            "own address (redirects are not followed)",
            status=status,
        )
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


#: Error types and codes inside a stream or a 200 body that no retry can fix.
_FATAL_ERRORS: dict[str, type[FatalProviderError]] = {
    "invalid_request_error": InvalidRequest,
    "authentication_error": AuthenticationFailed,
    "invalid_api_key": AuthenticationFailed,
    "permission_error": PermissionDenied,
    "not_found_error": NotFound,
    "model_not_found": NotFound,
}

_CONTEXT_EXCEEDED = re.compile(
    r"context[_ ]length[_ ]exceeded|prompt is too long|maximum context length|context window",
    re.IGNORECASE,
)


def _context_exceeded(code: str | None, message: str | None) -> bool:
    return code == "context_length_exceeded" or bool(message and _CONTEXT_EXCEEDED.search(message))


def error_for_event(
    data: Any, provider: str, what: str, secrets: Iterable[str | None] = ()
) -> ProviderError:
    """The typed error for an error object inside a stream or a 200 body (see the module)."""
    kind, code, message = error_fields(data)
    text = describe(provider, what, kind or code, message, secrets)
    if _context_exceeded(code, message):
        return ContextWindowExceeded(text)
    fatal = _FATAL_ERRORS.get(kind or "") or _FATAL_ERRORS.get(code or "")
    return fatal(text) if fatal is not None else StreamErrorEvent(text)


def public_url(url: str) -> str:
    """``scheme://host:port/path`` of ``url``: no user, password, query or fragment
    (where a key could hide), the port always shown (the default one when not given)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(an invalid URL)"
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    if port is None:
        port = {"http": 80, "https": 443}.get(parts.scheme)
    where = f"{host}:{port}" if port is not None else host
    return f"{parts.scheme}://{where}{parts.path}"


def error_for_exception(
    exc: BaseException,
    *,
    provider: str = "provider",
    mid_stream: bool = False,
    secrets: Iterable[str | None] = (),
    url: str | None = None,
) -> ProviderError:
    """The typed error for an httpx failure (naming ``url`` as :func:`public_url` shows it).

    Timeouts are :class:`ProviderTimeout`; a connection refused, reset or
    closed is :class:`ConnectionDropped`, or :class:`StreamInterrupted` when
    it happened mid-stream (after a streaming answer had begun); undecodable
    bodies are :class:`MalformedResponse`; a URL or request that httpx cannot
    send at all is :class:`InvalidRequest`.
    """
    import httpx

    detail = redact(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, secrets)
    detail = _truncate(detail)
    if url:
        detail = f"{detail}; POST {redact(public_url(url), secrets)}"
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


__all__ = [
    "error_for_event",
    "error_for_exception",
    "error_for_status",
    "parse_retry_after",
    "public_url",
    "redact",
    "retry_after_from_headers",
    "scrub_logs_of",
]
