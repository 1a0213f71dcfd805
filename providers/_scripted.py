"""``ScriptedProvider``: plays scripted replies and faults, offline.

It drives the tests, the benchmarks and the demo. A script is either a
sequence (item ``i`` answers the run's request number ``i``, retries included,
so a fault followed by a reply scripts a retry) or a callable
``(request, ctx) -> item`` for scripts that depend on the conversation.
Each run keeps its own position: many concurrent runs can share one provider.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar

import anyio
import attrs

from ._arguments import arguments_text, bound_arguments
from ._errors import FatalProviderError, ProviderError
from ._settings import ModelSettings
from ._types import (
    IMAGE_TOKENS_ESTIMATE,
    Backoff,
    ContentBlock,
    Image,
    Message,
    ModelRequest,
    ModelResponse,
    Price,
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

#: Characters per token in the scripted provider's usage estimate.
CHARS_PER_TOKEN = 4
#: Characters an image counts for in that estimate.
IMAGE_CHARS = IMAGE_TOKENS_ESTIMATE * CHARS_PER_TOKEN


@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call inside a scripted :class:`Reply`."""

    name: str
    arguments: Any = attrs.field(factory=dict)
    #: The tool-use id; by default ``call_<request>_<position>``.
    id: str | None = None


@attrs.frozen(kw_only=True)
class Reply:
    """A scripted model answer.

    ``stop_reason`` defaults to ``tool_use`` when there are tool calls, else
    ``end_turn``; ``raw_stop_reason`` overrides the wire value (to script an
    unknown one). ``usage`` defaults to an estimate of ``len(chars) / 4``.
    """

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    stop_reason: StopReason | None = None
    raw_stop_reason: str | None = None
    usage: TokenUsage | None = None
    #: Reasoning the reply starts with: each one's text streams as a ``ReasoningDelta``
    #: (before the answer's text) and counts as output; the blocks lead the content.
    reasoning: Sequence[Reasoning] = ()


@attrs.frozen(kw_only=True)
class Fault:
    """A scripted failure: raise ``error`` (after streaming ``after_text``, if given,
    in the provider's ``chunk_size`` pieces)."""

    error: ProviderError
    #: Text streamed before the failure, to script a stream cut off mid-way.
    after_text: str = ""


ScriptItem = Reply | Fault
Script = Sequence[ScriptItem] | Callable[[ModelRequest, ProviderContext], ScriptItem]


class ScriptExhausted(FatalProviderError):
    """The run asked for more replies than the script has."""


