"""Normalized request and response types shared by every provider."""

from __future__ import annotations

import base64
import binascii
import enum
import os
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from ._settings import ModelSettings


class StopReason(enum.StrEnum):
    """Why the model stopped, normalized across providers (docs/concepts/round.md, stop reasons)."""

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
        """The same as ``input`` (the name policies know it by: docs/guides/policies.md)."""
        return self.input


#: The image media types tether accepts: those both vendors take (Anthropic's
#: vision and OpenAI's image input both list JPEG, PNG, GIF and WebP).
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")

#: The largest image, in bytes (3.75 MiB). Anthropic caps one image at 5 MB of
#: *base64* (5,242,880 characters), which is 3,932,160 bytes before encoding;
#: OpenAI allows 20 MB an image. The tighter of the two holds, so an image that
#: is accepted here is accepted by both.
MAX_IMAGE_BYTES = 3_932_160

#: Input tokens counted for one image where tether estimates (no usage reported,
#: the scripted provider): Anthropic's ~1,600 for an image it does not scale
#: down (about 1.15 megapixels), more than OpenAI's high-detail 1,024x1,024.
IMAGE_TOKENS_ESTIMATE = 1_600

# The first bytes of each supported format (GIF87a/GIF89a; RIFF....WEBP).
_MAGIC = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_media_type(data: bytes) -> str | None:
    """The media type ``data``'s first bytes show (JPEG, PNG, GIF, WebP), or ``None``."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _image_bytes(value: bytes | bytearray | memoryview | None) -> bytes | None:
    # Typed for mypy's sake; checked for callers that are not type-checked.
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"Image data must be bytes, got {type(value).__name__}")


def _media_type(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"Image media_type must be a str, got {type(value).__name__}")
    value = value.strip().lower()
    # A common misspelling (the file extension), not a registered type: read it kindly.
    return "image/jpeg" if value == "image/jpg" else value


def _size(n: int) -> str:
    return f"{n:,} bytes ({n / 1024 / 1024:.2f} MiB)"


@attrs.frozen(kw_only=True)
class Image:
    """An image content block: its bytes and media type, or a URL.

    Make one with :meth:`from_path`, :meth:`from_bytes` or :meth:`from_url`; it
    goes in a run's input (``rt.run(agent, ["What is this?", image])``), in a
    tool's result, and in :class:`Message` content. It is checked when it is
    made, so a bad image fails at your call, not inside a run: the bytes must be
    a JPEG, PNG, GIF or WebP image (:data:`IMAGE_MEDIA_TYPES`) whose first bytes
    agree with ``media_type``, at most :data:`MAX_IMAGE_BYTES` long; a URL must
    be ``http(s)://`` (``from_url`` decodes ``data:`` URLs into bytes). A URL
    image is fetched by the provider's servers, not by tether.

    tether reads no further into the image than its first bytes: the pixel
    size (Anthropic refuses more than 8,000 px a side) and animation (OpenAI
    takes still GIFs only) are the vendor's to check.
    """

    media_type: str | None = attrs.field(default=None, converter=_media_type)
    data: bytes | None = attrs.field(
        default=None,
        converter=_image_bytes,
        repr=lambda d: "None" if d is None else f"<{len(d):,} bytes>",
    )
    url: str | None = None
    type: Literal["image"] = "image"

    def __attrs_post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError(
                "an Image has either data (with a media_type) or a url: "
                "use Image.from_bytes(), Image.from_path() or Image.from_url()"
            )
        media_type = self.media_type
        if media_type is not None and media_type not in IMAGE_MEDIA_TYPES:
            raise ValueError(
                f"unsupported image media type {media_type!r}; "
                f"supported: {', '.join(IMAGE_MEDIA_TYPES)}"
            )
        if self.url is not None:
            if not isinstance(self.url, str) or not self.url.lower().startswith(
                ("http://", "https://")
            ):
                raise ValueError(
                    f"an Image url must start with http:// or https://, got {self.url!r:.80} "
                    "(Image.from_url() also takes a data: URL)"
                )
            return
        data = self.data
        assert data is not None
        if not data:
            raise ValueError("an Image's data is empty")
        if len(data) > MAX_IMAGE_BYTES:
            raise ValueError(
                f"the image is {_size(len(data))}; the limit is {_size(MAX_IMAGE_BYTES)} "
                "(Anthropic's 5 MB cap on the base64 form): scale it down or pass a URL"
            )
        found = sniff_media_type(data)
        if found is None:
            raise ValueError(
                f"the data is not a JPEG, PNG, GIF or WebP image (it starts {data[:8]!r}); "
                f"supported: {', '.join(IMAGE_MEDIA_TYPES)}"
            )
        if media_type is None:
            raise ValueError(f"an Image with data needs a media_type (this one looks like {found})")
        if found != media_type:
            raise ValueError(f"the data is a {found} image, but media_type says {media_type}")

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, media_type: str | None = None
    ) -> Image:
        """An image from its bytes; ``media_type`` (``"image/png"``...) is read from
        the bytes when not given."""
        data = _image_bytes(data) or b""
        if media_type is None:
            media_type = sniff_media_type(data)
            if media_type is None and data:
                raise ValueError(
                    f"the data is not a JPEG, PNG, GIF or WebP image (it starts {data[:8]!r}); "
                    f"supported: {', '.join(IMAGE_MEDIA_TYPES)}"
                )
        return cls(data=data, media_type=media_type)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> Image:
        """An image read from a file now (its type from its first bytes)."""
        size = os.stat(path).st_size
        if size > MAX_IMAGE_BYTES:
            raise ValueError(
                f"{os.fspath(path)!r} is {_size(size)}; the limit is {_size(MAX_IMAGE_BYTES)} "
                "(Anthropic's 5 MB cap on the base64 form): scale it down or pass a URL"
            )
        with open(path, "rb") as f:
            data = f.read(MAX_IMAGE_BYTES + 1)
        return cls.from_bytes(data)

    @classmethod
    def from_url(cls, url: str) -> Image:
        """An image at an ``http(s)://`` URL, or the bytes of a ``data:`` URL."""
        if not isinstance(url, str):
            raise TypeError(f"Image.from_url() wants a str, got {type(url).__name__}")
        if url[:5].lower() != "data:":
            return cls(url=url)
        head, sep, payload = url[5:].partition(",")
        kind, _, encoding = head.partition(";")
        if not sep or encoding.lower() != "base64":
            raise ValueError("a data: URL image must be 'data:<media type>;base64,<data>'")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"the data: URL's base64 is malformed ({exc})") from None
        return cls.from_bytes(data, kind or None)

    def base64(self) -> str:
        """The bytes as base64 text (``""`` for a URL image)."""
        return "" if self.data is None else base64.b64encode(self.data).decode("ascii")

    def data_url(self) -> str:
        """A ``data:`` URL of the bytes, or the image's URL."""
        if self.url is not None:
            return self.url
        return f"data:{self.media_type};base64,{self.base64()}"

    def describe(self) -> str:
        """A short text stand-in, where only text fits (events, the input's text form)."""
        if self.url is not None:
            return f"[image: {self.url:.200}]"
        assert self.data is not None
        return f"[image: {self.media_type}, {len(self.data):,} bytes]"


