"""The run viewer's ASGI app (docs/guides/viewer.md): plain ASGI, no framework.

Routes, under wherever the app is mounted (``root_path``):

* ``GET /`` — the list (query: ``agent``, ``status``, ``termination``, ``since``,
  ``until`` as ``YYYY-MM-DDTHH:MM`` UTC, ``order``, ``after``: a page cursor).
* ``GET /runs/{id}`` — a run's page; ``GET /runs/{id}/fragment`` its head and
  timeline (what the page's script swaps in on news); ``GET /runs/{id}/stream``
  — ``text/event-stream``, one ``data:`` line ``{"events": n, "status": s}``
  whenever the stored run has more events or changed status, ``event: end`` once
  finished.
* ``POST /runs/{id}/approve`` / ``reject`` (``call_id``, ``reason``) / ``cancel``
  (``reason``): need ``runtime=`` and ``Authorization: Bearer <token>`` (or a
  ``token`` form field); 401 without a good one, 409 when the app is read-only.
* ``GET /static/...`` — the stylesheet and the script, from the package.
"""

from __future__ import annotations

import calendar
import hmac
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote

import anyio
import attrs

from tether.runtime import (
    Agent,
    ListableRunStore,
    RunNotFound,
    Runtime,
    RuntimeLike,
    StoredRun,
    TrailError,
    replay,
)

from ._render import View, list_page, run_header, run_page, timeline_html
from ._source import Filters, LiveSource, Source, StoreSource, TraceSource

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The environment variable with the tokens that may act: ``client=token,token2,...``.
TOKENS_ENV = "TETHER_API_TOKENS"
#: How long the stream waits for news before it looks again (seconds).
STREAM_WAIT_S = 1.0
#: How long one stream lasts at most (seconds): then it ends, and the browser's
#: EventSource reconnects. A server shutting down waits for no stream longer than this.
STREAM_MAX_S = 300.0

_STATIC = {"viewer.css": "text/css; charset=utf-8", "viewer.js": "text/javascript; charset=utf-8"}


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})


def parse_tokens(spec: str) -> dict[str, str]:
    """``TETHER_API_TOKENS``' value (``client=token`` or bare ``token`` entries, comma
    separated) as ``{client: token}``; a ``ValueError`` if malformed or empty."""
    clients: dict[str, str] = {}
    for number, entry in enumerate(spec.split(","), 1):
        if not entry.strip():
            continue
        client, sep, token = (part.strip() for part in entry.partition("="))
        if not sep:
            token = client
        if not client or not token:
            raise ValueError(f"{TOKENS_ENV}: entry {number} is not 'client=token' or 'token'")
        if client in clients or token in clients.values():
            raise ValueError(f"{TOKENS_ENV}: entry {number} repeats another entry's name or token")
        clients[client] = token
    if not clients:
        raise ValueError(f"{TOKENS_ENV} is set but holds no token")
    return clients


def app(
    *,
    store: ListableRunStore | None = None,
    trace: str | os.PathLike[str] | None = None,
    runtime: RuntimeLike | None = None,
    tokens: Mapping[str, str] | None = None,
    read_only: bool = False,
    redact: bool = False,
    limits: Mapping[str, Mapping[str, float | None]] | None = None,
    agents: Sequence[Agent[Any, Any]] = (),
) -> ASGIApp:
    """The run viewer, an ASGI app to serve or mount (see the module docstring).

    Give one of ``store`` (a run store that can list its runs: ``SQLiteRunStore``,
    ``tether.postgres.PostgresRunStore``) or ``trace`` (a JSONL file of events).
    ``runtime``: a Runtime on the same store, for the actions (approve, reject,
    cancel). ``tokens`` (``{client: token}``; by default ``TETHER_API_TOKENS``)
    guard the actions; with a ``runtime`` and no token anywhere the app refuses to
    be built unless ``read_only=True`` (which hides the actions). ``redact`` hides
    message contents (input, output, texts, arguments, results). ``limits``: per
    agent name, the ceilings to draw usage against (``{"max_steps": 10, ...}``).
    ``agents``: the agents whose runs a page offers to replay (:func:`tether.replay`:
    their code against the recorded run, offline; it changes nothing, so a read-only
    viewer offers it too; with tokens it needs one, as the actions do).
    """
    if (store is None) == (trace is None):
        raise ValueError("tether.web.app() needs one of store= or trace=")
    source: Source
    if store is not None:
        if not isinstance(store, ListableRunStore):
            raise TypeError(
                "tether.web.app(store=...) needs a run store that can list its runs "
                f"(tether.runtime.ListableRunStore), got {store!r}"
            )
        acting_runtime = runtime if isinstance(runtime, Runtime) else None
        source = StoreSource(store) if acting_runtime is None else LiveSource(store, acting_runtime)
    else:
        assert trace is not None
        source = TraceSource(trace)
    if runtime is not None and trace is not None:
        raise ValueError("tether.web.app(): actions (runtime=) need a store=, not a trace")
    if tokens is None and not read_only and os.environ.get(TOKENS_ENV, "").strip():
        tokens = parse_tokens(os.environ[TOKENS_ENV])
    acting = runtime is not None and not read_only
    if acting and not tokens:
        raise ValueError(
            f"tether.web.app(runtime=...) needs tokens= (or {TOKENS_ENV}) for its actions; "
            "pass read_only=True to serve without actions"
        )
    return _Viewer(
        source,
        runtime if acting else None,
        dict(tokens or {}),
        redact=redact,
        limits={k: dict(v) for k, v in (limits or {}).items()},
        agents={agent.name: agent for agent in agents},
    )


