"""``OpenAIResponsesProvider``: the OpenAI Responses API (``POST /v1/responses``) over httpx.

Decisions:

- The key comes from ``api_key=`` or ``OPENAI_API_KEY``, as for
  :class:`OpenAIProvider`; a missing key fails before sending for
  ``api.openai.com``, and sends no ``Authorization`` to any other host.
- ``store=False`` by default: OpenAI keeps nothing, and the whole transcript
  goes with every request (``input``). A reasoning model's reasoning items then
  come back only encrypted: tether asks for them with
  ``include=["reasoning.encrypted_content"]`` and sends each one back
  unchanged (``id``, ``summary``, ``encrypted_content``) before the items that
  followed it. A model that does not reason refuses that ``include``, so it is
  sent only for reasoning models: ``reasoning=None`` guesses by the model's
  name (``o1``, ``o3``, ``o4``, ``gpt-5``, ``codex``; not ``gpt-5-chat``);
  ``reasoning=True`` / ``False`` says so.
- A reasoning item becomes one :class:`Reasoning` block per summary part (one
  with no text when it has none); the first carries ``encrypted_content`` as
  its ``signature``, and all carry the item's ``id``. Blocks with the same id
  in a row are sent back as that one item. A reasoning item with no encrypted
  content is sent back only with ``store=True`` (OpenAI has it then).
- The system prompt goes as ``instructions``. A user turn's tool results are
  ``function_call_output`` items (``call_id``); an ``is_error`` result's text
  is prefixed with ``"Error: "``; a tool result's images follow the round's
  outputs in one user message (as for Chat Completions). A user turn is a
  ``message`` with a string content, or ``input_text`` / ``input_image``
  parts when it has images. An assistant turn is its reasoning items, its text
  as an assistant message, and its tool calls as ``function_call`` items
  (arguments as compact JSON text), in order.
- Tools are ``{"type": "function", "name", "description", "parameters",
  "strict": false}`` (the API's default, strict, would refuse most schemas).
- Settings: ``temperature``, ``top_p``, ``max_tokens`` (``max_output_tokens``),
  ``tool_choice``, ``parallel_tool_calls``, ``metadata``, ``reasoning_effort``
  (``reasoning: {"effort"}``, reasoning models only), ``extra_headers``,
  ``extra_body``. There is no ``stop`` nor ``seed`` in this API, nor a
  thinking budget: those are refused at start.
- Stop reasons: ``status: completed`` is ``tool_use`` with a function call,
  else ``end_turn``; a ``refusal`` content part is ``refusal`` (its text is the
  answer's); ``status: incomplete`` maps ``incomplete_details.reason``:
  ``max_output_tokens`` is ``max_tokens``, ``content_filter`` is ``refusal``,
  anything else unknown. ``raw_stop_reason`` keeps the wire value.
- Usage: ``input_tokens`` less ``input_tokens_details.cached_tokens`` (the
  cache reads), ``output_tokens`` (reasoning included), and
  ``output_tokens_details.reasoning_tokens`` as ``reasoning_tokens``.
- Streaming: ``response.output_text.delta`` is a ``TextDelta``,
  ``response.function_call_arguments.delta`` a ``ToolCallDelta``,
  ``response.reasoning_summary_text.delta`` a ``ReasoningDelta``. The answer
  is read from ``response.completed`` / ``response.incomplete`` (the items
  finished by ``response.output_item.done`` if it has no ``output``).
  ``response.failed`` and ``error`` events raise typed errors (a rate limit or
  a server error is transient); a stream that ends before its terminal event
  is :class:`StreamInterrupted`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import aclosing
from typing import Any, Literal
from urllib.parse import urlsplit

import attrs
from httpx_sse import ServerSentEvent

from ._arguments import bound_arguments, parse_tool_arguments
from ._base import HttpProvider, whole_response
from ._errors import (
    ProviderError,
    RateLimited,
    ServerError,
    StreamInterrupted,
)
from ._http import HttpCall, JsonBody, arguments_text, drain, post_json, post_sse
from ._openai import (
    API_KEY_ENV,
    DEFAULT_BASE_URL,
    ERROR_PREFIX,
    IMAGES_FROM,
    OFFICIAL_HOST,
    OWN_HEADERS,
    bearer_call,
)
from ._settings import ModelSettings, add_extra_body, refuse, refuse_overrides
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

#: The name reasoning blocks carry (``Reasoning.provider``) and events show.
PROVIDER_NAME = "openai-responses"
#: Model-name prefixes of OpenAI's reasoning models (see the module's notes).
REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5", "codex")

ReasoningSummary = Literal["auto", "concise", "detailed"]

SUPPORTED_SETTINGS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "tool_choice",
        "parallel_tool_calls",
        "metadata",
        "reasoning_effort",
        "extra_headers",
        "extra_body",
    }
)
#: Body fields tether writes itself; ``extra_body`` may not replace them.
OWN_FIELDS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "stream",
        "store",
        "include",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tool_choice",
        "parallel_tool_calls",
        "metadata",
        "reasoning",
        "text",
    }
)
#: ``incomplete_details.reason`` values and the stop reasons they are.
_INCOMPLETE = {
    "max_output_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.REFUSAL,
}
#: ``response.error.code`` values a retry may fix.
_TRANSIENT_CODES: dict[str, type[ProviderError]] = {
    "rate_limit_exceeded": RateLimited,
    "server_error": ServerError,
    "vector_store_timeout": ServerError,
}


def is_reasoning_model(model: str) -> bool:
    """Whether ``model``'s name is that of an OpenAI reasoning model (a guess by name)."""
    name = model.lower().rsplit("/", 1)[-1]
    return name.startswith(REASONING_PREFIXES) and "-chat" not in name


