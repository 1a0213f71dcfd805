"""What the two service examples share: agents, security, the run registry, SSE, the routes.

``examples/fastapi_service.py`` (FastAPI, asyncio, uvicorn) and
``examples/trio_service.py`` (Starlette, trio, hypercorn) serve the same routes
with the same rules, because every route is a method of :class:`Service`
taking the Starlette request (and the path's ids) and answering with a
Starlette response; each example only wires these into its framework's
routes, its lifespan and its server's shutdown::

    start_run(request)                    POST   /runs                         201
    run_status(request, run_id)           GET    /runs/{id}                    200
    run_events(request, run_id)           GET    /runs/{id}/events             SSE
                                          (``?deltas=true``: live text and tool-call deltas too)
    cancel_run(request, run_id)           DELETE /runs/{id}                    202
    approvals(request, run_id)            GET    /runs/{id}/approvals          200
    answer(request, run_id, call_id)      POST   /runs/{id}/approvals/{call}   200

With a run store (``--store runs.db`` or ``--store postgresql://...``: the
Runtime's ``store=``), every server on the store serves every run on it: a
run started on one can be read, followed (``GET /runs/{id}/events``, replayed
from the store, then followed as its owner commits each round) and cancelled
on another, and a server that dies has its runs resumed by the others. Live
deltas (``?deltas=true``) come only from the server a run is in flight on. A
run held for approval parks in the store and leaves its server; any server
on the store lists its held calls and answers them, and the last answer
resumes the run on the server that gave it.

Security model:

* **Authentication.** Every request carries ``Authorization: Bearer <token>``.
  Tokens come from ``TETHER_API_TOKENS``, comma-separated; an entry
  ``client=token`` names the client, a bare ``token`` is its own client name.
  Tokens are compared in constant time (``hmac.compare_digest``). A missing or
  wrong token is 401 with ``WWW-Authenticate: Bearer``. Without the variable
  the examples refuse to start unless ``--insecure`` is given (then there is
  no authentication and every caller is the one client ``anonymous``).
* **Isolation.** A run is visible only to the client that started it; for any
  other client its id is 404 on every route, as an unknown id is.
* **Unguessable ids.** Run ids are ``run-`` and 144 random bits
  (``secrets.token_urlsafe``); the id the client gets is the runtime's. With a
  run store, the id also carries a tag, an HMAC of the random part keyed by
  the client's token, so that another server on the store knows whose run it
  is without storing the client (a run of another client is 404 there too).
* **Bounded requests.** A body must be ``application/json`` (else 415), at most
  ``max_body_bytes`` (64 KiB; 413, counted while it is read) and a JSON object
  with exactly the route's fields and types (else 422, saying which); the input
  is at most ``max_input_chars``.
* **Quotas.** At most ``max_in_flight_per_client`` runs in flight per client
  (429 with ``Retry-After``; other clients are unaffected) and
  ``max_in_flight`` in all (503 with ``Retry-After``).
* **Shutdown.** :meth:`Service.drain`, which each server calls on SIGINT or
  SIGTERM before it closes connections: no new runs (503), runs in flight get
  ``shutdown_grace_s`` to finish and are then cancelled, so they end
  ``cancelled``; every event stream sends its run's events up to RunFinished,
  then ``event: shutdown``, and closes.

Not covered: TLS (put the service behind a TLS-terminating proxy when it
leaves the host), token rotation without a restart, and rate limits other than
the in-flight quotas.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Any, Concatenate, ParamSpec

import anyio
import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

import tether
from tether.providers import (
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)

# The API tokens: TOKENS_ENV (``TETHER_API_TOKENS``) holds ``client=token,token2,...``,
# read as the run viewer reads them.
from tether.web import TOKENS_ENV, parse_tokens

#: The client name of every caller when the service runs with ``--insecure``.
ANONYMOUS = "anonymous"


@attrs.frozen(kw_only=True)
class Settings:
    """The service's bounds; the defaults suit the demo."""

    #: Runs whose handles are kept; past it the oldest finished runs are dropped.
    max_runs: int = 1000
    #: Runs in flight in all (503 past it) and per client (429 past it).
    max_in_flight: int = 64
    max_in_flight_per_client: int = 4
    #: Bytes of a request body (413 past it) and characters of a run's input.
    max_body_bytes: int = 64 * 1024
    max_input_chars: int = 16_000
    #: Seconds runs in flight get to finish on shutdown before they are cancelled.
    shutdown_grace_s: float = 5.0
    #: Seconds without an event after which an SSE stream gets a keep-alive comment.
    heartbeat_s: float = 15.0
    #: The ``Retry-After`` of a 429 or 503, in seconds.
    retry_after_s: int = 5

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(Settings):
            value = getattr(self, field.name)
            if not (value >= 0 if field.name == "shutdown_grace_s" else value > 0):
                raise ValueError(f"Settings({field.name}=...) must be positive, got {value!r}")


