"""``OpenAIProvider``: OpenAI Chat Completions over httpx, streaming SSE included.

It also serves OpenAI-compatible servers (vLLM, llama.cpp, Ollama, LM Studio)
through ``base_url``.

Decisions:

- The key comes from ``api_key=`` or ``OPENAI_API_KEY`` (read once, at
  construction). For ``api.openai.com`` a missing key makes the first request
  raise :class:`AuthenticationFailed` without sending anything; for any other
  host (a local server) a missing key is allowed and no ``Authorization``
  header is sent. The key is in no repr, event, log or error message.
- The output cap is sent as ``max_completion_tokens`` to ``api.openai.com``
  (``max_tokens`` is deprecated there and refused by reasoning models) and as
  ``max_tokens`` to every other host (what local servers understand);
  ``max_tokens_field=`` overrides the choice.
- The wire format has no error flag on a tool result: an ``is_error`` result's
  content is sent prefixed with ``"Error: "`` (unless it already starts so).
- A user turn's tool results become ``role: tool`` messages, sent before the
  turn's text (which becomes one ``role: user`` message): OpenAI wants tool
  messages right after the assistant message that asked for them.
- Images: a user turn with an :class:`Image` sends its content as parts in
  order (``text`` parts, ``image_url`` parts: a ``data:`` URL for bytes, the
  URL for a URL image). A tool message takes text only, so a tool result with
  images sends its text (each image named by a stand-in such as
  ``[image: image/png, 1,234 bytes]``) in its tool message, and the images
  follow, after the round's tool messages, in one ``role: user`` message:
  for each such result a text part ``Images returned by tool call <id>:``,
  then its ``image_url`` parts. An assistant turn is text only (images in it
  are not sent).
- Usage: ``input_tokens`` is ``prompt_tokens`` minus the cached part, which
  is ``cache_read_tokens`` (Anthropic's convention, so prices apply alike). A
  server that sends no usage leaves the response's usage at zero, and no
  ``UsageDelta`` is yielded.
- ``finish_reason`` maps through :meth:`StopReason.parse`; a ``stop`` that
  comes with tool calls (some local servers) counts as ``tool_use``; a
  non-empty ``refusal`` counts as ``refusal`` (its text is the content).
  ``raw_stop_reason`` keeps the wire value.
- A stream is complete when a ``finish_reason`` arrived and the stream then
  ended (``data: [DONE]``, or the connection closed cleanly). Ending without
  a ``finish_reason`` is :class:`StreamInterrupted`. An ``error`` object in a
  chunk (or in a 200 body) raises :class:`StreamErrorEvent`.
- Streamed text comes as ``TextDelta`` items, each ``tool_calls[].function.arguments``
  piece as a ``ToolCallDelta`` (the call's id and name on each).
- A request's ``output_format`` (``Agent(output_mode="native")``) is sent as
  ``response_format: {"type": "json_schema", "json_schema": {"name", "schema",
  "strict"}}``; the answer is the message's text.
- Tool-call arguments that are not valid JSON, or nest deeper than
  ``MAX_TOOL_ARGUMENT_DEPTH``, are kept as the raw string (and sent back so).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import attrs
from httpx_sse import ServerSentEvent

from ._arguments import bound_arguments, parse_tool_arguments
from ._base import HttpProvider, check_key, whole_response
from ._errors import AuthenticationFailed, ProviderError, StreamInterrupted
from ._http import HttpCall, JsonBody, arguments_text, drain, post_json, post_sse
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

API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
OFFICIAL_HOST = "api.openai.com"
ERROR_PREFIX = "Error: "
#: Introduces a tool result's images in the user message that carries them.
IMAGES_FROM = "Images returned by tool call {}:"

MaxTokensField = Literal["max_completion_tokens", "max_tokens"]

#: The ModelSettings fields Chat Completions has a place for. Not ``metadata``:
#: OpenAI takes it only for stored completions (``store``), through ``extra_body``.
SUPPORTED_SETTINGS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "stop_sequences",
        "tool_choice",
        "parallel_tool_calls",
        "seed",
        "reasoning_effort",
        "extra_headers",
        "extra_body",
    }
)
#: Body fields tether writes itself; ``extra_body`` may not replace them.
OWN_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "tools",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "stop",
        "tool_choice",
        "parallel_tool_calls",
        "seed",
        "reasoning_effort",
    }
)
#: Headers tether sets itself; ``extra_headers`` may not replace them.
OWN_HEADERS = frozenset({"authorization", "content-type", "accept"})
#: OpenAI's own API takes at most this many stop sequences.
MAX_STOP_SEQUENCES = 4


@attrs.define(eq=False)
class OpenAIProvider(HttpProvider):
    """A :class:`~tether.providers.Provider` for Chat Completions and compatible servers."""

    name = "openai"
    api_key_env = API_KEY_ENV
    #: Structured outputs: ``response_format`` with a ``json_schema``.
    native_output = True

    base_url: str = attrs.field(default=DEFAULT_BASE_URL, kw_only=True)
    #: Where the output cap goes; ``None``: by host (see the module's notes).
    max_tokens_field: MaxTokensField | None = attrs.field(default=None, kw_only=True)

    @property
    def is_official(self) -> bool:
        """Whether ``base_url`` is OpenAI's own API (not a compatible server)."""
        return (urlsplit(self.base_url).hostname or "").lower() == OFFICIAL_HOST

    @property
    def needs_key(self) -> bool:
        """Only OpenAI's own API needs a key; a compatible local server may not."""
        return self.is_official

    # -- Provider protocol ------------------------------------------------

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        call = self._http_call(request)
        shape = Shape(self.name)
        if not self.streaming:
            data = await post_json(ctx.http, call)
            for item in whole_response(self.parse_completion(data, shape, call.secrets)):
                yield item
            return
        state = _StreamState(shape=shape, secrets=call.secrets, model=self.model)
        whole: ModelResponse | None = None
        async with aclosing(post_sse(ctx.http, call)) as events:
            async for event in events:
                if isinstance(event, JsonBody):
                    whole = self.parse_completion(event.value, shape, call.secrets)
                    break
                if event.data.strip() == "[DONE]":
                    state.done = True
                    # Read the body's end so the connection can be reused.
                    await drain(events)
                    break
                for item in state.feed(event):
                    yield item
        if whole is not None:
            for item in whole_response(whole):
                yield item
            return
        if state.finish_reason is None:
            end = "[DONE]" if state.done else "the end of the stream"
            raise StreamInterrupted(
                f"openai: {end} came before a finish_reason (after {state.chunks} chunks)"
            )
        yield state.response()

    def check_settings(self, settings: ModelSettings) -> None:
        """``ValueError`` for a setting Chat Completions cannot take (see the module)."""
        refuse(self.name, settings, SUPPORTED_SETTINGS)
        stops = settings.stop_sequences or ()
        if self.is_official and len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(
                f"openai: the API takes at most {MAX_STOP_SEQUENCES} stop sequences, "
                f"got {len(stops)}"
            )
        refuse_overrides(self.name, settings, body_fields=OWN_FIELDS, headers=OWN_HEADERS)

    # -- request ------------------------------------------------------------

    def _http_call(self, request: ModelRequest) -> HttpCall:
        return bearer_call(self, request, "chat/completions")

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (the Chat Completions shape)."""
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        for message in request.messages:
            messages.extend(_messages(message))
        field = self.max_tokens_field or (
            "max_completion_tokens" if self.is_official else "max_tokens"
        )
        settings = request.settings
        max_tokens = request.max_tokens
        if max_tokens is None:
            max_tokens = (settings and settings.max_tokens) or self.max_tokens
        body: dict[str, Any] = {"model": self.model, "messages": messages, field: max_tokens}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
        if request.output_format is not None:
            out = request.output_format
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": out.name, "schema": out.schema, "strict": out.strict},
            }
        if self.streaming:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if settings is not None:
            _settings(body, settings, bool(request.tools))
        return body

    # -- response -----------------------------------------------------------

    def parse_completion(self, data: Any, shape: Shape, secrets: tuple[str, ...]) -> ModelResponse:
        """A whole (non-streaming) chat completion."""
        completion = shape.obj(data, "the response")
        if completion.get("error") is not None:
            raise _chunk_error(completion, secrets)
        choices = shape.arr(completion.get("choices"), "choices")
        if not choices:
            raise shape.fail("at least one choice in choices")
        choice = shape.obj(choices[0], "choices[0]")
        message = shape.obj(choice.get("message"), "choices[0].message")
        text = _content_text(message.get("content"), shape, "choices[0].message.content")
        refusal = shape.opt_text(message.get("refusal"), "choices[0].message.refusal") or ""
        calls: list[ContentBlock] = []
        for i, raw in enumerate(shape.arr(message.get("tool_calls") or [], "message.tool_calls")):
            call = shape.obj(raw, f"message.tool_calls[{i}]")
            function = shape.obj(call.get("function"), f"message.tool_calls[{i}].function")
            arguments = function.get("arguments", "")
            calls.append(
                ToolUseBlock(
                    id=shape.opt_text(call.get("id"), f"message.tool_calls[{i}].id") or _new_id(),
                    name=shape.text(function.get("name"), f"message.tool_calls[{i}].function.name"),
                    input=parse_tool_arguments(arguments)
                    if isinstance(arguments, str)
                    else bound_arguments(arguments),
                )
            )
        raw_stop = shape.opt_text(choice.get("finish_reason"), "choices[0].finish_reason")
        usage_raw = completion.get("usage")
        usage = ZERO_USAGE if usage_raw is None else _usage(usage_raw, shape)
        model = shape.opt_text(completion.get("model"), "model") or self.model
        return _response(text, refusal, calls, raw_stop, usage, model)


def _settings(body: dict[str, Any], settings: ModelSettings, has_tools: bool) -> None:
    """Map ``settings`` onto Chat Completions' fields (unset ones are not sent).

    ``tool_choice`` and ``parallel_tool_calls`` go only with tools (the API
    refuses them otherwise, and without tools there is nothing to choose).
    """
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.stop_sequences is not None:
        body["stop"] = list(settings.stop_sequences)
    if settings.seed is not None:
        body["seed"] = settings.seed
    if settings.reasoning_effort is not None:
        body["reasoning_effort"] = settings.reasoning_effort
    if has_tools:
        choice = settings.tool_choice
        if choice in ("auto", "required", "none"):
            body["tool_choice"] = choice
        elif choice is not None:
            body["tool_choice"] = {"type": "function", "function": {"name": choice}}
        if settings.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.extra_body:
        add_extra_body(body, settings.extra_body, "openai")


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _response(
    text: str,
    refusal: str,
    calls: list[ContentBlock],
    raw_stop: str | None,
    usage: TokenUsage,
    model: str | None,
) -> ModelResponse:
    stop = StopReason.parse(raw_stop)
    if refusal:
        stop = StopReason.REFUSAL
        text = text or refusal
    elif calls and raw_stop == "stop":
        stop = StopReason.TOOL_USE
    content: list[ContentBlock] = [TextBlock(text=text)] if text else []
    content.extend(calls)
    return ModelResponse(
        content=tuple(content), stop_reason=stop, usage=usage, raw_stop_reason=raw_stop, model=model
    )


def _content_text(value: Any, shape: Shape, what: str) -> str:
    """A message's content: a string, null, or a list of text parts."""
    if value is None:
        return ""
    if isinstance(value, list):
        parts = []
        for i, part in enumerate(value):
            item = shape.obj(part, f"{what}[{i}]")
            if item.get("type") == "text":
                parts.append(shape.text(item.get("text"), f"{what}[{i}].text"))
        return "".join(parts)
    return shape.text(value, what)


