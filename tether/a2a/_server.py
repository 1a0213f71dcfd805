"""``serve``: a tether agent as an A2A server, an ASGI app over a Runtime the service owns.

The app speaks A2A's JSON-RPC binding at the path of ``url``: the methods of
A2A 1.0 (``SendMessage``, ``SendStreamingMessage``, ``GetTask``,
``CancelTask``) and their 0.3 names (``message/send``, ``message/stream``,
``tasks/get``, ``tasks/cancel``, in 0.3's JSON, converted with the SDK's
``a2a.compat.v0_3``). The agent card is at ``/.well-known/agent-card.json``.

Why not the SDK's ``DefaultRequestHandler``: it runs on asyncio (its queues
and tasks), and this app must run on trio too; the SDK's types (protobuf),
its card serialization and its 0.3 conversions are used as they are.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Any
from urllib.parse import urlsplit

import anyio
import attrs
from a2a.compat.v0_3 import conversions as v03
from a2a.compat.v0_3 import types as t03
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import a2a_pb2 as pb
from a2a.utils import errors as a2a_errors
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import tether
from tether.runtime import (
    ApprovalAnswered,
    ApprovalRequested,
    Event,
    RunFinished,
    RunHandle,
    RunNotFound,
    RunStore,
    TextDelta,
    stored_result,
)

from . import _tasks as tk
from ._trace import adopt_trace

CARD_PATH = "/.well-known/agent-card.json"
#: The path of the card before A2A 0.3 renamed it.
LEGACY_CARD_PATH = "/.well-known/agent.json"
#: The ``metadata`` key of a streamed status update that carries a piece of text.
DELTA_KEY = "tether/delta"

_V1 = {"SendMessage", "SendStreamingMessage", "GetTask", "CancelTask"}
_V03 = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
}


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _code(kind: type[a2a_errors.A2AError]) -> int:
    code: int = a2a_errors.JSON_RPC_ERROR_CODE_MAP[kind]
    return code


@attrs.define
class _Stop:
    """Where a run stopped for the caller: finished, or held for answers."""

    ending: tk.Ending | None = None
    held: bool = False


class A2AServer:
    """The app's state: the agent, the Runtime, the tasks it started (see :func:`serve`)."""

    def __init__(
        self,
        agent: tether.Agent[Any, Any],
        runtime: tether.Runtime,
        url: str,
        *,
        store: RunStore | None,
        description: str | None,
        version: str,
        max_body_bytes: int,
        max_tasks: int,
    ) -> None:
        self.agent, self.rt, self.url, self.store = agent, runtime, url, store
        self.max_body_bytes, self.max_tasks = max_body_bytes, max_tasks
        about = description or (agent.instructions if isinstance(agent.instructions, str) else "")
        about = about.strip().splitlines()[0][:500] if about.strip() else f"The agent {agent.name}"
        interfaces = [
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)
            for version in ("1.0", "0.3")
        ]
        self.card = pb.AgentCard(
            name=agent.name,
            description=about,
            supported_interfaces=interfaces,
            version=version,
            capabilities=pb.AgentCapabilities(streaming=True),
            default_input_modes=["text/plain", "application/json"],
            default_output_modes=["text/plain"],
            skills=[
                pb.AgentSkill(id=agent.name, name=agent.name, description=about, tags=["tether"])
            ],
        )
        self._card_json = agent_card_to_dict(self.card)
        #: Handles of the tasks started or answered here, oldest first (a run that
        #: finished here is found through them when there is no store).
        self._handles: dict[str, RunHandle[Any]] = {}

    # ----------------------------------------------------------------- routes

    async def card_route(self, request: Request) -> Response:
        return JSONResponse(self._card_json)

    async def rpc(self, request: Request) -> Response:
        rpc_id: Any = None
        try:
            body = await self._read(request)
            rpc_id = body.get("id")
            method = body.get("method")
            if body.get("jsonrpc") != "2.0" or not isinstance(method, str):
                raise _RpcError(_code(a2a_errors.InvalidRequestError), "not a JSON-RPC 2.0 request")
            legacy = method in _V03
            name = _V03.get(method, method)
            if name not in _V1:
                raise _RpcError(
                    _code(a2a_errors.MethodNotFoundError), f"unknown method {method[:80]!r}"
                )
            headers = dict(request.headers)
            if name == "SendStreamingMessage":
                send = self._send_request(body, legacy)
                stream = self._stream(send, rpc_id, legacy, headers)
                return StreamingResponse(stream, media_type="text/event-stream")
            result = await self._call(name, body, legacy, headers)
            return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "result": result})
        except _RpcError as exc:
            return _error(rpc_id, exc.code, exc.message)
        except tk.BadRequest as exc:
            return _error(rpc_id, _code(a2a_errors.InvalidParamsError), str(exc))
        except tk.NotFound as exc:
            return _error(rpc_id, _code(a2a_errors.TaskNotFoundError), str(exc))
        except tk.NotCancelable as exc:
            return _error(rpc_id, _code(a2a_errors.TaskNotCancelableError), str(exc))

    async def _read(self, request: Request) -> dict[str, Any]:
        limit = self.max_body_bytes
        body = bytearray()
        async with aclosing(request.stream()) as chunks:
            async for chunk in chunks:
                body += chunk
                if len(body) > limit:
                    raise _RpcError(
                        _code(a2a_errors.InvalidRequestError), f"body over {limit} bytes"
                    )
        try:
            value = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise _RpcError(_code(a2a_errors.JSONParseError), "the body is not JSON") from None
        if not isinstance(value, dict):
            raise _RpcError(_code(a2a_errors.InvalidRequestError), "not a JSON-RPC request object")
        return value

    async def _call(
        self, name: str, body: dict[str, Any], legacy: bool, headers: Mapping[str, str]
    ) -> Any:
        params = body.get("params")
        if not isinstance(params, dict):
            raise tk.BadRequest("params must be an object")
        if name == "SendMessage":
            found = await self._send(self._send_request(body, legacy), headers)
            if legacy:
                return _dump03(v03.to_compat_task(found))
            return tk.to_json(pb.SendMessageResponse(task=found))
        if legacy:
            model = _legacy(
                t03.GetTaskRequest if name == "GetTask" else t03.CancelTaskRequest, body
            )
            task_id = model.params.id
        else:
            request = tk.from_json(
                params, pb.GetTaskRequest() if name == "GetTask" else pb.CancelTaskRequest()
            )
            task_id = request.id
        found = await (self.get_task(task_id) if name == "GetTask" else self.cancel_task(task_id))
        if legacy:
            return v03.to_compat_task(found).model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
        return tk.to_json(found)

    def _send_request(self, body: dict[str, Any], legacy: bool) -> pb.SendMessageRequest:
        params = body.get("params")
        if not isinstance(params, dict):
            raise tk.BadRequest("params must be an object")
        if legacy:
            model = _legacy(t03.SendMessageRequest, {**body, "method": "message/send"})
            request = v03.to_core_send_message_request(model)
        else:
            request = tk.from_json(params, pb.SendMessageRequest())
        if not request.HasField("message") or not request.message.parts:
            raise tk.BadRequest("params.message with at least one part is required")
        return request

    # ------------------------------------------------------------------ tasks

    async def _begin(
        self, message: pb.Message, headers: Mapping[str, str]
    ) -> tuple[str, str, set[str] | None]:
        """Start a run for a new task, or answer a held task's calls.

        The task id and context id, and the ids of the calls answered (a stop
        before their answers is an old one), or ``None`` when calls are still
        held unanswered (the run waits for them: the task stays input-required).
        """
        if message.task_id:
            task_id = message.task_id
            context_id = tk.context_of(task_id)
            pending = await self._pending(task_id)
            if not pending:
                raise tk.BadRequest(
                    f"task {task_id[:80]!r} is not waiting for input: send a new message "
                    "without taskId to start a new task"
                )
            answers = tk.decisions(message, pending)
            for d in answers:
                if d.approved:
                    await self.rt.approve(task_id, d.call_id)
                else:
                    await self.rt.reject(task_id, d.call_id, d.reason)
            answered = {d.call_id for d in answers}
            if any(p.call_id not in answered for p in pending):
                return task_id, context_id, None
            return task_id, context_id, answered
        context_id = message.context_id or tk.new_context_id()
        task_id = tk.new_task_id(context_id)
        text = tk.text_of(message)
        adopt_trace(task_id, headers)  # the caller's trace, when tether.otel is in use
        handle = self.rt.start(self.agent, text, run_id=task_id)
        self._keep(handle)
        return task_id, context_id, set()

    def _keep(self, handle: RunHandle[Any]) -> None:
        handles = self._handles
        handles.pop(handle.run_id, None)
        handles[handle.run_id] = handle
        if len(handles) > self.max_tasks:
            for run_id in [r for r, h in handles.items() if h.done][
                : len(handles) - self.max_tasks
            ]:
                del handles[run_id]

    def _handle(self, task_id: str) -> RunHandle[Any]:
        live = self.rt.in_flight(task_id)
        if live is not None:
            return live
        kept = self._handles.get(task_id)
        if kept is not None and (kept.done or self.store is None):
            return kept
        try:
            return self.rt.handle(task_id)
        except RunNotFound:
            raise tk.NotFound(f"no task {task_id[:80]!r}") from None

    async def _pending(self, task_id: str) -> list[tether.runtime.PendingApproval]:
        try:
            return await self.rt.pending_approvals(task_id)
        except RunNotFound:
            kept = self._handles.get(task_id)
            if kept is None:
                raise tk.NotFound(f"no task {task_id[:80]!r}") from None
            return []

    async def _send(self, request: pb.SendMessageRequest, headers: Mapping[str, str]) -> pb.Task:
        task_id, context_id, answered = await self._begin(request.message, headers)
        if request.configuration.return_immediately or answered is None:
            return await self.get_task(task_id)
        stop = await self._until_stop(task_id, answered, None)
        return await self._task_at(task_id, context_id, stop)

    async def _task_at(self, task_id: str, context_id: str, stop: _Stop) -> pb.Task:
        if stop.ending is not None:
            return tk.task(task_id, context_id, ending=stop.ending)
        return tk.task(task_id, context_id, pending=await self._pending(task_id))

    def _open(self, task_id: str, *, deltas: bool) -> AsyncIterator[Event]:
        """The run's events from the first (and its live deltas, if asked and it is in
        flight here, from now on: open it before the next checkpoint not to miss any)."""
        live = self.rt.in_flight(task_id)
        handle = live if live is not None else self._handle(task_id)
        return handle.events(deltas=deltas and live is not None)

    async def _until_stop(
        self,
        task_id: str,
        answered: set[str],
        on_text: Callable[[str], None] | None = None,
        events: AsyncIterator[Event] | None = None,
    ) -> _Stop:
        """Follow the run until it finishes or holds a call it did not hold before.

        ``answered``: the calls just answered (events up to their answers are
        replayed history). ``on_text`` gets the run's text deltas from ``events``
        (opened by :meth:`_open` with deltas).
        """
        waiting = set(answered)
        held = False
        if events is None:
            events = self._open(task_id, deltas=False)
        try:
            async for event in events:
                if isinstance(event, ApprovalAnswered):
                    waiting.discard(event.call_id)
                elif waiting:
                    continue
                elif isinstance(event, TextDelta):
                    if on_text is not None:
                        on_text(event.text)
                elif isinstance(event, ApprovalRequested):
                    if self.store is None:
                        return _Stop(held=True)
                    # A durable run parks in the store: follow it until it has left
                    # (its events end), so that an answer or a cancel finds it parked.
                    held = True
                elif isinstance(event, RunFinished):
                    return _Stop(ending=tk.Ending.of(event))
        finally:
            close = getattr(events, "aclose", None)  # a live reader unsubscribes at once
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()
        # The stream ended without RunFinished: a durable run parked (or moved on).
        return _Stop(held=held or bool(await self._pending(task_id)))

    async def get_task(self, task_id: str) -> pb.Task:
        context_id = tk.context_of(task_id)
        if self.rt.in_flight(task_id) is not None:
            return tk.task(task_id, context_id, pending=await self._pending(task_id))
        kept = self._handles.get(task_id)
        if kept is not None and kept.done:
            return tk.task(task_id, context_id, ending=tk.Ending.of(await kept.result()))
        if self.store is None:
            if kept is None:
                raise tk.NotFound(f"no task {task_id[:80]!r}")
            return tk.task(task_id, context_id, pending=await self._pending(task_id))
        stored = await self.store.get(task_id)
        if stored is None:
            raise tk.NotFound(f"no task {task_id[:80]!r}")
        if stored.status == "finished":
            result = await stored_result(self.store, task_id, {self.agent.name: self.agent})
            return tk.task(task_id, context_id, ending=tk.Ending.of(result))
        return tk.task(task_id, context_id, pending=await self._pending(task_id))

    async def cancel_task(self, task_id: str) -> pb.Task:
        context_id = tk.context_of(task_id)
        handle = self._handle(task_id)
        current = await self.get_task(task_id)
        if current.status.state not in (
            pb.TaskState.TASK_STATE_WORKING,
            pb.TaskState.TASK_STATE_INPUT_REQUIRED,
        ):
            raise tk.NotCancelable(f"task {task_id[:80]!r} has ended")
        handle.cancel("cancelled over A2A")
        with anyio.move_on_after(10):  # a cancelled run ends at once; this guards a stuck tool
            return tk.task(task_id, context_id, ending=tk.Ending.of(await handle.result()))
        return await self.get_task(task_id)

    # -------------------------------------------------------------- streaming

    async def _stream(
        self, request: pb.SendMessageRequest, rpc_id: Any, legacy: bool, headers: Mapping[str, str]
    ) -> AsyncIterator[str]:
        """The SSE messages of ``SendStreamingMessage``: the task, its text as it streams
        (``working`` status updates whose metadata has :data:`DELTA_KEY`), then the
        answer artifact and the final status, or the ``input-required`` status."""
        try:
            task_id, context_id, answered = await self._begin(request.message, headers)
        except (tk.BadRequest, tk.NotFound) as exc:
            kind = (
                a2a_errors.TaskNotFoundError
                if isinstance(exc, tk.NotFound)
                else a2a_errors.InvalidParamsError
            )
            yield _sse(
                {
                    "jsonrpc": "2.0",
                    "id": rpc_id,
                    "error": {"code": _code(kind), "message": str(exc)},
                }
            )
            return

        def frame(update: pb.StreamResponse) -> str:
            if legacy:
                return _sse(_dump03(v03.to_compat_stream_response(update, rpc_id)))
            return _sse({"jsonrpc": "2.0", "id": rpc_id, "result": tk.to_json(update)})

        # Opened before any checkpoint: every delta from the start.
        events = None if answered is None else self._open(task_id, deltas=True)
        first = pb.Task(id=task_id, context_id=context_id)
        first.status.state = pb.TaskState.TASK_STATE_WORKING
        yield frame(pb.StreamResponse(task=first))
        send, receive = anyio.create_memory_object_stream[str | _Stop](1 << 16)

        def on_text(text: str) -> None:
            send.send_nowait(text)  # bounded by the run's text; never blocks the reader

        async def follow() -> None:
            async with send:
                if answered is None:  # calls still held: the task stays input-required
                    send.send_nowait(_Stop(held=True))
                    return
                stop = await self._until_stop(task_id, answered, on_text, events)
                send.send_nowait(stop)

        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(follow)
            async for item in receive:
                if isinstance(item, str):
                    update = pb.StreamResponse()
                    status = update.status_update
                    status.task_id, status.context_id = task_id, context_id
                    status.status.state = pb.TaskState.TASK_STATE_WORKING
                    status.status.message.CopyFrom(tk.agent_message(task_id, context_id, item))
                    status.metadata.update({DELTA_KEY: True})
                    yield frame(update)
                    continue
                final = await self._task_at(task_id, context_id, item)
                if item.ending is not None and final.artifacts:
                    update = pb.StreamResponse()
                    art = update.artifact_update
                    art.task_id, art.context_id, art.last_chunk = task_id, context_id, True
                    art.artifact.CopyFrom(final.artifacts[0])
                    yield frame(update)
                update = pb.StreamResponse()
                status = update.status_update
                status.task_id, status.context_id = task_id, context_id
                status.status.CopyFrom(final.status)
                status.metadata.CopyFrom(final.metadata)
                yield frame(update)