@attrs.define(eq=False)
class ScriptedProvider:
    """A provider that answers from a script, with optional latency.

    ``latency_s`` is waited before the first delta of every request;
    ``chunk_size`` streams a reply in pieces of that many characters, with
    ``chunk_latency_s`` between them: its text as ``TextDelta`` items, then
    each tool call's arguments (as JSON text) as ``ToolCallDelta`` items, as a
    wire provider streams them. Without it (``None``) the text comes as one
    delta and the tool calls only in the response: the cheapest stream, which
    the benchmarks use. A request's
    ``max_tokens`` is honoured: longer text is cut and stops ``max_tokens``.
    With ``record=True`` every request is kept in :attr:`requests`.

    It honours every :class:`~tether.providers.ModelSettings` field (it checks
    nothing): a request's ``settings`` are there for a script (or a test, with
    ``record=True``) to read; of them it applies only the clamped ``max_tokens``.
    """

    script: Script
    latency_s: float = 0.0
    chunk_size: int | None = None
    chunk_latency_s: float = 0.0
    model: str = "scripted"
    cost_per_mtok: Price | None = None
    backoff: Backoff = attrs.field(factory=lambda: Backoff(initial=0.01, cap=0.1, jitter=False))
    record: bool = False
    #: ``False`` plays the whole text whatever the request's ``max_tokens``, like
    #: a server that ignores it: the tests use it to cross a ceiling mid-stream.
    honor_max_tokens: bool = True
    name: str = "scripted"
    #: The context window the run bounds its transcript to (``None``: unbounded).
    context_window: int | None = None
    requests: list[tuple[ProviderContext, ModelRequest]] = attrs.field(init=False, factory=list)
    _counted: _Counted = attrs.field(init=False, factory=lambda: _Counted(), repr=False)
    #: A native output format is accepted (and ignored: the script's text is the answer).
    native_output: ClassVar[bool] = True

    def price(self) -> Price | None:
        return self.cost_per_mtok

    def check_settings(self, settings: ModelSettings) -> None:
        """Every setting is honoured: the script decides what it means."""

    def gate_key(self) -> str | None:
        # Offline: there is no API to protect, so no gate (and no cap on concurrency).
        return None

    def item_for(self, request: ModelRequest, ctx: ProviderContext) -> ScriptItem:
        if callable(self.script):
            return self.script(request, ctx)
        if ctx.call_index >= len(self.script):
            raise ScriptExhausted(
                f"the script has {len(self.script)} replies; request {ctx.call_index + 1} has none"
            )
        return self.script[ctx.call_index]

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        if self.record:
            self.requests.append((ctx, request))
        item = self.item_for(request, ctx)
        if self.latency_s:
            await anyio.sleep(self.latency_s)
        last = isinstance(item, Reply) and not item.tool_calls
        input_tokens = self._counted.input_tokens(request, ctx.run_id, last)
        if isinstance(item, Fault):
            if item.after_text:
                text, step = item.after_text, self.chunk_size or len(item.after_text)
                for start in range(0, len(text), step):
                    if start and self.chunk_latency_s:
                        await anyio.sleep(self.chunk_latency_s)
                    yield TextDelta(text=text[start : start + step])
                yield UsageDelta(
                    usage=TokenUsage(
                        input_tokens=input_tokens, output_tokens=_tokens(item.after_text)
                    )
                )
            raise item.error
        for n, chunk in enumerate(self._play(item, request, ctx, input_tokens)):
            if n and self.chunk_latency_s:
                await anyio.sleep(self.chunk_latency_s)
            for out in chunk:
                yield out

    def _play(
        self, reply: Reply, request: ModelRequest, ctx: ProviderContext, input_tokens: int
    ) -> list[list[StreamItem]]:
        """The reply's items, grouped in the chunks that are streamed together.

        Each text chunk comes with the usage so far; the response, last, carries
        the call's whole usage.
        """
        text = reply.text
        stop = reply.stop_reason or (
            StopReason.TOOL_USE if reply.tool_calls else StopReason.END_TURN
        )
        budget = request.max_tokens if self.honor_max_tokens else None
        truncated = False
        if budget is not None and _tokens(text) > budget:
            text, truncated = text[: budget * CHARS_PER_TOKEN], True
        chunks: list[list[StreamItem]] = []
        thought = ""
        for block in reply.reasoning:
            if block.text:
                thought += block.text
                chunks.append([ReasoningDelta(text=block.text)])
        out_tokens = _tokens(thought + text)
        step = self.chunk_size or max(1, len(text))
        for start in range(0, len(text), step):
            chunk: list[StreamItem] = [TextDelta(text=text[start : start + step])]
            if reply.usage is None:
                so_far = _tokens(thought + text[: start + step])
                chunk.append(
                    UsageDelta(usage=TokenUsage(input_tokens=input_tokens, output_tokens=so_far))
                )
            chunks.append(chunk)
        content: list[ContentBlock] = [*reply.reasoning]
        if text:
            content.append(TextBlock(text=text))
        for i, call in enumerate(reply.tool_calls):
            call_id = call.id or f"call_{ctx.call_index}_{i}"
            # As a wire provider would: arguments nested too deep arrive as flat text.
            arguments, size = self._counted.arguments(call, keep=not callable(self.script))
            if truncated or (budget is not None and out_tokens + size > budget):
                # The call was cut off: its arguments never finished arriving.
                truncated = True
                content.append(ToolUseBlock(id=call_id, name=call.name, input="{"))
                break
            out_tokens += size
            content.append(ToolUseBlock(id=call_id, name=call.name, input=arguments))
            if self.chunk_size:
                try:
                    raw = arguments_text(arguments)
                except (TypeError, ValueError):  # a script's arguments no model could send
                    raw = repr(arguments)
                for start in range(0, len(raw), self.chunk_size):
                    piece = raw[start : start + self.chunk_size]
                    chunks.append(
                        [ToolCallDelta(call_id=call_id, name=call.name, arguments_delta=piece)]
                    )
        usage = reply.usage or TokenUsage(input_tokens=input_tokens, output_tokens=out_tokens)
        response = ModelResponse(
            content=tuple(content),
            stop_reason=StopReason.MAX_TOKENS if truncated else stop,
            raw_stop_reason=reply.raw_stop_reason or ("max_tokens" if truncated else stop.value),
            usage=usage,
            model=self.model,
        )
        if chunks:
            chunks[-1].append(response)
        else:
            chunks.append([response])
        return chunks


