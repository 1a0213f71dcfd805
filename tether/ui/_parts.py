"""A run's events as the neutral parts both UI protocols are made of.

Both AG-UI and the AI SDK's UI message stream describe the same things: a
text message that opens, grows and closes; reasoning likewise; a tool call
whose arguments stream and then are complete; its result; steps; an approval;
the end. :class:`PartMaker` turns tether events (kept ones and the live
deltas of ``handle.events(deltas=True)``) into those parts, in an order both
protocols accept: a text or reasoning span is closed before a tool call
starts, every opened span is closed, each step is closed before the next
one opens. Each protocol module then spells the parts its own way.

The text of a model call comes from its ``TextDelta`` events when a reader
got them; when it got none (a reader that subscribed late, a provider that
does not stream), the call's whole text comes from ``ModelCallFinished``, as
one delta. Tool calls likewise. A provider retry starts the call's text over
in a new span (the old one is closed as it was).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from tether import events as ev

# ----------------------------------------------------------------------- parts


@attrs.frozen(kw_only=True)
class StepStarted:
    round: int


@attrs.frozen(kw_only=True)
class StepFinished:
    round: int


@attrs.frozen(kw_only=True)
class TextStarted:
    id: str
    #: The assistant message this text belongs to (one per model call).
    message_id: str


@attrs.frozen(kw_only=True)
class TextDelta:
    id: str
    delta: str


@attrs.frozen(kw_only=True)
class TextEnded:
    id: str


@attrs.frozen(kw_only=True)
class ReasoningStarted:
    id: str


@attrs.frozen(kw_only=True)
class ReasoningDelta:
    id: str
    delta: str


@attrs.frozen(kw_only=True)
class ReasoningEnded:
    id: str


@attrs.frozen(kw_only=True)
class ToolStarted:
    call_id: str
    name: str
    message_id: str


@attrs.frozen(kw_only=True)
class ToolArgs:
    call_id: str
    delta: str


@attrs.frozen(kw_only=True)
class ToolEnded:
    """The call's arguments are complete: ``input`` is what the model sent."""

    call_id: str
    name: str
    input: Any


@attrs.frozen(kw_only=True)
class ToolResult:
    call_id: str
    name: str
    outcome: str
    is_error: bool
    content: str


@attrs.frozen(kw_only=True)
class ApprovalAsked:
    """A policy held a call for a human's answer (the first of a round's asks)."""

    call_id: str
    name: str
    arguments: Any
    reason: str
    seq: int


@attrs.frozen(kw_only=True)
class Finished:
    termination: str
    ok: bool
    output: str | None
    error: str | None


Part = (
    StepStarted
    | StepFinished
    | TextStarted
    | TextDelta
    | TextEnded
    | ReasoningStarted
    | ReasoningDelta
    | ReasoningEnded
    | ToolStarted
    | ToolArgs
    | ToolEnded
    | ToolResult
    | ApprovalAsked
    | Finished
)


