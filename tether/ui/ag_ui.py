"""An agent served over AG-UI (the Agent User Interaction protocol), as an ASGI app.

``app(agent, runtime=rt)`` answers ``POST /`` with an AG-UI ``RunAgentInput``
by starting a run and streaming its events as AG-UI events, one per ``data:``
line of a ``text/event-stream`` (docs/guides/ag-ui.md has the whole mapping):

- ``RUN_STARTED``; ``STEP_STARTED``/``STEP_FINISHED`` around each round
  (``"round 1"``, ...); ``TEXT_MESSAGE_START``/``CONTENT``/``END`` for the
  model's text, as it streams; ``REASONING_START``, ``REASONING_MESSAGE_*``,
  ``REASONING_END`` for its reasoning; ``TOOL_CALL_START``/``ARGS``/``END`` for
  each call, ``TOOL_CALL_RESULT`` for each result of a tool run here.
- ``RUN_FINISHED`` when the run ends ok (``answered``, ``terminal_tool``; the
  answer as ``result``), with the ``cancelled`` outcome when it was cancelled,
  else ``RUN_ERROR`` (``code`` is the termination).
- A call a policy holds for approval (``Verdict.ask``) ends the response with
  ``RUN_FINISHED`` and the ``interrupt`` outcome: one interrupt per held call,
  ``id`` and ``toolCallId`` the call's id, ``reason`` ``"tool_approval"``. The
  run stays parked in the Runtime. The client resumes with a new ``POST /`` on
  the same ``threadId`` whose ``resume`` answers each interrupt: ``status``
  ``"resolved"`` with ``payload`` ``true`` or ``{"approved": true}`` approves,
  ``{"approved": false, "reason": "..."}``, ``false`` or ``status``
  ``"cancelled"`` rejects. The same run goes on, and the new response streams
  it from the answer on. A new run on a thread whose run waits (a POST without
  ``resume``) cancels the waiting run.

Input: the messages become the run's history (the last user message its
input), the request's ``tools`` become *frontend tools* (the model may call
them; such a call ends the run, the client runs it, and its ``tool`` message in
the next request's messages is the result; the run answers it then), and the
request's ``state`` is the run's ``deps`` (or what ``deps=`` makes of the whole
input). Needs the ``ui`` extra (``ag-ui-protocol``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import attrs

try:
    from ag_ui import core as agui
    from pydantic import ValidationError
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("tether.ui.ag_ui needs ag-ui-protocol: pip install 'tether[ui]'") from exc

import tether
from tether.actors import ToolSpec
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

#: The input of a run that goes on after the client answered frontend tool calls.
CONTINUE_PROMPT = "The tool results are above. Continue."
#: What a frontend tool's call returns in the run (the client runs the call).
FRONTEND_RESULT = "The client runs this tool; its result comes in the next request."
#: The interrupt reason of a tool call held for approval.
APPROVAL_REASON = "tool_approval"


def app(
    agent: tether.Agent[Any, Any],
    *,
    runtime: RuntimeLike,
    deps: Callable[[agui.RunAgentInput], Any] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    continue_prompt: str = CONTINUE_PROMPT,
) -> AGUIApp:
    """An ASGI app serving ``agent`` over AG-UI on ``runtime`` (which the service owns
    and has entered; :func:`tether.ui.with_runtime` does it for a bare server).

    ``deps`` makes a run's deps from its ``RunAgentInput`` (default: its ``state``).
    """
    if not isinstance(agent, tether.Agent):
        raise TypeError(f"app() serves a tether.Agent, got {type(agent).__name__}")
    if max_body_bytes <= 0:
        raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes!r}")
    return AGUIApp(
        agent=agent,
        runtime=runtime,
        deps=deps,
        max_body_bytes=max_body_bytes,
        continue_prompt=continue_prompt,
    )


@attrs.define(kw_only=True)
class AGUIApp:
    """The ASGI app of :func:`app`."""

    agent: tether.Agent[Any, Any]
    runtime: RuntimeLike
    deps: Callable[[agui.RunAgentInput], Any] | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    continue_prompt: str = CONTINUE_PROMPT
    #: Runs waiting for an approval, by thread id.
    held: HeldRuns = attrs.field(factory=HeldRuns)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            body = await read_json(scope, receive, self.max_body_bytes)
            try:
                request = agui.RunAgentInput.model_validate(body)
            except ValidationError as e:
                raise Refused(422, f"not an AG-UI RunAgentInput: {_errors(e)}") from None
            handle, skip, frontend, resume = await self._begin(request)
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
        answered = frozenset(resume[0].call_ids) if resume else frozenset()
        frames = self._frames(request, handle, stream, skip, frontend, answered)
        await stream_sse(
            send, receive, frames, on_disconnect=lambda: handle.cancel("the client disconnected")
        )

    # ------------------------------------------------------------- starting

    async def _begin(
        self, request: agui.RunAgentInput
    ) -> tuple[RunHandleLike[Any], int, frozenset[str], _Resume | None]:
        """The run to stream, the seq after which to stream it (-1: all), the frontend
        tools, and the answers to give a held run once its events are followed."""
        held = self.held.take(request.thread_id)
        frontend = frozenset(t.name for t in request.tools or ())
        if request.resume:
            if held is None:
                raise Refused(
                    409, f"no run waits for an answer on thread {request.thread_id[:80]!r}"
                )
            try:
                answers = _answers(request.resume, held)
            except Refused:
                self.held.put(held)  # still waiting
                raise
            return held.handle, held.seq, frontend, (held, answers)
        if held is not None:
            held.handle.cancel("a new run started on the thread")
        agent = self.agent
        if request.tools:
            taken = {t.name for t in agent.tools}
            clash = sorted(frontend & taken)
            if clash:
                raise Refused(422, f"a frontend tool has the name of an agent's tool: {clash[0]!r}")
            agent = attrs.evolve(agent, tools=[*agent.tools, *map(frontend_tool, request.tools)])
        history = tidy(to_messages(request.messages))
        run_input, past = split_input(history, self.continue_prompt)
        deps = request.state if self.deps is None else self.deps(request)
        try:
            handle = self.runtime.start(agent, run_input, history=past, deps=deps)
        except (TypeError, ValueError) as e:
            raise Refused(422, str(e)) from None
        return handle, -1, frontend, None

    # ------------------------------------------------------------- streaming

    async def _frames(
        self,
        request: agui.RunAgentInput,
        handle: RunHandleLike[Any],
        stream: AsyncIterator[tether.events.Event],
        skip: int,
        frontend: frozenset[str],
        answered: frozenset[str],
    ) -> AsyncIterator[bytes]:
        thread, run = request.thread_id, request.run_id
        yield _frame(agui.RunStartedEvent(thread_id=thread, run_id=run))
        maker = p.PartMaker(prefix=handle.run_id)
        spell = _Speller(prefix=handle.run_id, frontend=frontend)
        async with closing(stream):
            async for event in stream:
                for part in maker.feed_after(event, skip):
                    if isinstance(part, p.ApprovalAsked):
                        if part.call_id in answered:
                            continue  # asked with the calls this request answered
                        pending = await handle.pending_approvals()
                        if not pending:
                            continue  # answered meanwhile (by another request)
                        self.held.put(
                            Held(
                                handle=handle,
                                seq=part.seq,
                                call_ids=tuple(a.call_id for a in pending),
                                key=thread,
                            )
                        )
                        for shut in maker.pause():
                            for out in spell.events(shut):
                                yield _frame(out)
                        yield from_state(request)
                        interrupts = [
                            agui.Interrupt(
                                id=a.call_id,
                                reason=APPROVAL_REASON,
                                message=a.reason,
                                tool_call_id=a.call_id,
                                metadata={"tool": a.name, "arguments": a.arguments},
                            )
                            for a in pending
                        ]
                        outcome = agui.RunFinishedInterruptOutcome(interrupts=interrupts)
                        yield _frame(
                            agui.RunFinishedEvent(thread_id=thread, run_id=run, outcome=outcome)
                        )
                        return
                    if isinstance(part, p.Finished):
                        yield from_state(request)
                        yield _frame(spell.finished(part, thread, run))
                        return
                    for out in spell.events(part):
                        yield _frame(out)


_Resume = tuple[Held, dict[str, tuple[bool, str | None]]]


def from_state(request: agui.RunAgentInput) -> bytes:
    """A ``STATE_SNAPSHOT`` of the request's state (the run's deps may have changed it)."""
    if request.state is None:
        return b""
    return _frame(agui.StateSnapshotEvent(snapshot=request.state))


@attrs.define
class _Speller:
    """Parts as AG-UI events."""

    prefix: str
    frontend: frozenset[str]
    _message_of: dict[str, str] = attrs.field(factory=dict)  # text span -> message id
    _used: set[str] = attrs.field(factory=set)
    _pending: list[str] = attrs.field(factory=list)  # frontend calls left to the client

    def events(self, part: p.Part) -> list[agui.BaseEvent]:
        if isinstance(part, p.StepStarted):
            return [agui.StepStartedEvent(step_name=f"round {part.round}")]
        if isinstance(part, p.StepFinished):
            return [agui.StepFinishedEvent(step_name=f"round {part.round}")]
        if isinstance(part, p.TextStarted):
            message = part.message_id if part.message_id not in self._used else part.id
            self._used.add(message)
            self._message_of[part.id] = message
            return [agui.TextMessageStartEvent(message_id=message, role="assistant")]
        if isinstance(part, p.TextDelta):
            return [
                agui.TextMessageContentEvent(message_id=self._message_of[part.id], delta=part.delta)
            ]
        if isinstance(part, p.TextEnded):
            return [agui.TextMessageEndEvent(message_id=self._message_of.pop(part.id))]
        if isinstance(part, p.ReasoningStarted):
            return [
                agui.ReasoningStartEvent(message_id=part.id),
                agui.ReasoningMessageStartEvent(message_id=part.id, role="reasoning"),
            ]
        if isinstance(part, p.ReasoningDelta):
            return [agui.ReasoningMessageContentEvent(message_id=part.id, delta=part.delta)]
        if isinstance(part, p.ReasoningEnded):
            return [
                agui.ReasoningMessageEndEvent(message_id=part.id),
                agui.ReasoningEndEvent(message_id=part.id),
            ]
        if isinstance(part, p.ToolStarted):
            self._used.add(part.message_id)
            return [
                agui.ToolCallStartEvent(
                    tool_call_id=part.call_id,
                    tool_call_name=part.name,
                    parent_message_id=part.message_id,
                )
            ]
        if isinstance(part, p.ToolArgs):
            return [agui.ToolCallArgsEvent(tool_call_id=part.call_id, delta=part.delta)]
        if isinstance(part, p.ToolEnded):
            if part.name in self.frontend:
                self._pending.append(part.call_id)
            return [agui.ToolCallEndEvent(tool_call_id=part.call_id)]
        if isinstance(part, p.ToolResult):
            if part.name in self.frontend and part.outcome == "ok":
                return []  # the client runs it
            return [
                agui.ToolCallResultEvent(
                    message_id=f"{self.prefix}.result.{part.call_id}",
                    tool_call_id=part.call_id,
                    content=part.content,
                    role="tool",
                )
            ]
        return []

    def finished(self, part: p.Finished, thread: str, run: str) -> agui.BaseEvent:
        if part.ok:
            pending = self._pending or None
            result = None if pending else part.output
            return agui.RunFinishedEvent(
                thread_id=thread,
                run_id=run,
                result=result,
                outcome=agui.RunFinishedSuccessOutcome(pending_tool_call_ids=pending),
            )
        if part.termination == "cancelled":
            return agui.RunFinishedEvent(
                thread_id=thread, run_id=run, outcome=agui.RunFinishedCancelledOutcome()
            )
        message = part.error or f"the run ended: {part.termination}"
        return agui.RunErrorEvent(message=message, code=part.termination)


def _frame(event: agui.BaseEvent) -> bytes:
    return sse(event.model_dump(mode="json", by_alias=True, exclude_none=True))


# ---------------------------------------------------------------- the request


def frontend_tool(tool: agui.Tool) -> ToolSpec[Any]:
    """A tool of the request as a tether tool whose call ends the run: the client
    runs it, and sends its result in the next request's messages."""
    schema = tool.parameters if isinstance(tool.parameters, dict) else None
    if not schema:
        schema = {"type": "object", "properties": {}}

    def handed_back(**_: Any) -> str:
        return FRONTEND_RESULT

    try:
        return ToolSpec(
            name=tool.name,
            description=tool.description,
            input_schema=schema,
            fn=handed_back,
            is_async=False,
            terminal=True,
        )
    except (TypeError, ValueError) as e:
        raise Refused(422, f"frontend tool {tool.name[:80]!r}: {e}") from None