def _tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_input_tokens(request: ModelRequest) -> int:
    """A deterministic estimate: characters of the request / 4."""
    chars = len(request.system) + sum(_message_chars(m) for m in request.messages)
    return math.ceil(chars / CHARS_PER_TOKEN)


def _message_chars(message: Message) -> int:
    chars = 0
    for block in message.content:
        if isinstance(block, TextBlock):
            chars += len(block.text)
        elif isinstance(block, ToolResultBlock):
            chars += len(block.content) + IMAGE_CHARS * len(block.images)
        elif isinstance(block, Image):
            chars += IMAGE_CHARS
        elif isinstance(block, Reasoning):
            chars += len(block.text)
        else:
            chars += len(block.name) + len(repr(block.input))
    return chars


class _Counted:
    """:func:`estimate_input_tokens` without recounting a run's whole transcript per call
    (and a list script's tool calls sized once: :meth:`arguments`).

    A run's next request repeats its last one's messages and adds a few: each
    run's messages as counted at its last request are kept, with their count,
    and a request that starts with them (compared in C, by identity first) counts
    only the rest. Anything else (a transcript a strategy bounded, a history) is
    counted whole. A run's entry goes when its reply is an answer (its run most
    likely ends there); at most :attr:`LIMIT` are kept, the oldest dropped first.
    """

    __slots__ = ("_calls", "_runs")

    LIMIT = 65_536

    def __init__(self) -> None:
        self._runs: dict[str, tuple[tuple[Message, ...], int]] = {}
        # A list script's tool calls (by id, each kept with its entry) -> its arguments
        # as sent and their output tokens: the same for every run that plays it.
        self._calls: dict[int, tuple[ToolCall, Any, int]] = {}

    def __reduce__(self) -> tuple[type[_Counted], tuple[()]]:
        return (_Counted, ())  # a copy (another process's) starts empty

    def input_tokens(self, request: ModelRequest, run_id: str, last: bool) -> int:
        messages, runs = request.messages, self._runs
        start = chars = 0
        entry = runs.pop(run_id, None)
        if entry is not None:
            before, counted = entry
            if len(before) <= len(messages) and messages[: len(before)] == before:
                start, chars = len(before), counted
        for i in range(start, len(messages)):
            chars += _message_chars(messages[i])
        if not last:
            runs[run_id] = (messages, chars)
            if len(runs) > self.LIMIT:
                del runs[next(iter(runs))]
        return math.ceil((len(request.system) + chars) / CHARS_PER_TOKEN)

    def arguments(self, call: ToolCall, keep: bool) -> tuple[Any, int]:
        """``call``'s arguments as a wire provider sends them, and their output tokens;
        kept for the next run with ``keep`` (a list script: a bounded set of calls)."""
        kept = self._calls.get(id(call)) if keep else None
        if kept is None or kept[0] is not call:
            arguments = bound_arguments(call.arguments)
            kept = (call, arguments, _tokens(repr(arguments)) + 1)
            if keep:
                self._calls[id(call)] = kept
        return kept[1], kept[2]


__all__ = [
    "Fault",
    "Reply",
    "ScriptExhausted",
    "ScriptedProvider",
    "ToolCall",
]