def _messages(message: Message) -> list[dict[str, Any]]:
    if message.role == "assistant":
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        calls = [b for b in message.content if isinstance(b, ToolUseBlock)]
        out: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
        if calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": arguments_text(c.input)},
                }
                for c in calls
            ]
        return [out]
    result: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    has_image = False
    for block in message.content:
        if type(block) is Image:
            has_image = True
        elif isinstance(block, ToolResultBlock):
            content = block.content
            if block.images:
                content = "\n".join(filter(None, (content, *(i.describe() for i in block.images))))
                images.append({"type": "text", "text": IMAGES_FROM.format(block.tool_use_id)})
                images.extend(_image_part(i) for i in block.images)
            if block.is_error and not content.startswith(ERROR_PREFIX):
                content = ERROR_PREFIX + content
            result.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
    if images:
        result.append({"role": "user", "content": images})
    if has_image:
        parts = [
            {"type": "text", "text": b.text} if isinstance(b, TextBlock) else _image_part(b)
            for b in message.content
            if isinstance(b, Image) or (isinstance(b, TextBlock) and b.text)
        ]
        result.append({"role": "user", "content": parts})
        return result
    texts = [b.text for b in message.content if isinstance(b, TextBlock)]
    if texts or not result:
        result.append({"role": "user", "content": "\n".join(texts)})
    return result


