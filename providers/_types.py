"""Normalized request and response types shared by every provider."""

from __future__ import annotations

import enum
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import attrs


class StopReason(enum.StrEnum):
    """Why the model stopped, normalized across providers (DESIGN §6)."""

    END_TURN = "end_turn"
    STOP_SEQUENCE = "stop_sequence"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    PAUSE_TURN = "pause_turn"
    REFUSAL = "refusal"
    MODEL_CONTEXT_WINDOW_EXCEEDED = "model_context_window_exceeded"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, raw: str | None) -> StopReason:
        """Map a wire value (Anthropic ``stop_reason`` or OpenAI ``finish_reason``)."""
        if raw is None:
            return cls.UNKNOWN
        mapped = _OPENAI_FINISH.get(raw, raw)
        try:
            return cls(mapped)
        except ValueError:
            return cls.UNKNOWN


_OPENAI_FINISH = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


@attrs.frozen(kw_only=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@attrs.frozen(kw_only=True)
class ToolUseBlock:
    """A tool call requested by the model.

    ``input`` is what the model sent: normally a JSON object (a dict). When the
    model's arguments were not valid JSON, or nested deeper than
    ``MAX_TOOL_ARGUMENT_DEPTH``, it is the raw JSON text (a string), and the
    tool actor answers with an error the model can act on.
    """

    id: str
    name: str
    input: Any
    type: Literal["tool_use"] = "tool_use"

    @property
    def arguments(self) -> Any:
        """The same as ``input`` (the name DESIGN §13 gives policies)."""
        return self.input


@attrs.frozen(kw_only=True)
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"


ContentBlock = TextBlock | ToolUseBlock | ToolResultBlock


@attrs.frozen(kw_only=True)
class Message:
    role: Literal["user", "assistant"]
    content: tuple[ContentBlock, ...]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=(TextBlock(text=text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", content=(TextBlock(text=text),))

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


@attrs.frozen(kw_only=True)
class ToolDef:
    """What the model is told about a tool."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class ModelRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDef, ...] = ()
    #: Output-token cap for this call; ``None`` uses the provider's default.
    max_tokens: int | None = None


@attrs.frozen(kw_only=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Counted by tether's estimator (the provider reported no usage), not by the provider.
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            estimated=self.estimated or other.estimated,
        )


ZERO_USAGE = TokenUsage()


@attrs.frozen(kw_only=True)
class TextDelta:
    """A piece of the answer's text, as it streams in."""

    text: str


@attrs.frozen(kw_only=True)
class ToolCallDelta:
    """A piece of a tool call's arguments (JSON text), as it streams in.

    ``call_id`` and ``name`` repeat on every piece of one call; the pieces of
    one call, joined, are its arguments' JSON text. The call itself, parsed,
    comes in the :class:`ModelResponse`.
    """

    call_id: str
    name: str
    arguments_delta: str


@attrs.frozen(kw_only=True)
class UsageDelta:
    """Usage of the current attempt so far (cumulative, not an increment)."""

    usage: TokenUsage


@attrs.frozen(kw_only=True)
class ModelResponse:
    content: tuple[ContentBlock, ...]
    stop_reason: StopReason
    usage: TokenUsage = ZERO_USAGE
    #: The provider's own stop value, kept for the event trail.
    raw_stop_reason: str | None = None
    model: str | None = None

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))


StreamItem = TextDelta | ToolCallDelta | UsageDelta | ModelResponse


@attrs.frozen(kw_only=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, usage: TokenUsage) -> float:
        cache_read = self.input if self.cache_read is None else self.cache_read
        cache_write = self.input if self.cache_write is None else self.cache_write
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * cache_read
            + usage.cache_write_tokens * cache_write
        ) / 1_000_000


@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential backoff between provider attempts.

    The wait before attempt ``n + 1`` is ``initial * multiplier ** (n - 1)``,
    capped at ``cap``; with ``jitter`` it is drawn uniformly from ``[wait/2, wait]``.
    A server's ``retry-after`` wins when it is longer (still capped).
    """

    initial: float = attrs.field(default=0.5)
    multiplier: float = 2.0
    cap: float = 30.0
    jitter: bool = True

    def __attrs_post_init__(self) -> None:
        if not self.initial >= 0:
            raise ValueError(f"Backoff.initial must be >= 0, got {self.initial!r}")
        if not self.multiplier >= 1:
            raise ValueError(f"Backoff.multiplier must be >= 1, got {self.multiplier!r}")
        if not self.cap >= 0:
            raise ValueError(f"Backoff.cap must be >= 0, got {self.cap!r}")

    def wait(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.cap, self.initial * self.multiplier ** max(0, attempt - 1))
        if self.jitter:
            base = random.uniform(base / 2, base)
        if retry_after is not None:
            base = max(base, min(self.cap, retry_after))
        return base


@attrs.frozen(kw_only=True)
class ProviderContext:
    """What a provider gets from the runtime for one request."""

    #: The run the request belongs to (for logs and scripted providers).
    run_id: str
    #: 0-based count of requests this run's caller has sent to this provider,
    #: retries included. Scripted providers index their script with it.
    call_index: int
    #: Shared HTTP clients, one per endpoint per Runtime; ``None`` outside a Runtime.
    http: HttpPoolLike | None = None


class HttpPoolLike(Protocol):
    def client(self, base_url: str) -> Any:
        """The Runtime's ``httpx.AsyncClient`` for ``base_url``."""
        ...


@runtime_checkable
class Provider(Protocol):
    """A model provider.

    ``stream`` yields deltas and ends with exactly one :class:`ModelResponse`.
    It raises :class:`~tether.providers.ProviderError` subclasses only.
    """

    @property
    def name(self) -> str:
        """The provider's name in events (``anthropic``, ``openai``, ``scripted``)."""
        ...

    model: str
    backoff: Backoff

    def stream(self, request: ModelRequest, ctx: ProviderContext) -> AsyncIterator[StreamItem]: ...

    def price(self) -> Price | None:
        """The model's price, or ``None`` when the price table does not know it."""
        ...

    def gate_key(self) -> str | None:
        """Runs whose providers share a key share one gate (concurrency and 429 pauses);
        ``None``: no gate (a provider with no remote API to protect)."""
        ...