# --------------------------------------------------------------- the demo agents


@tether.tool
async def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


def demo_script(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """A scripted model: first it calls ``word_count`` on the input, then it answers."""
    last = request.messages[-1]
    counts = [b.content for b in last.content if isinstance(b, ToolResultBlock)]
    if not counts:
        return Reply(
            text="Let me count the words.",
            tool_calls=[ToolCall(name="word_count", arguments={"text": last.text})],
        )
    return Reply(text=f"Your input has {counts[0]} words.")


def ask_first(point: tether.PolicyPoint, subject: object) -> tether.Verdict | None:
    """A policy: every tool call waits for a human's approval."""
    return tether.Verdict.ask("a human approves each tool call") if point == "tool_call" else None


def demo_agent(
    name: str = "demo",
    latency_s: float = 0.05,
    *,
    approval: bool = False,
    chunk_latency_s: float | None = None,
) -> tether.Agent:
    """An offline agent: each model call takes ``latency_s``, so events arrive over time.

    Its text and tool-call arguments stream in pieces of 4 characters,
    ``chunk_latency_s`` apart (default: a twentieth of ``latency_s``). With
    ``approval``, its tool call waits for ``POST /runs/{id}/approvals/{call}``
    (at most 5 minutes: the run's ``timeout_s``).
    """
    if chunk_latency_s is None:
        chunk_latency_s = latency_s / 20
    provider = ScriptedProvider(
        demo_script, latency_s=latency_s, chunk_size=4, chunk_latency_s=chunk_latency_s
    )
    return tether.Agent(
        name=name,
        instructions="Count the words of the user's input with the word_count tool.",
        provider=provider,
        tools=[word_count],
        policies=[ask_first] if approval else [],
        limits=tether.Limits(timeout_s=300),
    )


def default_agents() -> dict[str, tether.Agent]:
    return {
        "demo": demo_agent(),
        "slow": demo_agent("slow", latency_s=5.0),
        "guarded": demo_agent("guarded", approval=True),
    }


# ------------------------------------------------------------------- refusals


class Refused(Exception):
    """A request the service answers with an error status and ``{"detail": ...}``."""

    def __init__(self, status: int, detail: str, headers: Mapping[str, str] | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, dict(headers or {})

    def response(self) -> JSONResponse:
        return JSONResponse({"detail": self.detail}, self.status, headers=self.headers)


_P = ParamSpec("_P")


def _answers(
    route: Callable[Concatenate[Service, Request, _P], Coroutine[Any, Any, Response]],
) -> Callable[Concatenate[Service, Request, _P], Coroutine[Any, Any, Response]]:
    """A route whose ``Refused`` becomes its response."""

    async def answer(
        self: Service, request: Request, /, *args: _P.args, **kwargs: _P.kwargs
    ) -> Response:
        try:
            return await route(self, request, *args, **kwargs)
        except Refused as refusal:
            return refusal.response()

    answer.__name__, answer.__doc__ = route.__name__, route.__doc__
    return answer


# ------------------------------------------------------------- authentication


class Authenticator:
    """Who a request comes from, by its bearer token; ``tokens=None``: no authentication."""

    def __init__(self, tokens: Mapping[str, str] | None) -> None:
        self._tokens = None if tokens is None else [(t.encode(), c) for c, t in tokens.items()]

    @property
    def insecure(self) -> bool:
        return self._tokens is None

    def key(self, client: str) -> bytes:
        """The secret that tags ``client``'s run ids: its token (``anonymous`` without any)."""
        for token, name in self._tokens or ():
            if name == client:
                return token
        return client.encode()

    def client(self, request: Request) -> str:
        if self._tokens is None:
            return ANONYMOUS
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            challenge = 'Bearer realm="tether"'
            raise Refused(401, "missing bearer token", {"WWW-Authenticate": challenge})
        presented = given.strip().encode()
        found = None
        for token, client in self._tokens:  # every token compared: no early exit
            if hmac.compare_digest(token, presented):
                found = client
        if found is None:
            challenge = 'Bearer realm="tether", error="invalid_token"'
            raise Refused(401, "invalid bearer token", {"WWW-Authenticate": challenge})
        return found


# ------------------------------------------------------------- runs and events


def new_run_id(key: bytes | None = None) -> str:
    """``run-`` and 144 random bits: an id nobody can guess from another.

    With ``key`` (a service on a run store), ``.`` and a tag binding the id to
    the client whose key it is (:func:`tagged_for`).
    """
    random_part = secrets.token_urlsafe(18)
    return f"run-{random_part}" if key is None else f"run-{random_part}.{_tag(key, random_part)}"


def _tag(key: bytes, random_part: str) -> str:
    digest = hmac.new(key, random_part.encode(), hashlib.sha256).digest()[:12]
    return base64.urlsafe_b64encode(digest).decode()


def tagged_for(key: bytes, run_id: str) -> bool:
    """Whether ``run_id`` was made by :func:`new_run_id` with ``key`` (in constant time)."""
    random_part, dot, tag = run_id.removeprefix("run-").partition(".")
    if not run_id.startswith("run-") or not dot:
        return False
    return hmac.compare_digest(tag.encode(), _tag(key, random_part).encode())


def open_store(spec: str, schema: str = "tether") -> tether.RunStore:
    """The run store of ``--store``: a PostgreSQL DSN (``postgresql://...``) or a SQLite path."""
    if spec.startswith(("postgresql://", "postgres://")):
        from tether.postgres import PostgresRunStore

        return PostgresRunStore(spec, schema=schema)
    return tether.SQLiteRunStore(spec)


@attrs.frozen
class _Entry:
    client: str
    handle: tether.RunHandle


class RunRegistry:
    """The service's runs by id, each with the client that started it.

    At most ``max_runs`` are kept: starting one past the bound drops the oldest
    finished runs (their ids then answer 404); runs in flight are always kept.
    """

    def __init__(
        self,
        rt: tether.Runtime,
        settings: Settings | None = None,
        *,
        store: tether.RunStore | None = None,
        key: Callable[[str], bytes] = str.encode,
    ) -> None:
        self.rt = rt
        self.settings = settings or Settings()
        self.store = store
        self._key = key
        self._entries: dict[str, _Entry] = {}  # oldest first

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, client: str, run_id: str) -> tether.RunHandle | None:
        """The run, if ``client`` started it (else ``None``, as for an unknown id)."""
        entry = self._entries.get(run_id)
        return entry.handle if entry is not None and entry.client == client else None

    async def find(self, client: str, run_id: str) -> tuple[tether.RunHandle, str | None] | None:
        """The run and, for one that is not this server's, its status in the run store.

        Another server's run is ``client``'s when its id carries ``client``'s tag.
        """
        handle = self.get(client, run_id)
        if handle is not None:
            if self.store is None or handle.done:
                return handle, None
            # Started here, but a run held for approval parks in the store and leaves
            # this Runtime: once parked (or answered and resumed elsewhere), read the store.
            stored = await self.store.get(run_id)
            if stored is None or stored.status == "running":
                return handle, None
            return self.rt.handle(run_id), stored.status
        if self.store is None or not tagged_for(self._key(client), run_id):
            return None
        stored = await self.store.get(run_id)
        return None if stored is None else (self.rt.handle(run_id), stored.status)

    def in_flight(self, client: str | None = None) -> list[tether.RunHandle]:
        """The runs not finished yet: all, or ``client``'s."""
        return [
            e.handle
            for e in self._entries.values()
            if not e.handle.done and client in (None, e.client)
        ]

    def start(self, client: str, agent: tether.Agent, input: str) -> tether.RunHandle:
        """Start a run for ``client``; ``Refused`` (429 or 503) past a quota."""
        s = self.settings
        retry = {"Retry-After": str(s.retry_after_s)}
        if len(self.in_flight(client)) >= s.max_in_flight_per_client:
            raise Refused(429, f"you have {s.max_in_flight_per_client} runs in flight", retry)
        if len(self.in_flight()) >= s.max_in_flight:
            raise Refused(503, "too many runs in flight", retry)
        if len(self._entries) >= s.max_runs:
            for run_id in [r for r, e in self._entries.items() if e.handle.done]:
                del self._entries[run_id]
                if len(self._entries) < s.max_runs:
                    break
            else:
                raise Refused(503, "too many runs in flight", retry)
        key = None if self.store is None else self._key(client)
        handle = self.rt.start(agent, input, run_id=new_run_id(key))
        self._entries[handle.run_id] = _Entry(client, handle)
        return handle


def sse_message(event: tether.events.Event) -> str:
    """One Server-Sent Events message for ``event``.

    A delta has no ``id:``: it is live only, so a client's ``Last-Event-ID``
    stays the seq of the last kept event it got, which is where a resumed
    stream picks up (deltas missed meanwhile are in that call's
    ``ModelCallFinished``).
    """
    data = json.dumps(tether.events.dump(event), separators=(",", ":"), default=str)
    if isinstance(event, tether.events.DELTA_TYPES):
        return f"event: {type(event).__name__}\ndata: {data}\n\n"
    return f"id: {event.seq}\nevent: {type(event).__name__}\ndata: {data}\n\n"


#: The last message of every event stream that ends while the server shuts down.
SHUTDOWN_MESSAGE = 'event: shutdown\ndata: {"reason":"server shutdown"}\n\n'


class SSEStream:
    """A run's events as SSE messages: replay from ``after + 1``, then live, until RunFinished.

    When the stream ends while the service shuts down (``closing()``), a last
    ``event: shutdown`` follows RunFinished. An iterator object, not an async
    generator, so a client that goes away leaves no generator to finalize.
    """

    def __init__(
        self,
        events: AsyncIterator[tether.events.Event],
        after: int = -1,
        heartbeat_s: float = 15.0,
        closing: Callable[[], bool] = lambda: False,
    ) -> None:
        self._events = events
        self._after = after
        self._heartbeat_s = heartbeat_s
        self._closing = closing
        self._ended = False

    def __aiter__(self) -> SSEStream:
        return self

    async def __anext__(self) -> str:
        while not self._ended:
            # Waiting for the next event can be cancelled without losing one.
            with anyio.move_on_after(self._heartbeat_s):
                try:
                    event = await self._events.__anext__()
                except StopAsyncIteration:
                    self._ended = True
                    break
                if event.seq > self._after or isinstance(event, tether.events.DELTA_TYPES):
                    return sse_message(event)
                continue
            return ": keep-alive\n\n"
        if self._closing():
            self._closing = lambda: False  # said once
            return SHUTDOWN_MESSAGE
        raise StopAsyncIteration


def result_json(result: tether.RunResult) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "status": "finished",
        "termination": result.termination.value,
        "ok": result.ok,
        "output": result.output,
        "error": result.error,
        "usage": attrs.asdict(result.usage),
        "summary": result.summary(),
    }


