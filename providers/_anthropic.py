"""``AnthropicProvider``: the Anthropic Messages API over httpx, streaming SSE included.

Decisions:

- The key comes from ``api_key=`` or ``ANTHROPIC_API_KEY`` (read once, at
  construction; surrounding whitespace stripped). A missing key does not fail
  construction (an agent may be built where no key is configured, as in tests
  that swap providers): the first request raises :class:`AuthenticationFailed`
  ("no API key: pass api_key= or set ANTHROPIC_API_KEY") without sending
  anything. The key is in no repr, event, log or error message.
- One ``stream()`` call is one HTTP attempt; retries belong to the model actor.
- ``timeout_s`` replaces every httpx timeout (connect, read between bytes,
  write, pool) for this provider's requests; ``None`` keeps the pool's
  (connect 10 s, read 600 s).
- Content blocks other than ``text`` and ``tool_use`` (thinking, server tools)
  are skipped in answers. An :class:`Image` is sent as an ``image`` block with a
  ``base64`` source (or a ``url`` source); a tool result with images sends its
  content as a list: its text, then its image blocks. ``tool_result`` blocks
  are sent first in a user turn, as the API requires. A ``tool_use`` whose
  input is not an object (a model's invalid JSON, or input nested deeper than
  ``MAX_TOOL_ARGUMENT_DEPTH``, kept as a string) is sent back as ``{}``: the
  API accepts objects only.
- An ``error`` event inside a stream raises :class:`StreamErrorEvent`
  (transient), except the error types no retry can fix
  (``invalid_request_error``, ``authentication_error``, ``permission_error``,
  ``not_found_error``), which raise their fatal classes.
- Streamed text comes as ``TextDelta`` items, a tool call's ``input_json_delta``
  pieces as ``ToolCallDelta`` items (the call's id and name on each).
- Non-streaming (``stream=False``) answers are yielded as one ``TextDelta``
  (if any text), one ``ToolCallDelta`` per tool call (its whole arguments),
  one ``UsageDelta`` and the ``ModelResponse``.
- A request's ``output_format`` (``Agent(output_mode="native")``) is sent as
  structured outputs' ``output_config: {"format": {"type": "json_schema",
  "schema": ...}}`` (generally available, no beta header; Claude Sonnet 4.5,
  Opus 4.5, Haiku 4.5 and later); the answer is the message's text.
- Prompt caching (``cache="auto"``) puts ``cache_control: {"type":
  "ephemeral"}`` breakpoints on the last tool (the catalogue), the system
  prompt (sent as one text block for it), the last content block of the last
  message (the newest turn, written for the next round to read) and the last
  block of the user message before it (the previous round's breakpoint: read
  back even when a round added more blocks than the API looks back over): at
  most 4, the API's limit. It is off by default: a cache write costs 1.25
  times the input price, so caching pays only when a long prefix is sent
  again within the cache's five minutes (a run of several rounds, a repeated
  system prompt), which the caller knows and tether does not; and a request
  without it is byte for byte what it was. Prefixes shorter than the model's
  minimum (1,024 or 2,048 tokens) are not cached, silently, by the API.
- Usage: ``input_tokens`` is Anthropic's (the uncached input);
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are
  ``cache_read_tokens`` and ``cache_write_tokens``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Literal

import attrs
from httpx_sse import ServerSentEvent

from ._arguments import bound_arguments, parse_tool_arguments
from ._base import HttpProvider, check_key, whole_response
from ._errors import (
    AuthenticationFailed,
    MalformedResponse,
    ProviderError,
    StreamInterrupted,
)
from ._http import HttpCall, JsonBody, drain, post_json, post_sse
from ._settings import (
    ModelSettings,
    add_extra_body,
    extra_headers,
    refuse,
    refuse_overrides,
)
from ._shape import Shape
from ._types import (
    ZERO_USAGE,
    ContentBlock,
    Image,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderContext,
    Reasoning,
    ReasoningDelta,
    StopReason,
    StreamItem,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    ToolResultBlock,
    ToolUseBlock,
    UsageDelta,
)
from ._wire_errors import error_for_event

API_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_BASE_URL = "https://api.anthropic.com"

#: The ModelSettings fields the Messages API has a place for (no ``seed``).
SUPPORTED_SETTINGS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "stop_sequences",
        "tool_choice",
        "parallel_tool_calls",
        "metadata",
        "thinking_budget",
        "extra_headers",
        "extra_body",
    }
)
#: Body fields tether writes itself; ``extra_body`` may not replace them.
OWN_FIELDS = frozenset(
    {
        "model",
        "thinking",
        "max_tokens",
        "messages",
        "system",
        "tools",
        "stream",
        "temperature",
        "top_p",
        "stop_sequences",
        "tool_choice",
        "metadata",
    }
)
#: Headers tether sets itself; ``extra_headers`` may not replace them.
OWN_HEADERS = frozenset(
    {"x-api-key", "authorization", "anthropic-version", "content-type", "accept"}
)
_TOOL_CHOICE = {"auto": "auto", "required": "any", "none": "none"}
#: ``AnthropicProvider(cache=...)``: ``"auto"`` marks the prompt for caching.
CacheMode = Literal["off", "auto"]
#: The smallest ``budget_tokens`` the Messages API takes for extended thinking.
MIN_THINKING_BUDGET = 1024
#: The breakpoint tether puts on a block (the default five-minute cache).
EPHEMERAL = {"type": "ephemeral"}
#: The most ``cache_control`` breakpoints the Messages API takes in one request.
MAX_CACHE_BREAKPOINTS = 4


def _cache_mode(value: object) -> CacheMode:
    if value == "off" or value is None or value is False:
        return "off"
    if value == "auto":
        return "auto"
    raise ValueError(f'AnthropicProvider(cache=...) takes "auto" or "off", got {value!r}')


@attrs.define(eq=False)
class AnthropicProvider(HttpProvider):
    """A :class:`~tether.providers.Provider` for the Anthropic Messages API."""

    name = "anthropic"
    api_key_env = API_KEY_ENV
    #: Structured outputs: ``output_config.format`` with a ``json_schema``.
    native_output = True

    base_url: str = attrs.field(default=DEFAULT_BASE_URL, kw_only=True)
    anthropic_version: str = attrs.field(default="2023-06-01", kw_only=True)
    #: ``"auto"``: prompt-caching breakpoints on the tools, the system prompt and
    #: the newest turn (see the module's notes); ``"off"`` (the default): none.
    cache: CacheMode = attrs.field(default="off", kw_only=True, converter=_cache_mode)

    # -- Provider protocol ------------------------------------------------

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        call = self._http_call(request)
        shape = Shape(self.name)
        if not self.streaming:
            data = await post_json(ctx.http, call)
            for item in whole_response(self.parse_message(data, shape)):
                yield item
            return
        state = _StreamState(shape=shape, secrets=call.secrets, model=self.model)
        whole: ModelResponse | None = None
        async with aclosing(post_sse(ctx.http, call)) as events:
            async for event in events:
                if isinstance(event, JsonBody):
                    whole = self.parse_message(event.value, shape)
                    break
                for item in state.feed(event):
                    if not isinstance(item, ModelResponse):
                        yield item
                if state.finished is not None:
                    # Read the body's end so the connection can be reused.
                    await drain(events)
                    break
        if whole is not None:
            for item in whole_response(whole):
                yield item
            return
        if state.finished is None:
            raise StreamInterrupted(
                f"anthropic: the stream ended before message_stop (after {state.events} events)"
            )
        yield state.finished

    def check_settings(self, settings: ModelSettings) -> None:
        """``ValueError`` for a setting the Messages API cannot take (see the module)."""
        refuse(self.name, settings, SUPPORTED_SETTINGS)
        if settings.temperature is not None and settings.temperature > 1:
            raise ValueError(
                f"anthropic: ModelSettings.temperature must be in [0, 1], "
                f"got {settings.temperature!r}"
            )
        _check_thinking(settings)
        extra = sorted(set(settings.metadata or ()) - {"user_id"})
        if extra:
            raise ValueError(
                f"anthropic: ModelSettings.metadata takes only 'user_id', got {', '.join(extra)}"
            )
        refuse_overrides(self.name, settings, body_fields=OWN_FIELDS, headers=OWN_HEADERS)

    # -- request ------------------------------------------------------------

    def _http_call(self, request: ModelRequest) -> HttpCall:
        if self.api_key is None:
            raise AuthenticationFailed(f"anthropic: no API key: pass api_key= or set {API_KEY_ENV}")
        check_key(self.api_key, self.name)
        headers = {
            "x-api-key": self.api_key,
            "anthropic-version": self.anthropic_version,
            "content-type": "application/json",
            "accept": "text/event-stream" if self.streaming else "application/json",
        }
        if request.settings is not None and request.settings.extra_headers:
            headers = extra_headers(self.name, request.settings, headers, OWN_HEADERS)
        return HttpCall(
            provider=self.name,
            base_url=self.base_url,
            url=f"{self.base_url}/v1/messages",
            headers=headers,
            payload=self.request_body(request),
            timeout_s=self.timeout_s,
            max_bytes=self.max_response_bytes,
            secrets=(self.api_key,),
        )

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (the Messages API's shape)."""
        settings = request.settings
        max_tokens = request.max_tokens
        if max_tokens is None:
            max_tokens = (settings and settings.max_tokens) or self.max_tokens
        budget = settings.thinking_budget if settings is not None else None
        thinking: dict[str, Any] | None = None
        if budget == 0:
            thinking = {"type": "disabled"}
        elif budget is not None:
            if request.max_tokens is None and (settings is None or settings.max_tokens is None):
                # The default cap is for the answer: thinking comes on top of it.
                max_tokens += budget
            # budget_tokens must stay below max_tokens (which the clamp may have lowered).
            budget = min(budget, max_tokens - 1)
            if budget >= MIN_THINKING_BUDGET:
                thinking = {"type": "enabled", "budget_tokens": budget}
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": [_message(m) for m in request.messages],
        }
        if thinking is not None:
            body["thinking"] = thinking
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        if request.output_format is not None:
            # Structured outputs (GA, no beta header): the answer's text is the JSON.
            schema = request.output_format.schema
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        if self.streaming:
            body["stream"] = True
        if settings is not None:
            _settings(body, settings, bool(request.tools))
        if self.cache == "auto":
            mark_cache_breakpoints(body)
        return body

    # -- response -----------------------------------------------------------

    def parse_message(self, data: Any, shape: Shape) -> ModelResponse:
        """A whole (non-streaming) Messages API response."""
        message = shape.obj(data, "the response")
        if message.get("type") == "error":
            raise _event_error(message, shape.provider, ())
        content: list[ContentBlock] = []
        for i, raw in enumerate(shape.arr(message.get("content"), "message.content")):
            block = shape.obj(raw, f"message.content[{i}]")
            kind = block.get("type")
            if kind == "text":
                text = shape.text(block.get("text"), f"message.content[{i}].text")
                if text:
                    content.append(TextBlock(text=text))
            elif kind == "thinking":
                content.append(
                    Reasoning(
                        text=shape.text(block.get("thinking"), f"message.content[{i}].thinking"),
                        signature=shape.text(
                            block.get("signature"), f"message.content[{i}].signature"
                        ),
                        provider="anthropic",
                    )
                )
            elif kind == "redacted_thinking":
                content.append(
                    Reasoning(
                        redacted=True,
                        signature=shape.text(block.get("data"), f"message.content[{i}].data"),
                        provider="anthropic",
                    )
                )
            elif kind == "tool_use":
                content.append(
                    ToolUseBlock(
                        id=shape.text(block.get("id"), f"message.content[{i}].id"),
                        name=shape.text(block.get("name"), f"message.content[{i}].name"),
                        input=bound_arguments(block.get("input", {})),
                    )
                )
        raw_stop = shape.opt_text(message.get("stop_reason"), "message.stop_reason")
        usage_raw = message.get("usage")
        usage = ZERO_USAGE if usage_raw is None else _usage(usage_raw, ZERO_USAGE, shape)
        return ModelResponse(
            content=tuple(content),
            stop_reason=StopReason.parse(raw_stop),
            usage=usage,
            raw_stop_reason=raw_stop,
            model=shape.opt_text(message.get("model"), "message.model") or self.model,
        )