def arguments_json(value: Any) -> str:
    """A tool call's arguments as JSON text (a str that is not JSON stays as it is)."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


@attrs.define
class PartMaker:
    """Turns one run's events into parts; ``feed`` one event at a time, in order.

    ``prefix`` makes the ids (messages, text and reasoning spans) unique
    across runs: the tether run id by default. Tool call ids are the model's.
    """

    prefix: str
    _round: int | None = None
    _calls: int = 0  # model calls finished so far: the next one's index
    _attempt: int = 1
    _text: str | None = None
    _reasoning: str | None = None
    _spans: int = 0
    _streamed_text: bool = False
    _tools: dict[str, str] = attrs.field(factory=dict)  # call id -> name, streamed this call
    _caught_up: bool = False  # feed_after: past the events the response skips

    def message_id(self) -> str:
        """The id of the assistant message of the model call in progress."""
        return f"{self.prefix}.m{self._calls}"

    def forget_step(self) -> None:
        """Open the current round's step again with the next part (a stream that goes
        on after an approval, in a new response, opens the step it is in)."""
        self._round = None

    def pause(self) -> list[Part]:
        """The parts that close what is open, for a response that ends while the run
        waits (an approval): its spans and its step."""
        parts: list[Part] = []
        self._close_spans(parts)
        if self._round is not None:
            parts.append(StepFinished(round=self._round))
            self._round = None
        return parts

    def feed_after(self, event: ev.Event, skip: int) -> list[Part]:
        """The parts of ``event`` for a response that goes on after event ``skip`` (-1:
        from the start): the events up to it only catch the maker up on ids and rounds,
        silently, and the first one after it opens its step again."""
        if not self._caught_up and skip >= 0:
            if event.seq <= skip:
                self.feed(event)
                return []
            self.forget_step()
        self._caught_up = True
        return self.feed(event)

    def feed(self, event: ev.Event) -> list[Part]:
        parts: list[Part] = []
        kept = not isinstance(event, ev.DELTA_TYPES)
        if kept and event.round >= 1 and self._round != event.round:
            self._close_spans(parts)
            if self._round is not None:
                parts.append(StepFinished(round=self._round))
            self._round = event.round
            parts.append(StepStarted(round=event.round))
        if isinstance(event, ev.TextDelta):
            self._on_text(event, parts)
        elif isinstance(event, ev.ReasoningDelta):
            self._close_text(parts)
            if self._reasoning is None:
                self._reasoning = self._span("r")
                parts.append(ReasoningStarted(id=self._reasoning))
            parts.append(ReasoningDelta(id=self._reasoning, delta=event.text))
        elif isinstance(event, ev.ToolCallDelta):
            self._close_spans(parts)
            if event.call_id not in self._tools:
                self._tools[event.call_id] = event.name
                parts.append(
                    ToolStarted(
                        call_id=event.call_id, name=event.name, message_id=self.message_id()
                    )
                )
            if event.arguments_delta:
                parts.append(ToolArgs(call_id=event.call_id, delta=event.arguments_delta))
        elif isinstance(event, ev.ModelCallStarted):
            if event.attempt != self._attempt:  # a retry: the call's text starts over
                self._close_spans(parts)
                self._attempt = event.attempt
        elif isinstance(event, ev.ModelCallFinished):
            self._on_call_finished(event, parts)
        elif isinstance(event, ev.ApprovalRequested):
            self._close_spans(parts)
            parts.append(
                ApprovalAsked(
                    call_id=event.call_id,
                    name=event.name,
                    arguments=event.arguments,
                    reason=event.reason,
                    seq=event.seq,
                )
            )
        elif isinstance(event, ev.ToolCallFinished):
            parts.append(
                ToolResult(
                    call_id=event.call_id,
                    name=event.name,
                    outcome=event.outcome,
                    is_error=event.is_error,
                    content=event.content,
                )
            )
        elif isinstance(event, ev.RunFinished):
            self._close_spans(parts)
            if self._round is not None:
                parts.append(StepFinished(round=self._round))
                self._round = None
            parts.append(
                Finished(
                    termination=event.termination.value,
                    ok=event.termination.ok,
                    output=event.output,
                    error=event.error,
                )
            )
        return parts

    # ------------------------------------------------------------------ helpers

    def _span(self, kind: str) -> str:
        self._spans += 1
        return f"{self.prefix}.{kind}{self._spans}"

    def _on_text(self, event: ev.TextDelta, parts: list[Part]) -> None:
        if event.attempt != self._attempt:
            self._close_spans(parts)
            self._attempt = event.attempt
        if self._reasoning is not None:
            parts.append(ReasoningEnded(id=self._reasoning))
            self._reasoning = None
        if self._text is None:
            self._text = self._span("t")
            parts.append(TextStarted(id=self._text, message_id=self.message_id()))
        self._streamed_text = True
        if event.text:
            parts.append(TextDelta(id=self._text, delta=event.text))

    def _on_call_finished(self, event: ev.ModelCallFinished, parts: list[Part]) -> None:
        self._close_spans(parts)
        if event.text and not self._streamed_text:
            span = self._span("t")
            parts.append(TextStarted(id=span, message_id=self.message_id()))
            parts.append(TextDelta(id=span, delta=event.text))
            parts.append(TextEnded(id=span))
        for call in event.tool_calls:
            if call.id not in self._tools:
                parts.append(
                    ToolStarted(call_id=call.id, name=call.name, message_id=self.message_id())
                )
                parts.append(ToolArgs(call_id=call.id, delta=arguments_json(call.input)))
            parts.append(ToolEnded(call_id=call.id, name=call.name, input=call.input))
        self._calls += 1
        self._attempt = 1
        self._streamed_text = False
        self._tools.clear()

    def _close_text(self, parts: list[Part]) -> None:
        if self._text is not None:
            parts.append(TextEnded(id=self._text))
            self._text = None

    def _close_spans(self, parts: list[Part]) -> None:
        if self._reasoning is not None:
            parts.append(ReasoningEnded(id=self._reasoning))
            self._reasoning = None
        self._close_text(parts)