def _check_fields(
    body: Mapping[str, Any], required: Mapping[str, type], optional: Mapping[str, type]
) -> None:
    """422 unless ``body`` has every required field, no unknown one, each of its type."""
    unknown = sorted(set(body) - set(required) - set(optional))
    if unknown:
        raise Refused(422, f"unknown field(s): {', '.join(repr(k[:40]) for k in unknown[:5])}")
    for name in required:
        if name not in body:
            raise Refused(422, f"missing field {name!r}")
    names = {str: "a string", bool: "true or false"}
    for name, kind in {**required, **optional}.items():
        if name in body and not isinstance(body[name], kind):
            raise Refused(422, f"field {name!r} must be {names.get(kind, kind.__name__)}")


# ------------------------------------------------------------------ the service


class Service:
    """The service's state and routes: agents, tokens, runs, shutdown.

    :meth:`running` is the app's lifespan (it holds the Runtime); :meth:`drain`
    is what the server awaits on SIGINT/SIGTERM before it closes connections.
    """

    def __init__(
        self,
        agents: Mapping[str, tether.Agent] | None = None,
        *,
        tokens: Mapping[str, str] | None,
        settings: Settings | None = None,
        store: tether.RunStore | None = None,
        lease_s: float = 30.0,
    ) -> None:
        self.agents = dict(agents) if agents is not None else default_agents()
        self.store = store
        self.lease_s = lease_s
        self.auth = Authenticator(tokens)
        self.settings = settings or Settings()
        self.closing = False
        self._runs: RunRegistry | None = None

    @property
    def runs(self) -> RunRegistry:
        if self._runs is None:
            raise Refused(503, "the service is not running")
        return self._runs

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The Runtime, for the life of the server."""
        durable: dict[str, Any] = (
            {}
            if self.store is None
            else {
                "store": self.store,
                "agents": list(self.agents.values()),
                "lease_s": self.lease_s,
                "resume": True,  # the runs of a server on the store that died
            }
        )
        async with tether.Runtime(shutdown_grace_s=self.settings.shutdown_grace_s, **durable) as rt:
            registry = RunRegistry(rt, self.settings, store=self.store, key=self.auth.key)
            self._runs, self.closing = registry, False
            try:
                yield
            finally:
                self.closing = True

    async def drain(self) -> None:
        """Stop taking runs; after the grace, cancel the runs in flight; wait for their end.

        Event streams then send RunFinished and ``event: shutdown`` and close.
        """
        if self.closing or self._runs is None:
            return
        self.closing = True
        in_flight = self._runs.in_flight()
        with anyio.move_on_after(self.settings.shutdown_grace_s):
            for handle in in_flight:
                await handle.result()
        for handle in in_flight:
            handle.cancel("server shutdown")
        with anyio.move_on_after(5):  # a cancelled run ends at once; this guards a stuck tool
            for handle in in_flight:
                await handle.result()

    async def _run(self, request: Request, run_id: str) -> tuple[tether.RunHandle, str | None]:
        """The caller's run ``run_id`` and its stored status if another server has it:
        401 without a valid token, 404 if not the caller's."""
        found = await self.runs.find(self.auth.client(request), run_id)
        if found is None:
            raise Refused(404, f"no run {run_id[:80]!r}")
        return found

    async def _pending(self, handle: tether.RunHandle, run_id: str) -> list[dict[str, Any]]:
        """The run's tool calls waiting for an answer: held here, or parked in the store
        (with a store, a held run parks there and leaves its Runtime until answered)."""
        pending = (
            await handle.pending_approvals()
            if self.store is None
            else await self.runs.rt.pending_approvals(run_id)
        )
        return [
            {"call_id": p.call_id, "tool": p.name, "arguments": p.arguments, "reason": p.reason}
            for p in pending
        ]

    async def _read_object(self, request: Request) -> dict[str, Any]:
        """The JSON object of the body: 415, 413 (while reading) or 422 if not one."""
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media != "application/json":
            raise Refused(415, "the body must be JSON, sent with content-type: application/json")
        limit = self.settings.max_body_bytes
        too_large = Refused(413, f"the body is larger than {limit} bytes")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        body = bytearray()
        async with aclosing(request.stream()) as chunks:  # closed when we stop early
            async for chunk in chunks:
                body += chunk
                if len(body) > limit:
                    raise too_large
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            raise Refused(422, "the body is not valid JSON") from None
        if not isinstance(value, dict):
            raise Refused(422, "the body must be a JSON object")
        return value

    # ------------------------------------------------------------ the routes

    @_answers
    async def start_run(self, request: Request) -> Response:
        """``POST /runs`` ``{"input": "...", "agent": "demo"}`` -> 201 ``{"run_id": ...}``."""
        client = self.auth.client(request)
        body = await self._read_object(request)
        _check_fields(body, {"input": str}, {"agent": str})
        text, name = body["input"], body.get("agent", "demo")
        if not 0 < len(text) <= self.settings.max_input_chars:
            raise Refused(422, f"input must be 1 to {self.settings.max_input_chars} characters")
        agent = self.agents.get(name)
        if agent is None:
            raise Refused(422, f"unknown agent {name[:40]!r}; known: {sorted(self.agents)}")
        if self.closing:
            raise Refused(503, "the server is shutting down")
        handle = self.runs.start(client, agent, text)
        location = {"Location": f"/runs/{handle.run_id}"}
        return JSONResponse({"run_id": handle.run_id}, 201, headers=location)

    @_answers
    async def run_status(self, request: Request, run_id: str) -> Response:
        """``GET /runs/{id}``: ``{"status": "running"}``, or the run's result."""
        handle, elsewhere = await self._run(request, run_id)
        if elsewhere is not None and elsewhere != "finished":
            return JSONResponse({"run_id": run_id, "status": elsewhere})
        if elsewhere is None and not handle.done:
            return JSONResponse({"run_id": run_id, "status": "running"})
        return JSONResponse(result_json(await handle.result()))  # finished: returns at once

    @_answers
    async def run_events(self, request: Request, run_id: str) -> Response:
        """``GET /runs/{id}/events``: the events after ``Last-Event-ID`` (all without), as SSE.

        With ``?deltas=true`` the live ``TextDelta`` and ``ToolCallDelta`` events
        come too, from the moment of the request (a client behind gets them joined).
        """
        handle, elsewhere = await self._run(request, run_id)
        try:
            after = int(request.headers.get("last-event-id", "-1"))
        except ValueError:
            after = -1
        flag = request.query_params.get("deltas", "false").lower()
        if flag not in ("true", "false", "1", "0"):
            raise Refused(422, "deltas must be true or false")
        deltas = flag in ("true", "1") and elsewhere is None  # live only where it runs
        events = handle.events(deltas=deltas)
        stream = SSEStream(events, after, self.settings.heartbeat_s, lambda: self.closing)
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @_answers
    async def cancel_run(self, request: Request, run_id: str) -> Response:
        """``DELETE /runs/{id}``: cancel the run -> 202 (also when it has finished already)."""
        handle, elsewhere = await self._run(request, run_id)
        handle.cancel("cancelled by client")
        done = handle.done if elsewhere is None else elsewhere == "finished"
        status = "finished" if done else "cancelling"
        return JSONResponse({"run_id": run_id, "status": status}, status_code=202)

    @_answers
    async def approvals(self, request: Request, run_id: str) -> Response:
        """``GET /runs/{id}/approvals``: the tool calls waiting for an answer."""
        handle, _ = await self._run(request, run_id)
        return JSONResponse({"run_id": run_id, "approvals": await self._pending(handle, run_id)})

    @_answers
    async def answer(self, request: Request, run_id: str, call_id: str) -> Response:
        """``POST /runs/{id}/approvals/{call_id}`` ``{"approve": bool, "reason": "..."}``."""
        handle, _ = await self._run(request, run_id)
        body = await self._read_object(request)
        _check_fields(body, {"approve": bool}, {"reason": str})
        reason = body.get("reason") or "rejected by client"
        if len(reason) > 1000:
            raise Refused(422, "reason must be at most 1000 characters")
        if call_id not in {p["call_id"] for p in await self._pending(handle, run_id)}:
            raise Refused(404, f"no approval pending for call {call_id[:80]!r}")
        if self.store is not None:  # parked in the store: any server on it answers
            try:
                if body["approve"]:
                    await self.runs.rt.approve(run_id, call_id)
                else:
                    await self.runs.rt.reject(run_id, call_id, reason)
            except (KeyError, ValueError):  # answered meanwhile, by another request
                raise Refused(404, f"no approval pending for call {call_id[:80]!r}") from None
        elif body["approve"]:
            handle.approve(call_id)
        else:
            handle.reject(call_id, reason)
        answered = {"run_id": run_id, "call_id": call_id, "approved": body["approve"]}
        return JSONResponse(answered)