def _check_thinking(settings: ModelSettings) -> None:
    """``ValueError`` for what extended thinking cannot go with (Anthropic's documented limits)."""
    budget = settings.thinking_budget
    if budget is None or budget == 0:
        return
    if budget < MIN_THINKING_BUDGET:
        raise ValueError(
            f"anthropic: ModelSettings.thinking_budget must be at least {MIN_THINKING_BUDGET} "
            f"tokens (or 0, thinking off), got {budget!r}"
        )
    if settings.max_tokens is not None and settings.max_tokens <= budget:
        raise ValueError(
            f"anthropic: ModelSettings.max_tokens ({settings.max_tokens}) must be more than "
            f"thinking_budget ({budget}): thinking tokens are output tokens"
        )
    if settings.temperature is not None and settings.temperature != 1:
        raise ValueError(
            "anthropic: extended thinking (thinking_budget) takes no temperature other than 1; "
            f"got temperature={settings.temperature!r}"
        )
    if settings.top_p is not None and not 0.95 <= settings.top_p <= 1:
        raise ValueError(
            f"anthropic: with extended thinking top_p must be in [0.95, 1], got {settings.top_p!r}"
        )
    if settings.tool_choice is not None and settings.tool_choice not in ("auto", "none"):
        raise ValueError(
            "anthropic: extended thinking (thinking_budget) takes tool_choice 'auto' or 'none' "
            f"only (no forced tool use), got {settings.tool_choice!r}"
        )


