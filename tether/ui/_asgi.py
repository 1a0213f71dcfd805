"""What the two UI endpoints share: plain ASGI (no framework), one POST route,
a bounded JSON body, an SSE response that notices the client leaving, and the
runs held for an approval between two requests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs

from tether.runtime import RunHandleLike, RuntimeLike

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The largest request body an endpoint reads, by default (1 MiB).
MAX_BODY_BYTES = 1024 * 1024


class Gone(Exception):
    """The client left before its request was read: nobody to answer."""


class Refused(Exception):
    """A request answered with an error status and ``{"detail": ...}``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


async def answer_json(
    send: Send,
    status: int,
    body: Any,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    data = json.dumps(body).encode()
    start_headers = [(b"content-type", b"application/json"), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": data})


async def read_json(scope: Scope, receive: Receive, max_bytes: int) -> Any:
    """The request's JSON body; ``Refused`` for a wrong route, method, type or size."""
    path = scope.get("path", "/")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    if path not in ("", "/"):
        raise Refused(404, "not found: the endpoint answers POST /")
    if scope.get("method") != "POST":
        raise Refused(405, "method not allowed: the endpoint answers POST /")
    headers = dict(scope.get("headers") or [])
    kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if kind != b"application/json":
        raise Refused(415, "the body must be application/json")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Gone
        body = message.get("body", b"")
        size += len(body)
        if size > max_bytes:
            raise Refused(413, f"the body is over {max_bytes} bytes")
        chunks.append(body)
        if not message.get("more_body", False):
            break
    try:
        return json.loads(b"".join(chunks))
    except ValueError as e:
        raise Refused(400, f"the body is not JSON: {e}") from None


@asynccontextmanager
async def closing(stream: AsyncIterator[Any]) -> AsyncIterator[None]:
    """Close ``stream`` (an event stream, a generator of frames) on the way out, so a
    reader that stops early unsubscribes at once, even when it is cancelled."""
    try:
        yield
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await aclose()


def sse(data: Any) -> bytes:
    """One Server-Sent Events message with ``data`` as JSON on its one ``data:`` line."""
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


async def stream_sse(
    send: Send,
    receive: Receive,
    frames: AsyncIterator[bytes],
    *,
    headers: Sequence[tuple[bytes, bytes]] = (),
    on_disconnect: Callable[[], None],
) -> None:
    """Answer 200 ``text/event-stream`` with ``frames``; if the client leaves before
    the last one, stop reading them and call ``on_disconnect``."""
    start_headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
        *headers,
    ]
    left = complete = False
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            left = not complete  # a client that leaves after the last frame has it all
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await send({"type": "http.response.start", "status": 200, "headers": start_headers})
        async with closing(frames):
            async for frame in frames:
                if not frame:
                    continue
                await send({"type": "http.response.body", "body": frame, "more_body": True})
        complete = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        tg.cancel_scope.cancel()
    if left:
        on_disconnect()


async def answer_lifespan(receive: Receive, send: Send) -> None:
    """An endpoint has nothing to start: it acknowledges the server's lifespan."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


@attrs.frozen(kw_only=True)
class Held:
    """A run parked for approvals between two requests: its handle, the seq of its
    first ``ApprovalRequested`` (the stream after the answer goes on from there) and
    the held calls."""

    handle: RunHandleLike[Any]
    seq: int
    call_ids: tuple[str, ...]
    key: str


@attrs.define
class HeldRuns:
    """The runs held for an answer, by key (an AG-UI thread, an AI SDK chat) and by call."""

    _by_key: dict[str, Held] = attrs.field(factory=dict)

    def put(self, held: Held) -> None:
        self._prune()
        self._by_key[held.key] = held

    def take(self, key: str) -> Held | None:
        """The run held under ``key`` (forgotten here: the caller answers it)."""
        self._prune()
        return self._by_key.pop(key, None)

    def take_call(self, call_id: str) -> Held | None:
        self._prune()
        for key, held in self._by_key.items():
            if call_id in held.call_ids:
                return self._by_key.pop(key)
        return None

    def __len__(self) -> int:
        self._prune()
        return len(self._by_key)

    def _prune(self) -> None:
        for key in [k for k, h in self._by_key.items() if h.handle.done]:
            del self._by_key[key]


async def answer_held(
    runtime: RuntimeLike, held: Held, answers: dict[str, tuple[bool, str | None]]
) -> None:
    """Approve or reject each held call (a call with no answer is rejected).

    ``KeyError`` before any answer when a held call is no longer pending (answered
    meanwhile by another request), so a run is not left half answered.
    """
    pending = {a.call_id for a in await runtime.pending_approvals(held.handle.run_id)}
    gone = [c for c in held.call_ids if c not in pending]
    if gone:
        raise KeyError(f"the call {gone[0]!r} no longer waits for an answer")
    for call_id in held.call_ids:
        approved, reason = answers.get(call_id, (False, "no answer was given"))
        if approved:
            await runtime.approve(held.handle.run_id, call_id)
        else:
            await runtime.reject(held.handle.run_id, call_id, reason or "rejected by the user")


def with_runtime(app: ASGIApp, runtime: RuntimeLike) -> ASGIApp:
    """``app`` served with ``runtime`` open for the server's lifespan: ``async with
    runtime`` when the server starts, closed when it stops (for a server that
    serves the endpoint alone, without a framework that owns the Runtime)."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        started = False
        try:
            async with runtime:
                started = True
                await send({"type": "lifespan.startup.complete"})
                while (await receive())["type"] != "lifespan.shutdown":
                    pass
        except Exception as e:
            if started:
                raise
            await send({"type": "lifespan.startup.failed", "message": repr(e)})
            return
        await send({"type": "lifespan.shutdown.complete"})

    return serve