@attrs.define(eq=False)
class OpenAIResponsesProvider(HttpProvider):
    """A :class:`~tether.providers.Provider` for the OpenAI Responses API (see the module)."""

    name = PROVIDER_NAME
    api_key_env = API_KEY_ENV
    #: Structured outputs: ``text.format`` with a ``json_schema``.
    native_output = True

    base_url: str = attrs.field(default=DEFAULT_BASE_URL, kw_only=True)
    #: Let OpenAI keep the responses (``store``); off by default.
    store: bool = attrs.field(default=False, kw_only=True)
    #: Whether the model reasons; ``None``: guessed from its name.
    reasoning: bool | None = attrs.field(default=None, kw_only=True)
    #: Ask for reasoning summaries (``reasoning.summary``); ``None``: not asked.
    reasoning_summary: ReasoningSummary | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.reasoning_summary not in (None, "auto", "concise", "detailed"):
            raise ValueError(
                "OpenAIResponsesProvider(reasoning_summary=...) takes 'auto', 'concise' or "
                f"'detailed', got {self.reasoning_summary!r}"
            )
        if self.reasoning_summary is not None and not self.reasons:
            raise ValueError(
                f"OpenAIResponsesProvider: {self.model!r} does not look like a reasoning model, "
                "so it has no reasoning_summary; pass reasoning=True if it reasons"
            )

    @property
    def is_official(self) -> bool:
        """Whether ``base_url`` is OpenAI's own API."""
        return (urlsplit(self.base_url).hostname or "").lower() == OFFICIAL_HOST

    @property
    def needs_key(self) -> bool:
        """Only OpenAI's own API needs a key; a compatible local server may not."""
        return self.is_official

    @property
    def reasons(self) -> bool:
        """Whether the model reasons (``reasoning=``, else by its name)."""
        return is_reasoning_model(self.model) if self.reasoning is None else self.reasoning

    # -- Provider protocol ------------------------------------------------

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        call = self._http_call(request)
        shape = Shape(self.name)
        if not self.streaming:
            data = await post_json(ctx.http, call)
            for item in whole_response(self.parse_response(data, shape, call.secrets)):
                yield item
            return
        state = _StreamState(shape=shape, provider=self, secrets=call.secrets)
        whole: ModelResponse | None = None
        async with aclosing(post_sse(ctx.http, call)) as events:
            async for event in events:
                if isinstance(event, JsonBody):
                    whole = self.parse_response(event.value, shape, call.secrets)
                    break
                for item in state.feed(event):
                    yield item
                if state.finished is not None:
                    await drain(events)  # read the body's end: the connection is reused
                    break
        if whole is not None:
            for item in whole_response(whole):
                yield item
            return
        if state.finished is None:
            raise StreamInterrupted(
                f"{self.name}: the stream ended before response.completed "
                f"(after {state.events} events)"
            )
        yield state.finished

    def check_settings(self, settings: ModelSettings) -> None:
        """``ValueError`` for a setting the Responses API cannot take (see the module)."""
        refuse(self.name, settings, SUPPORTED_SETTINGS)
        if settings.reasoning_effort is not None and not self.reasons:
            raise ValueError(
                f"{self.name}: {self.model!r} does not look like a reasoning model, so it takes "
                "no ModelSettings.reasoning_effort; pass reasoning=True to the provider if it "
                "reasons"
            )
        refuse_overrides(self.name, settings, body_fields=OWN_FIELDS, headers=OWN_HEADERS)

    # -- request ------------------------------------------------------------

    def _http_call(self, request: ModelRequest) -> HttpCall:
        return bearer_call(self, request, "responses")

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (the Responses API's shape)."""
        settings = request.settings
        max_tokens = request.max_tokens
        if max_tokens is None:
            max_tokens = (settings and settings.max_tokens) or self.max_tokens
        items: list[dict[str, Any]] = []
        for message in request.messages:
            items.extend(self._items(message))
        body: dict[str, Any] = {"model": self.model, "input": items}
        if request.system:
            body["instructions"] = request.system
        body["max_output_tokens"] = max_tokens
        body["store"] = self.store
        reasons = self.reasons
        if reasons and not self.store:
            body["include"] = ["reasoning.encrypted_content"]
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    "strict": False,
                }
                for t in request.tools
            ]
        if request.output_format is not None:
            out = request.output_format
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": out.name,
                    "schema": out.schema,
                    "strict": out.strict,
                }
            }
        reasoning: dict[str, Any] = {}
        if settings is not None and settings.reasoning_effort is not None:
            reasoning["effort"] = settings.reasoning_effort
        if self.reasoning_summary is not None:
            reasoning["summary"] = self.reasoning_summary
        if reasoning:
            body["reasoning"] = reasoning
        if self.streaming:
            body["stream"] = True
        if settings is not None:
            _settings(body, settings, bool(request.tools), self.name)
        return body

    def _items(self, message: Message) -> Iterator[dict[str, Any]]:
        if message.role == "assistant":
            yield from self._assistant_items(message.content)
            return
        images: list[dict[str, Any]] = []
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                output = block.content
                if block.images:
                    output = "\n".join(
                        filter(None, (output, *(i.describe() for i in block.images)))
                    )
                    images.append(
                        {"type": "input_text", "text": IMAGES_FROM.format(block.tool_use_id)}
                    )
                    images.extend(_image_part(i) for i in block.images)
                if block.is_error and not output.startswith(ERROR_PREFIX):
                    output = ERROR_PREFIX + output
                yield {
                    "type": "function_call_output",
                    "call_id": block.tool_use_id,
                    "output": output,
                }
        if images:
            yield {"role": "user", "content": images}
        parts = [b for b in message.content if isinstance(b, TextBlock | Image)]
        if any(isinstance(b, Image) for b in parts):
            yield {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": b.text}
                    if isinstance(b, TextBlock)
                    else _image_part(b)
                    for b in parts
                    if isinstance(b, Image) or b.text
                ],
            }
        elif parts or not any(isinstance(b, ToolResultBlock) for b in message.content):
            yield {
                "role": "user",
                "content": "\n".join(b.text for b in parts if isinstance(b, TextBlock)),
            }

    def _assistant_items(self, blocks: Sequence[ContentBlock]) -> Iterator[dict[str, Any]]:
        reasoning: dict[str, Any] | None = None
        for block in blocks:
            if isinstance(block, Reasoning):
                if block.provider != PROVIDER_NAME or block.id is None:
                    continue  # another vendor's: no use here
                if reasoning is not None and reasoning["id"] == block.id:
                    if block.text:
                        reasoning["summary"].append({"type": "summary_text", "text": block.text})
                    if block.signature is not None and "encrypted_content" not in reasoning:
                        reasoning["encrypted_content"] = block.signature
                    continue
                if reasoning is not None:
                    yield from self._reasoning_item(reasoning)
                reasoning = {"type": "reasoning", "id": block.id, "summary": []}
                if block.text:
                    reasoning["summary"].append({"type": "summary_text", "text": block.text})
                if block.signature is not None:
                    reasoning["encrypted_content"] = block.signature
                continue
            if reasoning is not None:
                yield from self._reasoning_item(reasoning)
                reasoning = None
            if isinstance(block, TextBlock):
                if block.text:
                    yield {"role": "assistant", "content": block.text}
            elif isinstance(block, ToolUseBlock):
                yield {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": arguments_text(block.input),
                }
        if reasoning is not None:
            yield from self._reasoning_item(reasoning)

    def _reasoning_item(self, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
        # Without its encrypted content, an item is only good where OpenAI stored it.
        if "encrypted_content" in item or self.store:
            yield item

    # -- response -----------------------------------------------------------

    def parse_response(self, data: Any, shape: Shape, secrets: tuple[str, ...]) -> ModelResponse:
        """A whole Responses API ``response`` object."""
        response = shape.obj(data, "the response")
        if response.get("status") == "failed" or (
            response.get("error") is not None and response.get("object") != "response"
        ):
            raise _failed(response, self.name, secrets)
        output = shape.arr(response.get("output"), "response.output")
        return _parse(response, output, shape, self.model)


def _parse(response: dict[str, Any], output: list[Any], shape: Shape, model: str) -> ModelResponse:
    content: list[ContentBlock] = []
    refusal: list[str] = []
    for i, raw in enumerate(output):
        where = f"response.output[{i}]"
        item = shape.obj(raw, where)
        kind = item.get("type")
        if kind == "message":
            text: list[str] = []
            for j, raw_part in enumerate(shape.arr(item.get("content") or [], f"{where}.content")):
                part = shape.obj(raw_part, f"{where}.content[{j}]")
                if part.get("type") == "output_text":
                    text.append(shape.text(part.get("text"), f"{where}.content[{j}].text"))
                elif part.get("type") == "refusal":
                    refusal.append(shape.text(part.get("refusal"), f"{where}.content[{j}].refusal"))
            if "".join(text):
                content.append(TextBlock(text="".join(text)))
        elif kind == "function_call":
            arguments = item.get("arguments", "")
            content.append(
                ToolUseBlock(
                    id=shape.text(item.get("call_id"), f"{where}.call_id"),
                    name=shape.text(item.get("name"), f"{where}.name"),
                    input=parse_tool_arguments(arguments)
                    if isinstance(arguments, str)
                    else bound_arguments(arguments),
                )
            )
        elif kind == "reasoning":
            content.extend(_reasoning(item, shape, where))
    status = shape.opt_text(response.get("status"), "response.status")
    raw_stop = status
    has_calls = any(isinstance(b, ToolUseBlock) for b in content)
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = None
        if details is not None:
            reason = shape.opt_text(
                shape.obj(details, "response.incomplete_details").get("reason"),
                "response.incomplete_details.reason",
            )
        raw_stop = reason or status
        stop = _INCOMPLETE.get(reason or "", StopReason.UNKNOWN)
    elif status in ("completed", None):
        stop = StopReason.TOOL_USE if has_calls else StopReason.END_TURN
    else:
        stop = StopReason.UNKNOWN
    if refusal and not has_calls:
        stop = StopReason.REFUSAL
        raw_stop = "refusal"
        if not any(isinstance(b, TextBlock) for b in content):
            content.append(TextBlock(text="".join(refusal)))
    usage_raw = response.get("usage")
    usage = ZERO_USAGE if usage_raw is None else _usage(usage_raw, shape)
    return ModelResponse(
        content=tuple(content),
        stop_reason=stop,
        usage=usage,
        raw_stop_reason=raw_stop,
        model=shape.opt_text(response.get("model"), "response.model") or model,
    )


def _reasoning(item: dict[str, Any], shape: Shape, where: str) -> list[Reasoning]:
    """A reasoning item as blocks: one per summary part (see the module's notes)."""
    item_id = shape.text(item.get("id"), f"{where}.id")
    encrypted = shape.opt_text(item.get("encrypted_content"), f"{where}.encrypted_content")
    texts = [
        shape.text(shape.obj(part, f"{where}.summary[{j}]").get("text"), f"{where}.summary[{j}]")
        for j, part in enumerate(shape.arr(item.get("summary") or [], f"{where}.summary"))
    ] or [""]
    return [
        Reasoning(
            text=text,
            signature=encrypted if j == 0 else None,
            provider=PROVIDER_NAME,
            id=item_id,
        )
        for j, text in enumerate(texts)
    ]


def _usage(raw: Any, shape: Shape) -> TokenUsage:
    usage = shape.obj(raw, "usage")
    prompt = shape.opt_int(usage.get("input_tokens"), "usage.input_tokens")
    output = shape.opt_int(usage.get("output_tokens"), "usage.output_tokens")
    cached = reasoning = 0
    details = usage.get("input_tokens_details")
    if details is not None:
        cached = shape.opt_int(
            shape.obj(details, "usage.input_tokens_details").get("cached_tokens"),
            "usage.input_tokens_details.cached_tokens",
        )
    details = usage.get("output_tokens_details")
    if details is not None:
        reasoning = shape.opt_int(
            shape.obj(details, "usage.output_tokens_details").get("reasoning_tokens"),
            "usage.output_tokens_details.reasoning_tokens",
        )
    cached = min(cached, prompt)
    return TokenUsage(
        input_tokens=prompt - cached,
        output_tokens=output,
        cache_read_tokens=cached,
        reasoning_tokens=min(reasoning, output),
    )


def _failed(response: dict[str, Any], provider: str, secrets: tuple[str, ...]) -> ProviderError:
    """The typed error of a failed response (``response.error``: ``code``, ``message``)."""
    error = response.get("error")
    if not isinstance(error, dict):
        error = {"message": "the response failed without an error object"}
    code = error.get("code")
    error_type = _TRANSIENT_CODES.get(code) if isinstance(code, str) else None
    mapped = error_for_event({"error": error}, provider, "the response failed", secrets)
    if error_type is not None:
        return error_type(str(mapped))
    return mapped


def _error_event(data: dict[str, Any], provider: str, secrets: tuple[str, ...]) -> ProviderError:
    """The typed error of an ``error`` event (``code``, ``message`` at its top level)."""
    error = {"code": data.get("code"), "message": data.get("message")}
    if isinstance(data.get("error"), dict):
        error = data["error"]
    return _failed({"error": error}, provider, secrets)


def _image_part(image: Image) -> dict[str, Any]:
    return {"type": "input_image", "image_url": image.data_url(), "detail": "auto"}


def _settings(body: dict[str, Any], settings: ModelSettings, has_tools: bool, name: str) -> None:
    """Map ``settings`` onto the Responses API's fields (unset ones are not sent)."""
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if has_tools:
        choice = settings.tool_choice
        if choice is not None:
            body["tool_choice"] = (
                choice
                if choice in ("auto", "required", "none")
                else {"type": "function", "name": choice}
            )
        if settings.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.metadata is not None:
        body["metadata"] = dict(settings.metadata)
    if settings.extra_body:
        add_extra_body(body, settings.extra_body, name)


@attrs.define
class _Call:
    call_id: str
    name: str


@attrs.define
class _StreamState:
    """Follows a streamed response, event by event (see the module's notes)."""

    shape: Shape
    provider: OpenAIResponsesProvider
    secrets: tuple[str, ...] = ()
    model: str | None = None
    #: Function calls by output index (their deltas name the call by it).
    calls: dict[int, _Call] = attrs.field(factory=dict)
    #: Items finished by ``response.output_item.done``, by output index.
    done: dict[int, Any] = attrs.field(factory=dict)
    events: int = 0
    finished: ModelResponse | None = None

    def feed(self, event: ServerSentEvent) -> list[StreamItem]:
        self.events += 1
        if not event.data.strip():
            return []
        shape = self.shape
        data = shape.obj(shape.json(event.data, f"the data of a {event.event!r} event"), "an event")
        kind = data.get("type", event.event)
        if kind == "response.output_text.delta":
            text = shape.text(data.get("delta"), "response.output_text.delta.delta")
            return [TextDelta(text=text)] if text else []
        if kind == "response.function_call_arguments.delta":
            piece = shape.text(data.get("delta"), "response.function_call_arguments.delta.delta")
            index = shape.opt_int(data.get("output_index"), "output_index")
            call = self.calls.get(index)
            if call is None:
                raise shape.fail(f"response.output_item.added before the arguments of item {index}")
            return [ToolCallDelta(call_id=call.call_id, name=call.name, arguments_delta=piece)]
        if kind == "response.reasoning_summary_text.delta":
            text = shape.text(data.get("delta"), "response.reasoning_summary_text.delta.delta")
            return [ReasoningDelta(text=text)] if text else []
        if kind == "response.output_item.added":
            index = shape.opt_int(data.get("output_index"), "output_index")
            item = shape.obj(data.get("item"), "response.output_item.added.item")
            if item.get("type") == "function_call":
                self.calls[index] = _Call(
                    call_id=shape.text(item.get("call_id"), "item.call_id"),
                    name=shape.text(item.get("name"), "item.name"),
                )
            return []
        if kind == "response.output_item.done":
            index = shape.opt_int(data.get("output_index"), "output_index")
            self.done[index] = shape.obj(data.get("item"), "response.output_item.done.item")
            return []
        if kind in ("response.created", "response.in_progress", "response.queued"):
            response = shape.obj(data.get("response"), f"{kind}.response")
            self.model = shape.opt_text(response.get("model"), "response.model") or self.model
            return []
        if kind in ("response.completed", "response.incomplete"):
            response = shape.obj(data.get("response"), f"{kind}.response")
            output = shape.arr(response.get("output") or [], "response.output")
            if not output and self.done:
                output = [item for _, item in sorted(self.done.items())]
            self.finished = _parse(response, output, shape, self.model or self.provider.model)
            return [UsageDelta(usage=self.finished.usage)]
        if kind == "response.failed":
            response = shape.obj(data.get("response"), "response.failed.response")
            raise _failed(response, self.provider.name, self.secrets)
        if kind == "error":
            raise _error_event(data, self.provider.name, self.secrets)
        return []  # other events (content parts, annotations, done markers) carry nothing new


__all__ = ["OpenAIResponsesProvider", "is_reasoning_model"]