def _settings(body: dict[str, Any], settings: ModelSettings, has_tools: bool) -> None:
    """Map ``settings`` onto the Messages API's fields (unset ones are not sent).

    ``tool_choice`` and ``disable_parallel_tool_use`` go only with tools (the
    API refuses them otherwise, and without tools there is nothing to choose).
    """
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.stop_sequences is not None:
        body["stop_sequences"] = list(settings.stop_sequences)
    if has_tools:
        choice: dict[str, Any] | None = None
        if settings.tool_choice is not None:
            kind = _TOOL_CHOICE.get(settings.tool_choice, "tool")
            choice = {"type": kind}
            if kind == "tool":
                choice["name"] = settings.tool_choice
        if settings.parallel_tool_calls is False and (choice is None or choice["type"] != "none"):
            choice = choice or {"type": "auto"}
            choice["disable_parallel_tool_use"] = True
        if choice is not None:
            body["tool_choice"] = choice
    if settings.metadata is not None:
        body["metadata"] = dict(settings.metadata)
    if settings.extra_body:
        add_extra_body(body, settings.extra_body, "anthropic")


def mark_cache_breakpoints(body: dict[str, Any]) -> None:
    """Put ``cache_control`` breakpoints on ``body`` (a Messages API request), in
    place: the last tool, the system prompt, the newest turn's last block and
    the previous user turn's last block; never more than the API allows."""
    marks: list[dict[str, Any]] = []
    tools = body.get("tools")
    if tools:
        marks.append(tools[-1])
    system = body.get("system")
    if isinstance(system, str) and system:
        block: dict[str, Any] = {"type": "text", "text": system}
        body["system"] = [block]
        marks.append(block)
    messages = body["messages"]
    if messages and messages[-1]["content"]:
        marks.append(messages[-1]["content"][-1])
        for message in reversed(messages[:-1]):
            if message["role"] == "user":
                if message["content"]:
                    marks.append(message["content"][-1])
                break
    for block in marks[:MAX_CACHE_BREAKPOINTS]:
        block["cache_control"] = dict(EPHEMERAL)