# ------------------------------------------------------------ the command line


def command_line(
    description: str, argv: list[str] | None = None
) -> tuple[argparse.Namespace, dict[str, str] | None]:
    """The options and the tokens (``None`` with ``--insecure``); exits if tokens are missing."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default=os.environ.get("TETHER_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("TETHER_PORT", "8000")))
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=float(os.environ.get("TETHER_SHUTDOWN_GRACE", "5")),
        help="seconds runs get to finish on shutdown before they are cancelled (default 5)",
    )
    parser.add_argument(
        "--store",
        default=os.environ.get("TETHER_STORE"),
        help="a run store shared with other servers: a SQLite path or a postgresql:// DSN",
    )
    parser.add_argument(
        "--store-schema",
        default=os.environ.get("TETHER_STORE_SCHEMA", "tether"),
        help="the PostgreSQL schema of the store's tables (default tether)",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=float(os.environ.get("TETHER_LEASE", "30")),
        help="seconds of a run's lease in the store (renewed every third; default 30)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help=f"serve without authentication when {TOKENS_ENV} is not set",
    )
    args = parser.parse_args(argv)
    if not args.shutdown_grace >= 0:
        parser.error("--shutdown-grace must be >= 0")
    if not args.lease > 0:
        parser.error("--lease must be > 0")
    spec = os.environ.get(TOKENS_ENV)
    if spec is None:
        if not args.insecure:
            sys.exit(
                f"error: {TOKENS_ENV} is not set (e.g. 'alice=<token>,bob=<token>'); "
                "pass --insecure to serve without authentication"
            )
        print("warning: serving without authentication (--insecure)", file=sys.stderr)
        return args, None
    try:
        return args, parse_tokens(spec)
    except ValueError as e:
        sys.exit(f"error: {e}")