def to_messages(messages: Sequence[agui.Message]) -> list[Message]:
    """AG-UI messages as tether messages: user and assistant messages with their
    text, images and tool calls, tool messages as tool results. System, developer,
    reasoning and activity messages are left out (the agent's instructions are its
    system prompt)."""
    out: list[Message] = []
    for message in messages:
        if isinstance(message, agui.UserMessage):
            out.append(Message(role="user", content=tuple(_user_blocks(message.content))))
        elif isinstance(message, agui.AssistantMessage):
            blocks: list[Any] = [TextBlock(text=message.content)] if message.content else []
            for call in message.tool_calls or ():
                blocks.append(
                    ToolUseBlock(
                        id=call.id,
                        name=call.function.name,
                        input=_arguments(call.function.arguments),
                    )
                )
            out.append(Message(role="assistant", content=tuple(blocks)))
        elif isinstance(message, agui.ToolMessage):
            content = message.content
            text = content if isinstance(content, str) else _texts(content)
            if message.error:
                text = f"{text}\n{message.error}" if text else message.error
            result = ToolResultBlock(
                tool_use_id=message.tool_call_id, content=text, is_error=bool(message.error)
            )
            out.append(Message(role="user", content=(result,)))
    return out


def _user_blocks(content: str | Sequence[Any]) -> list[Any]:
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    blocks: list[Any] = []
    for part in content:
        if isinstance(part, agui.TextPart):
            if part.text:
                blocks.append(TextBlock(text=part.text))
        elif isinstance(part, agui.ImagePart):
            blocks.append(_image(part))
        else:
            kind = getattr(part, "type", type(part).__name__)
            raise Refused(422, f"a user message part of type {kind!r} is not supported")
    return blocks


