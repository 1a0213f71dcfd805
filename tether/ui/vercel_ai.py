"""An agent served to the AI SDK's ``useChat``: the UI message stream, as an ASGI app.

``app(agent, runtime=rt)`` answers ``POST /`` with ``useChat``'s body
(``{"id", "messages": [UIMessage...], "trigger"}``) by starting a run and
streaming it as the AI SDK UI message stream protocol (v1): Server-Sent Events
with the header ``x-vercel-ai-ui-message-stream: v1``, one JSON chunk per
``data:`` line, ending with ``data: [DONE]`` (docs/guides/vercel-ai.md has the
whole mapping):

- ``start`` (``messageId``: one assistant message per run), ``start-step`` /
  ``finish-step`` around each round; ``text-start``/``text-delta``/``text-end``
  as the model's text streams; ``reasoning-start``/``-delta``/``-end``;
  ``tool-input-start``, ``tool-input-delta`` (the arguments as they stream),
  ``tool-input-available``; ``tool-output-available``, ``tool-output-error``, or
  ``tool-output-denied`` for a call a human or a policy refused;
- ``finish`` (``finishReason`` ``"stop"``) when the run ends ok; ``abort`` when
  it was cancelled; else ``error`` (``errorText`` names the termination) and
  ``finish`` with ``"error"``.
- A call a policy holds for approval (``Verdict.ask``) is a
  ``tool-approval-request`` (``approvalId`` is the call id) and the response ends
  (``finish`` with ``"tool-calls"``) while the run waits in the Runtime. The AI
  SDK answers (``addToolApprovalResponse``) by sending the messages again with
  the tool part in state ``approval-responded`` and its ``approval``
  (``{"id", "approved", "reason"}``); the same run goes on, and the response
  streams it from the answer on, into the same assistant message.

The messages become the run's history (the last user message its input; text
and image ``file`` parts; tool parts with their outputs). Needs no extra.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs

import tether
from tether.providers import Image, Message, TextBlock, ToolResultBlock, ToolUseBlock
from tether.runtime import RunHandleLike, RunNotFound, RuntimeLike

from . import _parts as p
from ._asgi import (
    MAX_BODY_BYTES,
    Gone,
    Held,
    HeldRuns,
    Receive,
    Refused,
    Scope,
    Send,
    answer_held,
    answer_json,
    answer_lifespan,
    closing,
    read_json,
    sse,
    stream_sse,
)
from ._convert import split_input, tidy

#: The header that tells the AI SDK the response is a UI message stream.
STREAM_HEADER = (b"x-vercel-ai-ui-message-stream", b"v1")
DONE = b"data: [DONE]\n\n"

_Answers = dict[str, tuple[bool, str | None]]


def app(
    agent: tether.Agent[Any, Any],
    *,
    runtime: RuntimeLike,
    deps: Callable[[Mapping[str, Any]], Any] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> VercelAIApp:
    """An ASGI app serving ``agent`` to ``useChat`` on ``runtime`` (which the service
    owns and has entered; :func:`tether.ui.with_runtime` does it for a bare server).

    ``deps`` makes a run's deps from the request's JSON body (default: none).
    """
    if not isinstance(agent, tether.Agent):
        raise TypeError(f"app() serves a tether.Agent, got {type(agent).__name__}")
    if max_body_bytes <= 0:
        raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes!r}")
    return VercelAIApp(agent=agent, runtime=runtime, deps=deps, max_body_bytes=max_body_bytes)


@attrs.define(kw_only=True)
class VercelAIApp:
    """The ASGI app of :func:`app`."""

    agent: tether.Agent[Any, Any]
    runtime: RuntimeLike
    deps: Callable[[Mapping[str, Any]], Any] | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    #: Runs waiting for an approval (found by their held calls' ids).
    held: HeldRuns = attrs.field(factory=HeldRuns)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            body = await read_json(scope, receive, self.max_body_bytes)
            handle, skip, resume = self._begin(body)
        except Refused as refusal:
            await answer_json(send, refusal.status, {"detail": refusal.detail})
            return
        except Gone:
            return
        stream = handle.events(deltas=True)  # subscribed before the answer: no delta missed
        if resume is not None:
            try:
                await answer_held(self.runtime, *resume)
            except (KeyError, ValueError, RunNotFound) as e:
                async with closing(stream):
                    pass
                await answer_json(send, 409, {"detail": f"the run could not be resumed: {e}"})
                return
        await stream_sse(
            send,
            receive,
            self._frames(
                handle, stream, skip, frozenset(resume[0].call_ids) if resume else frozenset()
            ),
            headers=[STREAM_HEADER],
            on_disconnect=lambda: handle.cancel("the client disconnected"),
        )

    def _begin(self, body: Any) -> tuple[RunHandleLike[Any], int, tuple[Held, _Answers] | None]:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise Refused(422, "the body must be useChat's: an object with a messages list")
        history, answers = to_messages(body["messages"])
        if answers:
            held = self.held.take_call(next(iter(answers)))
            if held is None:
                raise Refused(409, "no run waits for an answer to these tool calls")
            return held.handle, held.seq, (held, answers)
        run_input, past = split_input(tidy(history), "Continue.")
        deps = None if self.deps is None else self.deps(body)
        try:
            handle = self.runtime.start(self.agent, run_input, history=past, deps=deps)
        except (TypeError, ValueError) as e:
            raise Refused(422, str(e)) from None
        return handle, -1, None

    async def _frames(
        self,
        handle: RunHandleLike[Any],
        stream: AsyncIterator[tether.events.Event],
        skip: int,
        answered: frozenset[str],
    ) -> AsyncIterator[bytes]:
        yield sse({"type": "start", "messageId": handle.run_id})
        maker = p.PartMaker(prefix=handle.run_id)
        async with closing(stream):
            async for event in stream:
                for part in maker.feed_after(event, skip):
                    if isinstance(part, p.ApprovalAsked):
                        if part.call_id in answered:
                            continue  # asked with the calls this request answered
                        pending = await handle.pending_approvals()
                        if not pending:
                            continue  # answered meanwhile (by another request)
                        calls = tuple(a.call_id for a in pending)
                        self.held.put(
                            Held(handle=handle, seq=part.seq, call_ids=calls, key=calls[0])
                        )
                        for call in calls:
                            yield sse(
                                {
                                    "type": "tool-approval-request",
                                    "approvalId": call,
                                    "toolCallId": call,
                                }
                            )
                        for shut in maker.pause():
                            yield from_part(shut)
                        yield sse({"type": "finish", "finishReason": "tool-calls"})
                        yield DONE
                        return
                    if isinstance(part, p.Finished):
                        for chunk in finished(part):
                            yield sse(chunk)
                        yield DONE
                        return
                    yield from_part(part)


def from_part(part: p.Part) -> bytes:
    """A part as its UI message stream chunk (``b""``: none)."""
    chunk = _chunk(part)
    return b"" if chunk is None else sse(chunk)


def _chunk(part: p.Part) -> dict[str, Any] | None:
    if isinstance(part, p.StepStarted):
        return {"type": "start-step"}
    if isinstance(part, p.StepFinished):
        return {"type": "finish-step"}
    if isinstance(part, p.TextStarted):
        return {"type": "text-start", "id": part.id}
    if isinstance(part, p.TextDelta):
        return {"type": "text-delta", "id": part.id, "delta": part.delta}
    if isinstance(part, p.TextEnded):
        return {"type": "text-end", "id": part.id}
    if isinstance(part, p.ReasoningStarted):
        return {"type": "reasoning-start", "id": part.id}
    if isinstance(part, p.ReasoningDelta):
        return {"type": "reasoning-delta", "id": part.id, "delta": part.delta}
    if isinstance(part, p.ReasoningEnded):
        return {"type": "reasoning-end", "id": part.id}
    if isinstance(part, p.ToolStarted):
        return {"type": "tool-input-start", "toolCallId": part.call_id, "toolName": part.name}
    if isinstance(part, p.ToolArgs):
        return {
            "type": "tool-input-delta",
            "toolCallId": part.call_id,
            "inputTextDelta": part.delta,
        }
    if isinstance(part, p.ToolEnded):
        return {
            "type": "tool-input-available",
            "toolCallId": part.call_id,
            "toolName": part.name,
            "input": part.input,
        }
    if isinstance(part, p.ToolResult):
        if part.outcome == "denied":
            return {"type": "tool-output-denied", "toolCallId": part.call_id}
        if part.is_error:
            return {
                "type": "tool-output-error",
                "toolCallId": part.call_id,
                "errorText": part.content,
            }
        return {"type": "tool-output-available", "toolCallId": part.call_id, "output": part.content}
    return None


def finished(part: p.Finished) -> list[dict[str, Any]]:
    """The last chunks of a run that ended (before ``[DONE]``)."""
    if part.ok:
        return [{"type": "finish", "finishReason": "stop"}]
    if part.termination == "cancelled":
        return [{"type": "abort", "reason": part.error or "cancelled"}]
    text = f"the run ended: {part.termination}" + (f": {part.error}" if part.error else "")
    reason = "content-filter" if part.termination == "refusal" else "error"
    return [{"type": "error", "errorText": text}, {"type": "finish", "finishReason": reason}]


# ---------------------------------------------------------------- the request


def to_messages(messages: list[Any]) -> tuple[list[Message], _Answers]:
    """``useChat``'s UI messages as tether messages, and the approval answers in the
    last one (tool parts in state ``approval-responded``: call id -> (approved, reason)).

    User messages keep their ``text`` parts and image ``file`` parts (a ``data:`` or
    ``http(s)`` URL); an assistant message becomes one turn per step (``step-start``):
    its text, its tool calls, and a user turn with the outputs of those that have
    one. System messages and reasoning, source and data parts are left out.
    """
    out: list[Message] = []
    answers: _Answers = {}
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("parts"), list):
            raise Refused(422, f"messages[{i}] is not a UI message (an object with parts)")
        role = message.get("role")
        if role == "user":
            out.append(Message(role="user", content=tuple(_user_blocks(message["parts"], i))))
        elif role == "assistant":
            last = i == len(messages) - 1
            out.extend(_assistant_turns(message["parts"], i, answers if last else None))
        elif role != "system":
            raise Refused(422, f"messages[{i}] has role {role!r}")
    return out, answers


def _user_blocks(parts: list[Any], i: int) -> list[Any]:
    blocks: list[Any] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            if part["text"]:
                blocks.append(TextBlock(text=part["text"]))
        elif kind == "file" and str(part.get("mediaType", "")).startswith("image/"):
            try:
                blocks.append(Image.from_url(str(part.get("url"))))
            except (TypeError, ValueError) as e:
                raise Refused(422, f"messages[{i}] has an image that is not usable: {e}") from None
        elif kind == "file":
            raise Refused(422, f"messages[{i}] has a file of type {part.get('mediaType')!r}")
    return blocks


def _assistant_turns(parts: list[Any], i: int, answers: _Answers | None) -> list[Message]:
    turns: list[Message] = []
    said: list[Any] = []
    results: list[ToolResultBlock] = []

    def close() -> None:
        if said:
            turns.append(Message(role="assistant", content=tuple(said)))
        if results:
            turns.append(Message(role="user", content=tuple(results)))
        said.clear()
        results.clear()

    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise Refused(422, f"messages[{i}] has a part without a type")
        if kind == "step-start":
            close()
        elif kind == "text":
            if part.get("text"):
                said.append(TextBlock(text=str(part["text"])))
        elif kind.startswith("tool-") or kind == "dynamic-tool":
            name = part.get("toolName") if kind == "dynamic-tool" else kind[len("tool-") :]
            call_id = part.get("toolCallId")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise Refused(422, f"messages[{i}] has a tool part without toolCallId")
            said.append(ToolUseBlock(id=call_id, name=name, input=part.get("input", {})))
            result = _result(part, call_id)
            if result is not None:
                results.append(result)
            approval = part.get("approval")
            if (
                answers is not None
                and part.get("state") == "approval-responded"
                and isinstance(approval, dict)
                and isinstance(approval.get("approved"), bool)
            ):
                reason = approval.get("reason")
                answers[call_id] = (
                    approval["approved"],
                    reason if isinstance(reason, str) else None,
                )
    close()
    return turns


def _result(part: dict[str, Any], call_id: str) -> ToolResultBlock | None:
    state = part.get("state")
    if state == "output-available":
        output = part.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        return ToolResultBlock(tool_use_id=call_id, content=text)
    if state == "output-error":
        return ToolResultBlock(
            tool_use_id=call_id, content=str(part.get("errorText", "")), is_error=True
        )
    if state == "output-denied":
        approval = part.get("approval")
        reason = approval.get("reason") if isinstance(approval, dict) else None
        return ToolResultBlock(
            tool_use_id=call_id,
            content=f"denied by the user: {reason or 'no reason'}",
            is_error=True,
        )
    return None


__all__ = ["DONE", "STREAM_HEADER", "VercelAIApp", "app", "finished", "from_part", "to_messages"]