def _message(message: Message) -> dict[str, Any]:
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    others = [b for b in message.content if not isinstance(b, ToolResultBlock)]
    blocks: list[dict[str, Any]] = []
    for block in (*results, *others):
        if isinstance(block, TextBlock):
            if block.text:
                blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, Image):
            blocks.append(_image(block))
        elif isinstance(block, ToolUseBlock):
            tool_input = block.input
            if not isinstance(tool_input, dict):
                tool_input = {}
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input}
            )
        elif isinstance(block, Reasoning):
            # Sent back unchanged, signature and all; another vendor's is no use here.
            if block.provider == "anthropic" and block.signature is not None:
                blocks.append(_thinking(block))
        else:
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": block.tool_use_id,
                "content": _result_content(block) if block.images else block.content,
            }
            if block.is_error:
                result["is_error"] = True
            blocks.append(result)
    return {"role": message.role, "content": blocks}


def _thinking(block: Reasoning) -> dict[str, Any]:
    """A ``thinking`` block as the API sent it, or a ``redacted_thinking`` one."""
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.signature}
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


def _image(image: Image) -> dict[str, Any]:
    """An image block: a base64 source, or a URL source."""
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.media_type, "data": image.base64()},
    }


def _result_content(block: ToolResultBlock) -> list[dict[str, Any]]:
    """A tool result with images: its text (if any), then its image blocks."""
    parts = [{"type": "text", "text": block.content}] if block.content else []
    return parts + [_image(i) for i in block.images]


