"""What the HTTP providers share: their settings, key handling and the protocol's easy half."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import urlsplit

import attrs

from ._arguments import arguments_text
from ._errors import AuthenticationFailed
from ._prices import context_window_for, price_for
from ._types import (
    Backoff,
    ModelResponse,
    Price,
    Reasoning,
    ReasoningDelta,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    UsageDelta,
)
from ._wire_errors import scrub_logs_of


@attrs.define(eq=False)
class HttpProvider:
    """Settings common to :class:`AnthropicProvider` and :class:`OpenAIProvider`.

    The key comes from ``api_key`` or the vendor's environment variable, read
    at construction; it never appears in a repr, an event or an error.
    ``stream=False`` asks for one JSON body instead of server-sent events.
    ``timeout_s`` overrides every HTTP timeout of one request.
    ``max_response_bytes`` bounds one answer's body (8 MiB by default, a
    hundred times a long answer): a runaway stream, or a huge body, ends the
    call with :class:`ResponseTooLarge` instead of filling memory.
    """

    #: The provider's name in events and gate keys.
    name: ClassVar[str]
    #: The environment variable the key is read from.
    api_key_env: ClassVar[str]
    #: Whether the wire format has a native structured-output mode (``ModelRequest.output_format``).
    native_output: ClassVar[bool] = False

    model: str
    api_key: str | None = attrs.field(default=None, kw_only=True, repr=False)
    base_url: str = attrs.field(default="", kw_only=True)
    max_tokens: int = attrs.field(default=4096, kw_only=True)
    backoff: Backoff = attrs.field(factory=Backoff, kw_only=True)
    streaming: bool = attrs.field(default=True, kw_only=True, alias="stream")
    timeout_s: float | None = attrs.field(default=None, kw_only=True)
    max_response_bytes: int = attrs.field(default=8 * 1024 * 1024, kw_only=True)
    #: The model's context window in tokens: the price table's for a known model;
    #: give it for another (a local server's model). ``None``: unknown, not bounded.
    context_window: int | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        self.api_key = resolve_key(self.api_key, self.api_key_env)
        if self.api_key is not None:
            scrub_logs_of((self.api_key,))
        self.base_url = check_base_url(self.base_url)
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        if self.max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be >= 1, got {self.max_response_bytes!r}")
        if self.context_window is None:
            self.context_window = context_window_for(self.model)
        elif not isinstance(self.context_window, int) or self.context_window < 1:
            raise ValueError(f"context_window must be a positive int, got {self.context_window!r}")

    def price(self) -> Price | None:
        return price_for(self.model)

    @property
    def needs_key(self) -> bool:
        """Whether a request cannot be sent without a key (the vendor's own API)."""
        return True

    def check_ready(self) -> None:
        """Raise the error the first request would (:class:`AuthenticationFailed`:
        no key where the endpoint needs one, or a key no header can carry), without
        sending anything: the Runtime calls it when a run is started."""
        if self.api_key is not None:
            check_key(self.api_key, self.name)
        elif self.needs_key:
            raise AuthenticationFailed(
                f"{self.name}: no API key: pass api_key= or set {self.api_key_env}"
            )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled without its key: a copy (on a Ray host, in a child process) reads
        the key from ``api_key_env`` in its own environment, so a key never travels."""
        fields = {
            a.alias: getattr(self, a.name) for a in attrs.fields(type(self)) if a.name != "api_key"
        }
        return (_rebuilt, (type(self), fields))

    def __copy__(self) -> HttpProvider:
        # A copy in this process keeps its key (pickling drops it; see __reduce__).
        return attrs.evolve(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> HttpProvider:
        return attrs.evolve(self)

    def gate_key(self) -> str:
        return f"{self.name}:{self.base_url}"


def _rebuilt(cls: type[HttpProvider], fields: dict[str, Any]) -> HttpProvider:
    return cls(**fields)


def whole_response(response: ModelResponse) -> Iterator[StreamItem]:
    """A response that arrived in one piece, played as a stream: reasoning, text, each
    tool call's arguments, usage, response."""
    for block in response.content:
        if type(block) is Reasoning and block.text:
            yield ReasoningDelta(text=block.text)
    if response.text:
        yield TextDelta(text=response.text)
    for call in response.tool_calls:
        yield ToolCallDelta(
            call_id=call.id, name=call.name, arguments_delta=arguments_text(call.input)
        )
    yield UsageDelta(usage=response.usage)
    yield response


def resolve_key(value: str | None, env: str) -> str | None:
    """``value``, else the environment variable ``env``; stripped; ``None`` when empty."""
    key = value if value is not None else os.environ.get(env)
    key = key.strip() if key else None
    return key or None


@functools.lru_cache(maxsize=64)
def _header_safe(key: str) -> bool:
    # Cached: checked before every request, and a key is a hundred characters.
    return key.isascii() and key.isprintable() and not any(ch.isspace() for ch in key)


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
    if not _header_safe(key):
        raise AuthenticationFailed(
            f"{provider}: the API key contains characters not allowed in an HTTP header"
        )