def _legacy(model: type[Any], body: Mapping[str, Any]) -> Any:
    try:
        return model.model_validate(dict(body))
    except ValidationError as exc:
        raise tk.BadRequest(f"invalid params: {str(exc)[:300]}") from None


def _dump03(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"


def _error(rpc_id: Any, code: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}
    )


def serve(
    agent: tether.Agent[Any, Any],
    *,
    runtime: tether.Runtime,
    url: str,
    store: RunStore | None = None,
    description: str | None = None,
    version: str = "1.0.0",
    max_body_bytes: int = 1 << 20,
    max_tasks: int = 10_000,
) -> Starlette:
    """An ASGI app that serves ``agent`` over A2A (JSON-RPC), on ``runtime``.

    ``url`` is the public URL of the JSON-RPC endpoint (the card gives it to
    clients); the app answers it at that URL's path, and the card at
    ``/.well-known/agent-card.json``. ``runtime`` is the service's: open it
    (``async with``) for the life of the server. A durable Runtime (one with a
    run store) should get that ``store`` here too: then a task finished or held
    before a restart is found after it. ``description`` defaults to the first
    line of the agent's instructions. A task is a run; see docs/guides/a2a.md
    for what maps to what.
    """
    if not isinstance(agent, tether.Agent):
        raise TypeError(f"serve() takes a tether.Agent, got {agent!r}")
    if not isinstance(runtime, tether.Runtime):
        raise TypeError(f"serve(runtime=...) takes a tether.Runtime, got {runtime!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"serve(url=...) must be an http(s) URL, got {url!r}")
    if store is not None and not isinstance(store, RunStore):
        raise TypeError(f"serve(store=...) takes a tether.RunStore, got {store!r}")
    if max_body_bytes < 1 or max_tasks < 1:
        raise ValueError("serve(max_body_bytes=..., max_tasks=...) must be positive")
    server = A2AServer(
        agent,
        runtime,
        url,
        store=store,
        description=description,
        version=version,
        max_body_bytes=max_body_bytes,
        max_tasks=max_tasks,
    )
    path = parts.path or "/"
    app = Starlette(
        routes=[
            Route(CARD_PATH, server.card_route, methods=["GET"]),
            Route(LEGACY_CARD_PATH, server.card_route, methods=["GET"]),
            Route(path, server.rpc, methods=["POST"]),
        ]
    )
    app.state.a2a = server
    return app