def _usage(raw: Any, base: TokenUsage, shape: Shape) -> TokenUsage:
    usage = shape.obj(raw, "usage")
    return TokenUsage(
        input_tokens=shape.opt_int(
            usage.get("input_tokens"), "usage.input_tokens", base.input_tokens
        ),
        output_tokens=shape.opt_int(
            usage.get("output_tokens"), "usage.output_tokens", base.output_tokens
        ),
        cache_read_tokens=shape.opt_int(
            usage.get("cache_read_input_tokens"),
            "usage.cache_read_input_tokens",
            base.cache_read_tokens,
        ),
        cache_write_tokens=shape.opt_int(
            usage.get("cache_creation_input_tokens"),
            "usage.cache_creation_input_tokens",
            base.cache_write_tokens,
        ),
    )


def _event_error(data: Any, provider: str, secrets: tuple[str, ...]) -> ProviderError:
    return error_for_event(data, provider, "error event in the stream", secrets)


@attrs.define
class _Block:
    kind: str
    text: list[str] = attrs.field(factory=list)
    id: str = ""
    name: str = ""
    initial_input: Any = None
    json_parts: list[str] = attrs.field(factory=list)
    #: A thinking block's signature pieces (``signature_delta``), or a redacted one's data.
    signature: list[str] = attrs.field(factory=list)

    def finish(self) -> ContentBlock | None:
        if self.kind == "text":
            text = "".join(self.text)
            return TextBlock(text=text) if text else None
        if self.kind == "thinking":
            return Reasoning(
                text="".join(self.text), signature="".join(self.signature), provider="anthropic"
            )
        if self.kind == "redacted_thinking":
            return Reasoning(redacted=True, signature="".join(self.signature), provider="anthropic")
        if self.kind == "tool_use":
            raw = "".join(self.json_parts)
            tool_input = (
                parse_tool_arguments(raw)
                if raw.strip()
                else ({} if self.initial_input is None else bound_arguments(self.initial_input))
            )
            return ToolUseBlock(id=self.id, name=self.name, input=tool_input)
        return None


