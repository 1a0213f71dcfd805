"""``GeminiProvider``: the Google Gemini API (``generateContent``) over httpx, SSE included.

Decisions:

- ``POST {base_url}/{api_version}/models/{model}:generateContent``, or
  ``:streamGenerateContent?alt=sse`` when streaming. The key goes in the
  ``x-goog-api-key`` header, never in the URL; it comes from ``api_key=``,
  else ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY`` (read once, at
  construction). A missing key makes the first request raise
  :class:`AuthenticationFailed` without sending anything. The key is in no
  repr, event, log or error message.
- A transcript is sent as ``contents``: user turns with role ``user``,
  assistant turns with role ``model``, the system prompt as
  ``systemInstruction``. A user turn's tool results come first, each a
  ``functionResponse`` part (``response: {"output": text}``, or ``{"error":
  text}`` for an ``is_error`` result, the convention Google documents), then
  its text and ``inlineData`` image parts; a tool result's images follow the
  turn's function responses as ``inlineData`` parts. A URL image cannot be
  sent (Gemini takes bytes, or files uploaded to its own Files API):
  :class:`InvalidRequest` names it.
- Call ids: Gemini's ``functionCall`` has an ``id`` only in newer models. A
  call without one is given ``gemini-call-<hex>`` when it arrives (the same id
  on its ``ToolCallDelta`` and in the response); tool results find their
  call's name through the id. Ids tether made are not sent back (Gemini never
  saw them); ids the server (or another provider of a fallback chain) gave
  are sent on both the ``functionCall`` and its ``functionResponse``.
- Tools: ``tools: [{"functionDeclarations": [...]}]`` with each schema in
  Gemini's dialect (:mod:`._gemini_schema`). ``tool_choice`` is
  ``toolConfig.functionCallingConfig.mode``: ``auto`` → ``AUTO``,
  ``required`` → ``ANY``, ``none`` → ``NONE``, a tool's name → ``ANY`` with
  ``allowedFunctionNames``. ``generationConfig`` takes ``maxOutputTokens``,
  ``temperature``, ``topP``, ``stopSequences`` (at most 5) and ``seed``.
  Gemini has no switch for parallel calls and no request metadata: those
  settings are refused at start.
- A request's ``output_format`` is ``responseMimeType: application/json``
  with ``responseSchema`` (the schema in Gemini's dialect).
- Usage: ``promptTokenCount`` includes ``cachedContentTokenCount``; the
  uncached part is ``input_tokens``, the cached part ``cache_read_tokens``.
  ``candidatesTokenCount`` plus ``thoughtsTokenCount`` is ``output_tokens``:
  thinking is billed as output. Tool-use prompt tokens (``toolUsePromptTokenCount``)
  count as input.
- Stop reasons (``finishReason``): ``STOP`` is ``end_turn`` (``tool_use``
  when the answer has function calls), ``MAX_TOKENS`` is ``max_tokens``;
  ``SAFETY``, ``RECITATION``, ``PROHIBITED_CONTENT``, ``BLOCKLIST``,
  ``SPII``, ``LANGUAGE``, ``IMAGE_SAFETY`` and ``IMAGE_PROHIBITED_CONTENT``
  are ``refusal``, and so is a prompt blocked before any candidate
  (``promptFeedback.blockReason``). ``MALFORMED_FUNCTION_CALL`` and
  ``UNEXPECTED_TOOL_CALL`` (the model produced a call it could not finish:
  there is no call to answer) raise :class:`StreamErrorEvent`, a transient
  error, so the call is tried again (and a fallback provider takes over once
  the attempts are spent). Anything else is ``unknown``. ``raw_stop_reason``
  keeps the wire value.
- Errors: Google's ``{"error": {"code", "message", "status", "details"}}``.
  429 ``RESOURCE_EXHAUSTED`` is :class:`RateLimited`, waiting the
  ``retryDelay`` of the ``google.rpc.RetryInfo`` detail when no
  ``retry-after`` header says otherwise; 500 and 503 are transient; 400, 403
  and 404 are fatal; a 400 whose message says the input token count exceeds
  the maximum is :class:`ContextWindowExceeded` (the trim path). An error
  object inside a stream or a 200 body is classified by its ``status`` the
  same way.
- A stream is complete when a chunk carried a ``finishReason`` (or a
  ``blockReason``) and the body then ended; ending before is
  :class:`StreamInterrupted`. Text parts stream as ``TextDelta`` items; a
  function call arrives whole, as one ``ToolCallDelta``; parts of other kinds
  (code execution, generated images) are skipped. Gemini reports usage so far
  on every chunk: the first report and the finishing one are yielded as
  ``UsageDelta`` (the runtime's estimate follows the text between them).
- Thinking: ``thinking_budget`` is ``thinkingConfig.thinkingBudget`` (0 turns
  thinking off, -1 lets the model choose), ``reasoning_effort`` is
  ``thinkingConfig.thinkingLevel`` (``minimal``, ``low``, ``medium``,
  ``high``; not both); either turns ``includeThoughts`` on. Parts marked
  ``thought`` (thought summaries) stream as ``ReasoningDelta`` and are kept as
  :class:`Reasoning` (``provider="gemini"``). A ``thoughtSignature`` on a text
  or call part is kept, unchanged, as a text-less :class:`Reasoning` just
  before that part's block, and sent back on the same part; a signed part is
  never joined with another. Reasoning of other providers is not sent.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any
from urllib.parse import quote

import attrs
import httpx

from ._arguments import bound_arguments
from ._base import HttpProvider, check_key, resolve_key, whole_response
from ._errors import (
    AuthenticationFailed,
    ContextWindowExceeded,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ProviderError,
    RateLimited,
    StreamErrorEvent,
    StreamInterrupted,
    TransientProviderError,
)
from ._gemini_schema import gemini_schema, parameters_of
from ._http import HttpCall, JsonBody, arguments_text, post_json, post_sse
from ._settings import ModelSettings, add_extra_body, extra_headers, refuse, refuse_overrides
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
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
    UsageDelta,
)
from ._wire_errors import describe, error_for_status, redact, retry_after_from_headers

API_KEY_ENV = "GEMINI_API_KEY"
#: Read when ``GEMINI_API_KEY`` is not set (Google's SDKs read both).
FALLBACK_KEY_ENV = "GOOGLE_API_KEY"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
#: The prefix of the call ids tether makes for calls Gemini sent without one.
CALL_ID_PREFIX = "gemini-call-"
#: The provider name on the Reasoning blocks this provider makes (and sends back).
GEMINI = "gemini"

SUPPORTED_SETTINGS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "stop_sequences",
        "tool_choice",
        "seed",
        "reasoning_effort",
        "thinking_budget",
        "extra_headers",
        "extra_body",
    }
)
#: ``reasoning_effort`` values Gemini's ``thinkingLevel`` takes (Gemini 3 models).
THINKING_LEVELS = ("minimal", "low", "medium", "high")
#: Body fields tether writes itself; ``extra_body`` may not replace them.
OWN_FIELDS = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig"})
#: Headers tether sets itself; ``extra_headers`` may not replace them.
OWN_HEADERS = frozenset({"x-goog-api-key", "authorization", "content-type", "accept"})
#: The most stop sequences ``generationConfig.stopSequences`` takes.
MAX_STOP_SEQUENCES = 5
_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}

_REFUSALS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "PROHIBITED_CONTENT",
        "BLOCKLIST",
        "SPII",
        "LANGUAGE",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
    }
)
#: Finish reasons that mean the model failed to produce a call: retried.
_BAD_CALLS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"})
_STOPS = {"STOP": StopReason.END_TURN, "MAX_TOKENS": StopReason.MAX_TOKENS}

#: Google's canonical error statuses (``google.rpc.Code``), by what retrying can do.
_FATAL_STATUSES: dict[str, type[ProviderError]] = {
    "INVALID_ARGUMENT": InvalidRequest,
    "FAILED_PRECONDITION": InvalidRequest,
    "OUT_OF_RANGE": InvalidRequest,
    "UNAUTHENTICATED": AuthenticationFailed,
    "PERMISSION_DENIED": PermissionDenied,
    "NOT_FOUND": NotFound,
}
#: "The input token count (1234567) exceeds the maximum number of tokens allowed (1048576)."
_TOO_LONG = re.compile(
    r"input token count.*exceeds the maximum|exceeds the maximum number of tokens|"
    r"context window",
    re.IGNORECASE,
)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def _key(value: str | None) -> str | None:
    return resolve_key(value, API_KEY_ENV) or resolve_key(None, FALLBACK_KEY_ENV)


@attrs.define(eq=False)
class GeminiProvider(HttpProvider):
    """A :class:`~tether.providers.Provider` for the Gemini API (``generateContent``)."""

    name = GEMINI
    api_key_env = API_KEY_ENV
    #: Structured output: ``responseMimeType`` with a ``responseSchema``.
    native_output = True

    base_url: str = attrs.field(default=DEFAULT_BASE_URL, kw_only=True)
    #: The API version in the path (``v1beta`` has function calling and thinking).
    api_version: str = attrs.field(default="v1beta", kw_only=True)

    def __attrs_post_init__(self) -> None:
        self.api_key = _key(self.api_key)
        if self.model.startswith("models/"):
            self.model = self.model.removeprefix("models/")
        if not self.model or "/" in self.model:
            raise ValueError(
                f"GeminiProvider: a model id such as 'gemini-2.5-flash', got {self.model!r}"
            )
        if not re.fullmatch(r"v\d+(?:alpha|beta)?\d*", self.api_version):
            raise ValueError(f"GeminiProvider: api_version like 'v1beta', got {self.api_version!r}")
        super().__attrs_post_init__()

    # -- Provider protocol ------------------------------------------------

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        call = self._http_call(request)
        shape = Shape(self.name)
        if not self.streaming:
            data = await post_json(ctx.http, call)
            state = _State(shape=shape, secrets=call.secrets, model=self.model)
            state.feed(data)
            for item in whole_response(state.response()):
                yield item
            return
        state = _State(shape=shape, secrets=call.secrets, model=self.model)
        async with aclosing(post_sse(ctx.http, call)) as events:
            async for event in events:
                if isinstance(event, JsonBody):
                    # A server that ignored alt=sse: one response, or a list of them.
                    bodies = event.value if isinstance(event.value, list) else [event.value]
                    whole = _State(shape=shape, secrets=call.secrets, model=self.model)
                    for body in bodies:
                        whole.feed(body)
                    for item in whole_response(whole.response()):
                        yield item
                    return
                if not event.data.strip():
                    continue
                for item in state.feed(shape.json(event.data, "a stream chunk")):
                    yield item
        if state.finish is None:
            raise StreamInterrupted(
                f"gemini: the stream ended before a finishReason (after {state.chunks} chunks)"
            )
        yield state.response()

    def check_settings(self, settings: ModelSettings) -> None:
        """``ValueError`` for a setting the Gemini API cannot take (see the module)."""
        refuse(self.name, settings, SUPPORTED_SETTINGS)
        stops = settings.stop_sequences or ()
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(
                f"gemini: the API takes at most {MAX_STOP_SEQUENCES} stop sequences, "
                f"got {len(stops)}"
            )
        effort = settings.reasoning_effort
        if effort is not None and effort not in THINKING_LEVELS:
            raise ValueError(
                f"gemini: ModelSettings.reasoning_effort is Gemini's thinkingLevel: one of "
                f"{', '.join(THINKING_LEVELS)}, got {effort!r}"
            )
        if effort is not None and settings.thinking_budget is not None:
            raise ValueError(
                "gemini: set ModelSettings.thinking_budget (thinkingBudget, Gemini 2.5) or "
                "reasoning_effort (thinkingLevel, Gemini 3), not both: the API refuses the pair"
            )
        refuse_overrides(self.name, settings, body_fields=OWN_FIELDS, headers=OWN_HEADERS)

    # -- request ------------------------------------------------------------

    def url(self) -> str:
        """Where a request goes (the key is never in it)."""
        model = quote(self.model, safe="")
        base = f"{self.base_url}/{self.api_version}/models/{model}"
        if self.streaming:
            return f"{base}:streamGenerateContent?alt=sse"
        return f"{base}:generateContent"

    def _http_call(self, request: ModelRequest) -> HttpCall:
        if self.api_key is None:
            raise AuthenticationFailed(
                f"gemini: no API key: pass api_key= or set {API_KEY_ENV} (or {FALLBACK_KEY_ENV})"
            )
        check_key(self.api_key, self.name)
        headers = {
            "x-goog-api-key": self.api_key,
            "content-type": "application/json",
            "accept": "text/event-stream" if self.streaming else "application/json",
        }
        if request.settings is not None and request.settings.extra_headers:
            headers = extra_headers(self.name, request.settings, headers, OWN_HEADERS)
        return GeminiCall(
            provider=self.name,
            base_url=self.base_url,
            url=self.url(),
            headers=headers,
            payload=self.request_body(request),
            timeout_s=self.timeout_s,
            max_bytes=self.max_response_bytes,
            secrets=(self.api_key,),
        )

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (``GenerateContentRequest``)."""
        names: dict[str, str] = {}
        contents = []
        for message in request.messages:
            content = _content(message, names)
            if content is not None:
                contents.append(content)
        body: dict[str, Any] = {"contents": contents}
        if request.system:
            body["systemInstruction"] = {"role": "user", "parts": [{"text": request.system}]}
        settings = request.settings
        if request.tools:
            body["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
            choice = settings.tool_choice if settings is not None else None
            if choice is not None:
                mode = _MODES.get(choice)
                config: dict[str, Any] = {"mode": mode or "ANY"}
                if mode is None:
                    config["allowedFunctionNames"] = [choice]
                body["toolConfig"] = {"functionCallingConfig": config}
        max_tokens = request.max_tokens
        if max_tokens is None:
            max_tokens = (settings and settings.max_tokens) or self.max_tokens
        generation: dict[str, Any] = {"maxOutputTokens": max_tokens}
        if settings is not None:
            if settings.temperature is not None:
                generation["temperature"] = settings.temperature
            if settings.top_p is not None:
                generation["topP"] = settings.top_p
            if settings.stop_sequences is not None:
                generation["stopSequences"] = list(settings.stop_sequences)
            if settings.seed is not None:
                generation["seed"] = settings.seed
            thinking = _thinking_config(settings)
            if thinking is not None:
                generation["thinkingConfig"] = thinking
        if request.output_format is not None:
            generation["responseMimeType"] = "application/json"
            generation["responseSchema"] = gemini_schema(request.output_format.schema)
        body["generationConfig"] = generation
        if settings is not None and settings.extra_body:
            add_extra_body(body, settings.extra_body, self.name)
        return body


#: Function declarations by tool identity, kept while the tool lives: a ToolDef is made
#: once and offered in every request of every run, so its schema is converted once.
#: (A ToolDef is not hashable: its schema is a dict.)
_DECLARATIONS: dict[int, tuple[weakref.ref[ToolDef], Mapping[str, Any]]] = {}


def _declaration(tool: ToolDef) -> Mapping[str, Any]:
    """``tool`` as a ``FunctionDeclaration`` (read-only: shared by every request)."""
    key = id(tool)
    entry = _DECLARATIONS.get(key)
    if entry is not None and entry[0]() is tool:
        return entry[1]
    declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
    parameters = parameters_of(tool.input_schema)
    if parameters is not None:
        declaration["parameters"] = parameters
    with contextlib.suppress(TypeError):  # a ToolDef subclass without a weakref slot
        ref = weakref.ref(tool, lambda _, key=key: _DECLARATIONS.pop(key, None))  # type: ignore[misc]
        _DECLARATIONS[key] = (ref, declaration)
    return declaration


def _thinking_config(settings: ModelSettings) -> dict[str, Any] | None:
    """``thinkingConfig``: a budget (0 turns thinking off) or a level; thought summaries on."""
    budget, level = settings.thinking_budget, settings.reasoning_effort
    if budget is None and level is None:
        return None
    config: dict[str, Any] = {}
    if budget is not None:
        config["thinkingBudget"] = budget
    if level is not None:
        config["thinkingLevel"] = level
    if budget != 0:
        config["includeThoughts"] = True
    return config


def _content(message: Message, names: dict[str, str]) -> dict[str, Any] | None:
    """One turn as a ``Content``; ``None`` when it has nothing to send."""
    parts: list[dict[str, Any]] = []
    if message.role == "assistant":
        # A thoughtSignature kept alone (see _State._part) goes back on the part after it.
        signature: str | None = None
        for block in message.content:
            part: dict[str, Any] | None = None
            if isinstance(block, TextBlock):
                if block.text:
                    part = {"text": block.text}
            elif isinstance(block, ToolUseBlock):
                names[block.id] = block.name
                call: dict[str, Any] = {
                    "name": block.name,
                    "args": block.input if isinstance(block.input, dict) else {},
                }
                if not block.id.startswith(CALL_ID_PREFIX):
                    call["id"] = block.id
                part = {"functionCall": call}
            elif isinstance(block, Image):
                part = _image(block)
            elif isinstance(block, Reasoning) and block.provider == GEMINI:
                if block.text:
                    part = {"text": block.text, "thought": True}
                    if block.signature is not None:
                        part["thoughtSignature"] = block.signature
                elif block.signature is not None:
                    if signature is not None:
                        parts.append({"text": "", "thoughtSignature": signature})
                    signature = block.signature
            if part is not None:
                if signature is not None:
                    part["thoughtSignature"] = signature
                    signature = None
                parts.append(part)
        if signature is not None:
            parts.append({"text": "", "thoughtSignature": signature})
        return {"role": "model", "parts": parts} if parts else None
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    images: list[dict[str, Any]] = []
    for result in results:
        name = names.get(result.tool_use_id)
        if name is None:
            raise InvalidRequest(
                f"gemini: the tool result for call {result.tool_use_id!r} has no matching "
                "function call earlier in the transcript (Gemini answers calls by name)"
            )
        response: dict[str, Any] = {
            "name": name,
            "response": {"error" if result.is_error else "output": result.content},
        }
        if not result.tool_use_id.startswith(CALL_ID_PREFIX):
            response["id"] = result.tool_use_id
        parts.append({"functionResponse": response})
        images.extend(_image(i) for i in result.images)
    parts.extend(images)
    for block in message.content:
        if isinstance(block, TextBlock):
            if block.text:
                parts.append({"text": block.text})
        elif isinstance(block, Image):
            parts.append(_image(block))
    return {"role": "user", "parts": parts} if parts else None


def _image(image: Image) -> dict[str, Any]:
    if image.data is None:
        raise InvalidRequest(
            f"gemini: an image URL cannot be sent ({image.describe()}): the Gemini API takes "
            "image bytes; use Image.from_bytes() or Image.from_path()"
        )
    return {"inlineData": {"mimeType": image.media_type, "data": image.base64()}}


# ------------------------------------------------------------------ errors


@attrs.frozen(kw_only=True)
class GeminiCall(HttpCall):
    """An HTTP attempt whose error answers are read as Google's error objects."""

    def status_error(self, response: httpx.Response, body: bytes) -> ProviderError:
        return status_error(
            response.status_code, body, response.headers, self.provider, self.secrets
        )


def _google_error(data: Any) -> tuple[str | None, str | None, float | None]:
    """``(status, message, retryDelay seconds)`` of ``{"error": {...}}`` (or a list of one)."""
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None, None, None
    status = error.get("status")
    message = error.get("message")
    delay: float | None = None
    details = error.get("details")
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            match = _DURATION.match(str(detail.get("retryDelay", "")))
            if match:
                delay = float(match.group(1))
    return (
        status if isinstance(status, str) else None,
        message if isinstance(message, str) else None,
        delay,
    )


def status_error(
    status: int,
    body: bytes,
    headers: httpx.Headers | Mapping[str, str],
    provider: str,
    secrets: tuple[str, ...],
) -> ProviderError:
    """The typed error for an HTTP error answer of the Gemini API (see the module)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    kind, message, delay = _google_error(data)
    if kind is None and message is None:
        return error_for_status(
            status, body=body, headers=headers, provider=provider, secrets=secrets
        )
    reason = httpx.codes.get_reason_phrase(status)
    what = f"HTTP {status}" + (f" {reason}" if reason else "")
    text = describe(provider, what, kind, message, secrets)
    # Only a 400: a 429 may speak of tokens too (a tokens-per-minute quota).
    if status == 400 and message and _TOO_LONG.search(message):
        return ContextWindowExceeded(text, status=status)
    mapped = error_for_status(
        status,
        body=json.dumps({"error": {"type": kind, "message": redact(message or "", secrets)}}),
        headers=headers,
        provider=provider,
        secrets=secrets,
    )
    if isinstance(mapped, TransientProviderError):
        retry_after = retry_after_from_headers(headers)
        if retry_after is None:
            retry_after = delay
        return type(mapped)(text, status=status, retry_after=retry_after)
    return type(mapped)(text, status=status)


def event_error(data: Any, provider: str, secrets: tuple[str, ...]) -> ProviderError:
    """The typed error for an error object inside a stream or a 200 body."""
    kind, message, delay = _google_error(data)
    text = describe(provider, "error in the response", kind, message, secrets)
    if kind in (None, "INVALID_ARGUMENT") and message and _TOO_LONG.search(message):
        return ContextWindowExceeded(text)
    fatal = _FATAL_STATUSES.get(kind or "")
    if fatal is not None:
        return fatal(text)
    if kind == "RESOURCE_EXHAUSTED":
        return RateLimited(text, retry_after=delay)
    return StreamErrorEvent(text, retry_after=delay)


# ------------------------------------------------------------------ answers


_COUNTS = (
    "promptTokenCount",
    "toolUsePromptTokenCount",
    "cachedContentTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
)


def _usage(raw: Any, shape: Shape) -> TokenUsage:
    usage = shape.obj(raw, "usageMetadata")
    counts = [usage.get(name, 0) for name in _COUNTS]
    if all(type(n) is int and n >= 0 for n in counts):  # every count a plain int: no more checks
        prompt, tool_prompt, cached, candidates, thoughts = counts
    else:
        prompt, tool_prompt, cached, candidates, thoughts = (
            shape.opt_int(usage.get(name), f"usageMetadata.{name}") for name in _COUNTS
        )
    return _tokens(prompt, tool_prompt, cached, candidates, thoughts)


def _tokens(
    prompt: int, tool_prompt: int, cached: int, candidates: int, thoughts: int
) -> TokenUsage:
    prompt += tool_prompt
    cached = min(cached, prompt)
    return TokenUsage(
        input_tokens=prompt - cached,
        output_tokens=candidates + thoughts,
        cache_read_tokens=cached,
        reasoning_tokens=thoughts,
    )


def _covers(usage: TokenUsage, earlier: TokenUsage) -> bool:
    return (
        usage.input_tokens >= earlier.input_tokens
        and usage.output_tokens >= earlier.output_tokens
        and usage.cache_read_tokens >= earlier.cache_read_tokens
    )


def _new_id() -> str:
    return f"{CALL_ID_PREFIX}{uuid.uuid4().hex[:24]}"


@attrs.define
class _State:
    """Assembles ``GenerateContentResponse`` chunks (one for a whole answer)."""

    shape: Shape
    secrets: tuple[str, ...] = ()
    model: str | None = None
    text: list[str] = attrs.field(factory=list)
    thoughts: list[str] = attrs.field(factory=list)
    #: The answer's blocks in order: reasoning, text runs and calls.
    blocks: list[ContentBlock] = attrs.field(factory=list)
    finish: str | None = None
    blocked: str | None = None
    usage: TokenUsage = ZERO_USAGE
    raw_usage: Any = None
    #: The last usage yielded as a UsageDelta.
    reported: TokenUsage = ZERO_USAGE
    chunks: int = 0
    finish_message: str | None = None

    def feed(self, data: Any) -> list[StreamItem]:
        shape = self.shape
        self.chunks += 1
        chunk = shape.obj(data, "a GenerateContentResponse")
        if chunk.get("error") is not None:
            raise event_error(chunk, shape.provider, self.secrets)
        out: list[StreamItem] = []
        version = chunk.get("modelVersion")
        if isinstance(version, str) and version:
            self.model = version
        feedback = chunk.get("promptFeedback")
        if feedback is not None:
            reason = shape.opt_text(
                shape.obj(feedback, "promptFeedback").get("blockReason"),
                "promptFeedback.blockReason",
            )
            if reason and reason != "BLOCK_REASON_UNSPECIFIED":
                self.blocked = reason
                self.finish = self.finish or reason
        candidates = shape.arr(chunk.get("candidates") or [], "candidates")
        if candidates:
            candidate = shape.obj(candidates[0], "candidates[0]")
            content = candidate.get("content")
            if content is not None:
                raw_parts = shape.obj(content, "candidates[0].content").get("parts") or []
                for i, raw in enumerate(shape.arr(raw_parts, "candidates[0].content.parts")):
                    out.extend(self._part(shape.obj(raw, f"content.parts[{i}]"), i))
            finish = shape.opt_text(candidate.get("finishReason"), "candidates[0].finishReason")
            if finish:
                self.finish = finish
                self.finish_message = shape.opt_text(
                    candidate.get("finishMessage"), "candidates[0].finishMessage"
                )
        raw_usage = chunk.get("usageMetadata")
        if raw_usage is not None and raw_usage != self.raw_usage:
            self.raw_usage = raw_usage
            self.usage = usage = _usage(raw_usage, shape)
            # Gemini reports usage so far on every chunk. Live, the first report (the
            # prompt's exact count) and the finishing one are passed on; between them the
            # runtime's estimate follows the text, and each report costs a charge. Reports
            # are cumulative and the runtime never takes back what one charged: a report
            # whose counts went down is not passed on (the response carries it anyway).
            live = self.reported is ZERO_USAGE or self.finish is not None
            if live and usage != self.reported and _covers(usage, self.reported):
                self.reported = usage
                out.append(UsageDelta(usage=usage))
        return out

    def _part(self, part: dict[str, Any], i: int) -> list[StreamItem]:
        """One part into the answer's blocks.

        Runs of text parts (and of thought parts) are joined, except that a part
        carrying a ``thoughtSignature`` is never joined with another (Google: a
        signed part goes back as it came). A signature on a text or call part is
        kept as a text-less :class:`Reasoning` just before that part's block.
        """
        shape = self.shape
        signature = shape.opt_text(
            part.get("thoughtSignature"), f"content.parts[{i}].thoughtSignature"
        )
        if part.get("thought") is True:
            text = shape.text(part.get("text", ""), f"content.parts[{i}].text")
            if signature is not None:
                self._flush()
                self.blocks.append(Reasoning(text=text, signature=signature, provider=GEMINI))
            elif text:
                self._flush_text()
                self.thoughts.append(text)
            return [ReasoningDelta(text=text)] if text else []
        if "text" in part:
            text = shape.text(part["text"], f"content.parts[{i}].text")
            if signature is not None:
                self._flush()
                self.blocks.append(Reasoning(signature=signature, provider=GEMINI))
                if text:
                    self.blocks.append(TextBlock(text=text))
            elif text:
                self._flush_thoughts()
                self.text.append(text)
            return [TextDelta(text=text)] if text else []
        raw_call = part.get("functionCall")
        if raw_call is None:
            return []
        call = shape.obj(raw_call, f"content.parts[{i}].functionCall")
        name = shape.text(call.get("name"), f"content.parts[{i}].functionCall.name")
        call_id = shape.opt_text(call.get("id"), f"content.parts[{i}].functionCall.id") or _new_id()
        args = call.get("args")
        arguments = bound_arguments({} if args is None else args)
        self._flush()
        if signature is not None:
            self.blocks.append(Reasoning(signature=signature, provider=GEMINI))
        self.blocks.append(ToolUseBlock(id=call_id, name=name, input=arguments))
        return [
            ToolCallDelta(call_id=call_id, name=name, arguments_delta=arguments_text(arguments))
        ]

    def _flush(self) -> None:
        self._flush_thoughts()
        self._flush_text()

    def _flush_text(self) -> None:
        if self.text:
            self.blocks.append(TextBlock(text="".join(self.text)))
            self.text.clear()

    def _flush_thoughts(self) -> None:
        if self.thoughts:
            self.blocks.append(Reasoning(text="".join(self.thoughts), provider=GEMINI))
            self.thoughts.clear()

    def response(self) -> ModelResponse:
        """The answer, once a ``finishReason`` (or a ``blockReason``) arrived."""
        raw = self.finish
        if raw is None:
            raise self.shape.fail("a finishReason in candidates[0]")
        if raw in _BAD_CALLS:
            detail = f": {self.finish_message}" if self.finish_message else ""
            raise StreamErrorEvent(
                redact(
                    f"gemini: the model produced a function call it could not complete "
                    f"({raw}){detail}"[:600],
                    self.secrets,
                )
            )
        self._flush()
        content = tuple(self.blocks)
        calls = any(isinstance(b, ToolUseBlock) for b in content)
        if self.blocked is not None or raw in _REFUSALS:
            stop = StopReason.REFUSAL
        elif raw == "STOP" and calls:
            stop = StopReason.TOOL_USE
        else:
            stop = _STOPS.get(raw, StopReason.UNKNOWN)
        return ModelResponse(
            content=content,
            stop_reason=stop,
            usage=self.usage,
            raw_stop_reason=raw,
            model=self.model,
        )


__all__ = ["GeminiCall", "GeminiProvider", "event_error", "status_error"]