def _image_part(image: Image) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": image.data_url()}}


def _usage(raw: Any, shape: Shape) -> TokenUsage:
    usage = shape.obj(raw, "usage")
    prompt = shape.opt_int(usage.get("prompt_tokens"), "usage.prompt_tokens")
    completion = shape.opt_int(usage.get("completion_tokens"), "usage.completion_tokens")
    details = usage.get("prompt_tokens_details")
    cached = 0
    if details is not None:
        cached = shape.opt_int(
            shape.obj(details, "usage.prompt_tokens_details").get("cached_tokens"),
            "usage.prompt_tokens_details.cached_tokens",
        )
    cached = min(cached, prompt)
    return TokenUsage(
        input_tokens=prompt - cached, output_tokens=completion, cache_read_tokens=cached
    )


def _chunk_error(data: dict[str, Any], secrets: tuple[str, ...]) -> ProviderError:
    return error_for_event(data, "openai", "error in the response", secrets)


@attrs.define
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = attrs.field(factory=list)


@attrs.define
class _StreamState:
    """Assembles streamed chat-completion chunks."""

    shape: Shape
    secrets: tuple[str, ...] = ()
    model: str | None = None
    text: list[str] = attrs.field(factory=list)
    refusal: list[str] = attrs.field(factory=list)
    calls: dict[int, _Call] = attrs.field(factory=dict)
    finish_reason: str | None = None
    usage: TokenUsage = ZERO_USAGE
    chunks: int = 0
    done: bool = False

    def feed(self, event: ServerSentEvent) -> list[StreamItem]:
        if not event.data.strip():
            return []
        self.chunks += 1
        shape = self.shape
        chunk = shape.obj(shape.json(event.data, "a stream chunk"), "a stream chunk")
        if chunk.get("error") is not None:
            raise _chunk_error(chunk, self.secrets)
        out: list[StreamItem] = []
        model = chunk.get("model")
        if isinstance(model, str) and model:
            self.model = model
        for raw_choice in shape.arr(chunk.get("choices") or [], "chunk.choices"):
            choice = shape.obj(raw_choice, "chunk.choices[]")
            if shape.opt_int(choice.get("index"), "choice.index") != 0:
                continue  # n > 1 is not asked for; only the first choice counts
            delta = shape.obj(choice.get("delta") or {}, "choice.delta")
            text = _content_text(delta.get("content"), shape, "delta.content")
            if text:
                self.text.append(text)
                out.append(TextDelta(text=text))
            refusal = shape.opt_text(delta.get("refusal"), "delta.refusal")
            if refusal:
                self.refusal.append(refusal)
            for position, raw_call in enumerate(
                shape.arr(delta.get("tool_calls") or [], "delta.tool_calls")
            ):
                piece = self._call_fragment(shape.obj(raw_call, "delta.tool_calls[]"), position)
                if piece is not None:
                    out.append(piece)
            finish = shape.opt_text(choice.get("finish_reason"), "choice.finish_reason")
            if finish:
                self.finish_reason = finish
        if chunk.get("usage") is not None:
            self.usage = _usage(chunk["usage"], shape)
            out.append(UsageDelta(usage=self.usage))
        return out

    def _call_fragment(self, fragment: dict[str, Any], position: int) -> ToolCallDelta | None:
        """Fold one fragment into its call; the arguments it brought, as a delta.

        A call whose first argument text comes before its id (some compatible
        servers send none) is given its id then, so that its deltas and its
        response agree; an id arriving later is ignored, as any second id is.
        """
        shape = self.shape
        index = shape.opt_int(fragment.get("index"), "tool_call.index", position)
        call = self.calls.setdefault(index, _Call())
        call_id = shape.opt_text(fragment.get("id"), "tool_call.id")
        if call_id and not call.id:
            call.id = call_id
        function = shape.obj(fragment.get("function") or {}, "tool_call.function")
        name = shape.opt_text(function.get("name"), "tool_call.function.name")
        if name and not call.name:
            call.name = name
        arguments = shape.opt_text(function.get("arguments"), "tool_call.function.arguments")
        if not arguments:
            return None
        call.arguments.append(arguments)
        if not call.id:
            call.id = _new_id()
        return ToolCallDelta(call_id=call.id, name=call.name, arguments_delta=arguments)

    def response(self) -> ModelResponse:
        calls: list[ContentBlock] = []
        for index, call in sorted(self.calls.items()):
            if not call.name:
                raise self.shape.fail(f"a function name for tool call {index}")
            calls.append(
                ToolUseBlock(
                    id=call.id or _new_id(),
                    name=call.name,
                    input=parse_tool_arguments("".join(call.arguments)),
                )
            )
        return _response(
            "".join(self.text),
            "".join(self.refusal),
            calls,
            self.finish_reason,
            self.usage,
            self.model,
        )