@attrs.define
class _StreamState:
    """Assembles a streamed Messages API answer, event by event."""

    shape: Shape
    secrets: tuple[str, ...] = ()
    usage: TokenUsage = ZERO_USAGE
    blocks: dict[int, _Block] = attrs.field(factory=dict)
    raw_stop: str | None = None
    model: str | None = None
    started: bool = False
    events: int = 0
    finished: ModelResponse | None = None

    def feed(self, event: ServerSentEvent) -> list[StreamItem]:
        self.events += 1
        if not event.data.strip():
            return []
        data = self.shape.obj(
            self.shape.json(event.data, f"the data of a {event.event!r} event"), "an event"
        )
        kind = data.get("type", event.event)
        shape = self.shape
        if kind == "error":
            raise _event_error(data, shape.provider, self.secrets)
        if kind == "ping":
            return []
        if kind == "message_start":
            self.started = True
            message = shape.obj(data.get("message"), "message_start.message")
            self.model = (
                shape.opt_text(message.get("model"), "message_start.message.model") or self.model
            )
            if message.get("usage") is not None:
                self.usage = _usage(message["usage"], self.usage, shape)
                return [UsageDelta(usage=self.usage)]
            return []
        if kind == "content_block_start":
            index = self._index(data, kind)
            block = shape.obj(data.get("content_block"), "content_block_start.content_block")
            block_kind = block.get("type")
            if block_kind == "text":
                text = shape.text(block.get("text", ""), "content_block.text")
                self.blocks[index] = _Block(kind="text", text=[text] if text else [])
                return [TextDelta(text=text)] if text else []
            if block_kind == "tool_use":
                self.blocks[index] = _Block(
                    kind="tool_use",
                    id=shape.text(block.get("id"), "content_block.id"),
                    name=shape.text(block.get("name"), "content_block.name"),
                    initial_input=block.get("input"),
                )
                return []
            if block_kind == "thinking":
                text = shape.text(block.get("thinking", ""), "content_block.thinking")
                signature = shape.text(block.get("signature", ""), "content_block.signature")
                self.blocks[index] = _Block(
                    kind="thinking",
                    text=[text] if text else [],
                    signature=[signature] if signature else [],
                )
                return [ReasoningDelta(text=text)] if text else []
            if block_kind == "redacted_thinking":
                data_ = shape.text(block.get("data"), "content_block.data")
                self.blocks[index] = _Block(kind="redacted_thinking", signature=[data_])
                return []
            self.blocks[index] = _Block(kind=str(block_kind))
            return []
        if kind == "content_block_delta":
            target = self._block(self._index(data, kind), kind)
            delta = shape.obj(data.get("delta"), "content_block_delta.delta")
            delta_kind = delta.get("type")
            if delta_kind == "text_delta" and target.kind == "text":
                text = shape.text(delta.get("text"), "text_delta.text")
                target.text.append(text)
                return [TextDelta(text=text)] if text else []
            if delta_kind == "thinking_delta" and target.kind == "thinking":
                text = shape.text(delta.get("thinking"), "thinking_delta.thinking")
                target.text.append(text)
                return [ReasoningDelta(text=text)] if text else []
            if delta_kind == "signature_delta" and target.kind == "thinking":
                target.signature.append(shape.text(delta.get("signature"), "signature_delta"))
                return []
            if delta_kind == "input_json_delta" and target.kind == "tool_use":
                part = shape.text(delta.get("partial_json"), "input_json_delta.partial_json")
                target.json_parts.append(part)
                if part:
                    return [
                        ToolCallDelta(call_id=target.id, name=target.name, arguments_delta=part)
                    ]
            return []
        if kind == "content_block_stop":
            self._block(self._index(data, kind), kind)
            return []
        if kind == "message_delta":
            delta = shape.obj(data.get("delta", {}), "message_delta.delta")
            if "stop_reason" in delta:
                self.raw_stop = shape.opt_text(
                    delta.get("stop_reason"), "message_delta.stop_reason"
                )
            if data.get("usage") is not None:
                self.usage = _usage(data["usage"], self.usage, shape)
                return [UsageDelta(usage=self.usage)]
            return []
        if kind == "message_stop":
            if not self.started:
                raise shape.fail("message_start before message_stop")
            content = [b for b in (blk.finish() for _, blk in sorted(self.blocks.items())) if b]
            self.finished = ModelResponse(
                content=tuple(content),
                stop_reason=StopReason.parse(self.raw_stop),
                usage=self.usage,
                raw_stop_reason=self.raw_stop,
                model=self.model,
            )
            return [self.finished]
        return []  # unknown events are ignored, as the API asks

    def _index(self, data: dict[str, Any], kind: str) -> int:
        value = data.get("index")
        if value is None:
            raise self.shape.fail(f"{kind}.index", value, "an integer")
        return self.shape.opt_int(value, f"{kind}.index")

    def _block(self, index: int, kind: str) -> _Block:
        block = self.blocks.get(index)
        if block is None:
            raise MalformedResponse(
                f"{self.shape.provider}: malformed response: {kind} for block {index}, "
                "which never started"
            )
        return block


__all__ = ["AnthropicProvider"]