def standalone(
    *,
    store: ListableRunStore,
    agents: Sequence[Agent[Any, Any]] = (),
    tokens: Mapping[str, str] | None = None,
    redact: bool = False,
    limits: Mapping[str, Mapping[str, float | None]] | None = None,
) -> ASGIApp:
    """The viewer with a Runtime of its own on ``store`` (``tether serve`` without
    ``--read-only``): the app opens ``tether.Runtime(store=store, agents=agents)`` in its
    ASGI lifespan (on the server's event loop, asyncio or trio) and closes it at shutdown.

    Its actions: cancel asks a run's owner through the store; approve and reject answer
    a parked call, and the run resumes here when its agent is one of ``agents`` (else
    in any Runtime on the store with ``resume=True``). ``tokens``: as for :func:`app`
    (required, from here or ``TETHER_API_TOKENS``). The server must run the lifespan.
    """
    if tokens is None and os.environ.get(TOKENS_ENV, "").strip():
        tokens = parse_tokens(os.environ[TOKENS_ENV])
    if not tokens:
        raise ValueError(
            f"the viewer's actions need tokens (tokens= or {TOKENS_ENV}); "
            "serve it read-only with tether.web.app(store=...) instead"
        )
    if not isinstance(store, ListableRunStore):
        raise TypeError(f"needs a run store that can list its runs, got {store!r}")
    given = dict(tokens)
    kept = dict(limits or {})

    async def served(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            viewer = holder.get("viewer")
            if viewer is None:
                await _respond(send, 503, b'{"error": "not started"}', "application/json")
                return
            await viewer(scope, receive, send)
            return
        if (await receive())["type"] != "lifespan.startup":
            return
        started = False
        try:
            async with Runtime(store=store, agents=list(agents)) as rt:
                holder["viewer"] = app(
                    store=store,
                    runtime=rt,
                    tokens=given,
                    redact=redact,
                    limits=kept,
                    agents=agents,
                )
                await send({"type": "lifespan.startup.complete"})
                started = True
                while (await receive())["type"] != "lifespan.shutdown":
                    pass
                holder.pop("viewer", None)
        except Exception as exc:
            if started:
                raise
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})

    holder: dict[str, ASGIApp] = {}
    return served