@attrs.frozen(kw_only=True)
class ToolResultBlock:
    """A tool's result for the ``tool_use`` with id ``tool_use_id``.

    ``content`` is its text; a tool that returned images has them in
    ``images``, after the text (providers send them in that order).
    """

    tool_use_id: str
    content: str
    is_error: bool = False
    images: tuple[Image, ...] = ()
    type: Literal["tool_result"] = "tool_result"


@attrs.frozen(kw_only=True)
class Reasoning:
    """A model's reasoning ("thinking"), kept in the transcript so it can be sent back.

    Reasoning models hand back their reasoning as content that the next request
    must carry unchanged, above all with tool use: Anthropic's ``thinking``
    blocks (``text`` and its ``signature``) and ``redacted_thinking`` blocks
    (``redacted=True``, the encrypted ``data`` in ``signature``); OpenAI
    Responses ``reasoning`` items (``id``, the summary as ``text``, the
    ``encrypted_content`` in ``signature``); Gemini thought summaries (``text``)
    and ``thoughtSignature`` (``signature``).

    ``provider`` names the wire format that made it (``"anthropic"``,
    ``"openai-responses"``, ``"gemini"``): a signature is only good to the
    vendor that signed it, so every provider sends back only its own and skips
    the rest (a transcript may change provider, through a fallback). The
    ``signature`` is opaque: tether stores it and sends it back, byte for byte,
    and never reads it.
    """

    #: The reasoning's readable text (or its summary); ``""`` when redacted or not given.
    text: str = ""
    #: The vendor's signature or encrypted payload, sent back unchanged; ``None``: none.
    signature: str | None = attrs.field(
        default=None, repr=lambda s: "None" if s is None else f"<{len(s):,} chars>"
    )
    #: The text is withheld (Anthropic ``redacted_thinking``): only ``signature`` is kept.
    redacted: bool = False
    #: The wire format that made it; others skip it (``None``: any may send its text).
    provider: str | None = None
    #: The vendor's id of the item (OpenAI's ``rs_...``), when it has one.
    id: str | None = None
    type: Literal["reasoning"] = "reasoning"

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"Reasoning.text must be a str, got {type(self.text).__name__}")
        for name in ("signature", "provider", "id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"Reasoning.{name} must be a str or None, got {value!r:.80}")
        if not isinstance(self.redacted, bool):
            raise TypeError(f"Reasoning.redacted must be a bool, got {self.redacted!r}")
        if self.redacted and self.text:
            raise ValueError("a redacted Reasoning has no text (its payload is in signature)")


ContentBlock = TextBlock | Image | ToolUseBlock | ToolResultBlock | Reasoning


@attrs.frozen(kw_only=True)
class Message:
    """One turn of a transcript: a ``role`` and its content blocks.

    Blocks are provider-neutral: :class:`TextBlock`, :class:`Image`,
    :class:`ToolUseBlock` and :class:`Reasoning` (the assistant's) and
    :class:`ToolResultBlock` (the user's, one per tool use). ``tether.dump_messages`` and
    ``tether.load_messages`` turn a transcript into JSON and back.
    """

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
    """What the model is told about a tool.

    A tool's definition is made once and shared by every request that offers the
    tool, in every run: a provider reads ``input_schema`` and must not change it
    (copy it first to send an altered schema).
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class OutputFormat:
    """A native structured-output format: the answer's text is JSON matching ``schema``.

    Sent only to providers whose ``native_output`` is true (OpenAI's
    ``response_format: {"type": "json_schema", ...}``, Anthropic's
    ``output_config: {"format": {"type": "json_schema", ...}}``).
    """

    name: str
    #: The JSON Schema of the answer (an object at the root).
    schema: Mapping[str, Any]
    #: Ask the provider to enforce the schema exactly (OpenAI's ``strict``).
    strict: bool = False


@attrs.frozen(kw_only=True)
class ModelRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDef, ...] = ()
    #: Output-token cap for this call; ``None`` uses the provider's default.
    max_tokens: int | None = None
    #: The run's merged settings (``None``: none set); ``max_tokens`` above already
    #: holds the clamped cap, the provider maps the other fields.
    settings: ModelSettings | None = None
    #: A native structured-output format (``Agent(output_mode="native")``), else ``None``.
    output_format: OutputFormat | None = None


@attrs.frozen(kw_only=True)
class TokenUsage:
    """One call's usage, as its provider reported it (Anthropic's convention).

    The three input counts do not overlap: ``input_tokens`` are the input
    tokens neither read from nor written to the prompt cache (Anthropic's
    ``input_tokens``; OpenAI's ``prompt_tokens`` minus its ``cached_tokens``),
    ``cache_read_tokens`` were read from it, ``cache_write_tokens`` written to
    it. Each is priced at its own rate (:meth:`Price.cost`). :attr:`prompt_tokens`
    is their sum: every input token, as a run's ``Usage.input_tokens`` counts.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Of ``output_tokens``, those spent reasoning (OpenAI's ``reasoning_tokens``,
    #: Gemini's ``thoughtsTokenCount``), where the provider says; already in ``output_tokens``.
    reasoning_tokens: int = 0
    #: Counted by tether's estimator (the provider reported no usage), not by the provider.
    estimated: bool = False

    @property
    def prompt_tokens(self) -> int:
        """Every input token: uncached, read from the cache and written to it."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        """Every input and output token."""
        return self.prompt_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            estimated=self.estimated or other.estimated,
        )


ZERO_USAGE = TokenUsage()


@attrs.frozen(kw_only=True)
class TextDelta:
    """A piece of the answer's text, as it streams in."""

    text: str


@attrs.frozen(kw_only=True)
class ReasoningDelta:
    """A piece of the model's reasoning text (or its summary), as it streams in.

    The whole reasoning, with its signature, comes in the :class:`ModelResponse`
    as :class:`Reasoning` blocks. Its text counts as output while tether
    estimates a stream's usage (thinking tokens are output tokens).
    """

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

    @property
    def reasoning(self) -> tuple[Reasoning, ...]:
        return tuple(b for b in self.content if isinstance(b, Reasoning))


StreamItem = TextDelta | ToolCallDelta | ReasoningDelta | UsageDelta | ModelResponse


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

    Optional: ``check_ready()``, which raises the configuration error every
    request would (no API key where the endpoint needs one) without sending
    anything; ``Runtime.start`` calls it, so the error comes before a run exists.
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