def _image(part: agui.ImagePart) -> Image:
    source = part.source
    try:
        if source.type == "data":
            return Image.from_bytes(base64.b64decode(source.value), source.mime_type)
        if source.type == "url":
            return Image.from_url(source.value)
    except (TypeError, ValueError, binascii.Error) as e:
        raise Refused(422, f"an image part is not a usable image: {e}") from None
    raise Refused(422, f"an image part with a {source.type!r} source is not supported")


def _texts(parts: Sequence[Any]) -> str:
    return "\n".join(part.text for part in parts if isinstance(part, agui.TextPart))


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


def _answers(resume: Sequence[agui.ResumeEntry], held: Held) -> dict[str, tuple[bool, str | None]]:
    answers: dict[str, tuple[bool, str | None]] = {}
    for entry in resume:
        if entry.interrupt_id not in held.call_ids:
            held_ids = ", ".join(held.call_ids)
            raise Refused(
                409, f"interrupt {entry.interrupt_id[:80]!r} is not waiting (waiting: {held_ids})"
            )
        if entry.status == "cancelled":
            answers[entry.interrupt_id] = (False, "cancelled by the user")
            continue
        payload = entry.payload
        if isinstance(payload, bool):
            answers[entry.interrupt_id] = (payload, None)
        elif isinstance(payload, dict) and isinstance(payload.get("approved"), bool):
            reason = payload.get("reason")
            answers[entry.interrupt_id] = (
                payload["approved"],
                reason if isinstance(reason, str) else None,
            )
        else:
            raise Refused(
                422,
                f"the answer to interrupt {entry.interrupt_id[:80]!r} must be true, false or "
                '{"approved": bool, "reason": str}',
            )
    return answers


def _errors(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(x) for x in first.get("loc", ()))
    return f"{where}: {first.get('msg')}" + (
        f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    )


__all__ = ["AGUIApp", "app", "frontend_tool", "to_messages"]