__all__ = ["OpenAIProvider"]


class _BearerProvider(Protocol):
    """What :func:`bearer_call` reads of OpenAI's two providers."""

    @property
    def name(self) -> str: ...

    api_key: str | None
    base_url: str
    streaming: bool
    timeout_s: float | None
    max_response_bytes: int

    @property
    def is_official(self) -> bool: ...

    def request_body(self, request: ModelRequest) -> dict[str, Any]: ...


def bearer_call(provider: _BearerProvider, request: ModelRequest, path: str) -> HttpCall:
    """The HTTP call of one request to OpenAI's API (or a compatible server) at ``path``:
    the key as a bearer token, required on OpenAI's own host only."""
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream" if provider.streaming else "application/json",
    }
    if provider.api_key is not None:
        check_key(provider.api_key, provider.name)
        headers["authorization"] = f"Bearer {provider.api_key}"
    elif provider.is_official:
        raise AuthenticationFailed(
            f"{provider.name}: no API key: pass api_key= or set {API_KEY_ENV}"
        )
    if request.settings is not None and request.settings.extra_headers:
        headers = extra_headers(provider.name, request.settings, headers, OWN_HEADERS)
    return HttpCall(
        provider=provider.name,
        base_url=provider.base_url,
        url=f"{provider.base_url}/{path}",
        headers=headers,
        payload=provider.request_body(request),
        timeout_s=provider.timeout_s,
        max_bytes=provider.max_response_bytes,
        secrets=(provider.api_key,) if provider.api_key else (),
        note=None
        if provider.api_key is not None
        else f"no API key was sent: none is configured (pass api_key= or set {API_KEY_ENV})",
    )