class _Viewer:
    def __init__(
        self,
        source: Source,
        runtime: RuntimeLike | None,
        tokens: Mapping[str, str],
        *,
        redact: bool,
        limits: Mapping[str, Mapping[str, float | None]],
        agents: Mapping[str, Agent[Any, Any]],
    ) -> None:
        self.source = source
        self.agents = agents
        self.runtime = runtime
        self._tokens = [t.encode() for t in tokens.values()]
        self.redact = redact
        self.limits = limits
        #: The limits of the agents whose runs were seen in flight in ``runtime``.
        self._agent_limits: dict[str, dict[str, float | None]] = {}

    def view(self, scope: Scope) -> View:
        return View(
            root=str(scope.get("root_path", "")).rstrip("/"),
            redact=self.redact,
            actions=self.runtime is not None,
            replayable=frozenset(self.agents),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method = scope["method"]
        if method == "HEAD":
            send = _without_body(send)
        path = scope["path"]
        root = str(scope.get("root_path", ""))
        if root and path.startswith(root):
            path = path[len(root) :]
        path = path or "/"
        try:
            if path == "/" and method in ("GET", "HEAD"):
                await self.listing(scope, send)
            elif path.startswith("/static/") and method in ("GET", "HEAD"):
                await _static(path.removeprefix("/static/"), send)
            elif path.startswith("/runs/"):
                rest = path.removeprefix("/runs/")
                run_id, _, verb = rest.partition("/")
                run_id = unquote(run_id)
                if method in ("GET", "HEAD") and verb == "":
                    await self.run(scope, send, run_id)
                elif method in ("GET", "HEAD") and verb == "fragment":
                    await self.fragment(scope, send, run_id)
                elif method == "GET" and verb == "stream":
                    await self.stream(send, receive, run_id)
                elif method == "POST" and verb in ("approve", "reject", "cancel"):
                    await self.act(scope, receive, send, run_id, verb)
                elif method == "POST" and verb == "replay":
                    await self.replay(scope, receive, send, run_id)
                else:
                    raise _Refused(405 if verb in ("", "approve") else 404, "not found")
            else:
                raise _Refused(404, "not found")
        except _Refused as refused:
            await _respond(
                send,
                refused.status,
                json.dumps({"error": str(refused)}).encode(),
                "application/json",
                refused.headers,
            )
        except ValueError as exc:
            await _respond(send, 400, json.dumps({"error": str(exc)}).encode(), "application/json")

    # ------------------------------------------------------------------ pages

    async def listing(self, scope: Scope, send: Send) -> None:
        filters = _filters(scope)
        runs = await self.source.page(filters)
        agents = sorted({r.agent for r in runs.runs})
        html = list_page(self.view(scope), runs, filters, agents)
        await _respond(send, 200, html.encode(), "text/html; charset=utf-8")

    def _limits(self, run: StoredRun) -> Mapping[str, float | None]:
        """The ceilings to draw the run's usage against: ``limits=``' for its agent, else
        its agent's own when the serving Runtime runs it."""
        given = self.limits.get(run.agent)
        if given is not None:
            return given
        runtime = self.runtime
        handle = runtime.in_flight(run.run_id) if isinstance(runtime, Runtime) else None
        if handle is not None:  # kept for the agent's runs no longer in flight here
            limits = handle.agent.limits
            self._agent_limits[run.agent] = {
                field.name: getattr(limits, field.name)
                for field in attrs.fields(type(limits))
                if field.name.startswith("max_")
            }
        return self._agent_limits.get(run.agent, {})

    async def _found(self, run_id: str) -> StoredRun:
        run = await self.source.run(run_id)
        if run is None:
            raise _Refused(404, f"no run {run_id!r}")
        return run

    async def run(self, scope: Scope, send: Send, run_id: str) -> None:
        run = await self._found(run_id)
        events = await self.source.events(run_id)
        html = run_page(
            self.view(scope),
            run,
            events,
            self._limits(run),
            live=self.source.live,
        )
        await _respond(send, 200, html.encode(), "text/html; charset=utf-8")

    async def fragment(self, scope: Scope, send: Send, run_id: str) -> None:
        run = await self._found(run_id)
        events = await self.source.events(run_id)
        view = self.view(scope)
        body = json.dumps(
            {
                "head": run_header(view, run, self._limits(run), events),
                "timeline": timeline_html(view, run, events),
                "events": len(events),
                "status": run.status,
            }
        )
        await _respond(send, 200, body.encode(), "application/json")

    async def stream(self, send: Send, receive: Receive, run_id: str) -> None:
        run = await self._found(run_id)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        async with anyio.create_task_group() as tg:

            async def until_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(until_gone)
            with anyio.move_on_after(STREAM_MAX_S):
                await self._follow(send, run)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()

    async def _follow(self, send: Send, run: StoredRun) -> None:
        """Send the run's news until it finishes (then ``event: end``)."""
        sent: tuple[int, str] | None = None
        seen = 0
        while True:
            news = await self.source.news(run, seen)
            if news != sent:
                sent, seen = news, news[0]
                data = json.dumps({"events": news[0], "status": news[1]})
                await _chunk(send, f"data: {data}\n\n".encode())
            if run.status == "finished" or not self.source.live:
                await _chunk(send, b"event: end\ndata: {}\n\n")
                return
            await self.source.wait(run.run_id, seen, STREAM_WAIT_S)
            run = await self._found(run.run_id)

    # ---------------------------------------------------------------- actions

    def _authorized(self, scope: Scope, form: Mapping[str, str]) -> None:
        headers = dict(scope.get("headers") or ())
        scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        presented = given.strip() if scheme.lower() == "bearer" else ""
        presented = presented or form.get("token", "")
        if not presented:
            raise _Refused(
                401, "missing bearer token", {"WWW-Authenticate": 'Bearer realm="tether"'}
            )
        found = False
        for token in self._tokens:  # every token compared: no early exit
            found |= hmac.compare_digest(token, presented.encode())
        if not found:
            raise _Refused(
                401,
                "invalid bearer token",
                {"WWW-Authenticate": 'Bearer realm="tether", error="invalid_token"'},
            )

    async def act(self, scope: Scope, receive: Receive, send: Send, run_id: str, verb: str) -> None:
        form = await _form(receive)
        if self.runtime is None:
            raise _Refused(409, "this viewer is read-only (no runtime=, or read_only=True)")
        self._authorized(scope, form)
        await self._found(run_id)
        reason = form.get("reason", "").strip() or None
        try:
            if verb == "cancel":
                self.runtime.handle(run_id).cancel(reason or "cancelled in the viewer")
            else:
                call_id = form.get("call_id", "")
                if not call_id:
                    raise ValueError("call_id is missing")
                if verb == "approve":
                    await self.runtime.approve(run_id, call_id)
                else:
                    await self.runtime.reject(run_id, call_id, reason or "rejected in the viewer")
        except RunNotFound as exc:
            raise _Refused(404, str(exc)) from None
        except KeyError as exc:
            raise _Refused(409, str(exc.args[0]) if exc.args else "not pending") from None
        except ValueError as exc:
            raise _Refused(409, str(exc)) from None
        await _respond(
            send, 200, json.dumps({"ok": True, "action": verb}).encode(), "application/json"
        )

    async def replay(self, scope: Scope, receive: Receive, send: Send, run_id: str) -> None:
        """Replay a run against its agent's code (:func:`tether.replay`), offline: the
        answer says ``identical`` or where it first diverged."""
        form = await _form(receive)
        if self._tokens:
            self._authorized(scope, form)
        run = await self._found(run_id)
        agent = self.agents.get(run.agent)
        if agent is None:
            raise _Refused(
                409,
                f"this viewer has no agent {run.agent!r} to replay the run with "
                "(tether.web.app(agents=[...]), tether serve --agent MODULE:AGENT)",
            )
        if run.status != "finished":
            raise _Refused(409, f"run {run_id!r} has not finished: replay a finished run")
        source = self.source
        trail: Any = source.path if isinstance(source, TraceSource) else None
        if isinstance(source, StoreSource):
            trail = source.store
        try:
            found = await replay(trail, agent, run_id=run_id)
        except TrailError as exc:
            raise _Refused(409, str(exc)) from None
        divergence = found.divergence
        answer = {
            "ok": True,
            "action": "replay",
            "identical": found.identical,
            "message": "identical" if divergence is None else str(divergence),
            "divergence": None
            if divergence is None
            else {
                "round": divergence.round,
                "stage": divergence.stage,
                "fields": divergence.fields,
            },
            "notes": list(found.notes),
        }
        await _respond(send, 200, json.dumps(answer, default=str).encode(), "application/json")


# ---------------------------------------------------------------- plumbing


def _filters(scope: Scope) -> Filters:
    query = {
        k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items() if v[-1]
    }
    status = query.get("status")
    order = query.get("order", "newest")
    return Filters(
        agent=query.get("agent"),
        status=status,  # checked by the listing
        termination=query.get("termination"),
        since=_time(query.get("since"), "since"),
        until=_time(query.get("until"), "until"),
        order=order,
        after=query.get("after"),
        sort=query.get("sort", "started"),  # checked by the listing
    )


def _time(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    for shape in ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            return float(calendar.timegm(time.strptime(value, shape)))
        except ValueError:
            continue
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name} must be a time (YYYY-MM-DDTHH:MM, UTC), got {value!r}") from None


async def _form(receive: Receive) -> dict[str, str]:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        body += message.get("body", b"")
        if len(body) > 65536:
            raise _Refused(413, "request body too large")
        if not message.get("more_body"):
            break
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    headers: Mapping[str, str] | None = None,
) -> None:
    more = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff"),
                *more,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _without_body(send: Send) -> Send:
    """``send`` for a HEAD request: the headers as for GET, no body."""

    async def headless(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return headless


async def _chunk(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _static(name: str, send: Send) -> None:
    if name not in _STATIC:
        raise _Refused(404, "not found")
    body = resources.files("tether.web").joinpath("static", name).read_bytes()
    await _respond(send, 200, body, _STATIC[name], {"cache-control": "max-age=300"})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


__all__ = ["STREAM_MAX_S", "STREAM_WAIT_S", "TOKENS_ENV", "app", "parse_tokens", "standalone"]
