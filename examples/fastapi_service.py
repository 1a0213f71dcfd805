"""tether in a FastAPI service, on asyncio with uvicorn.

Install and run (offline: the demo agents play a scripted model)::

    pip install 'tether[examples]'
    export TETHER_API_TOKENS="alice=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    python examples/fastapi_service.py              # http://127.0.0.1:8000
    python examples/fastapi_service.py --port 9000  # or TETHER_HOST / TETHER_PORT

Routes (every one needs ``Authorization: Bearer <token>``)::

    POST   /runs              {"input": "...", "agent": "demo"}  -> 201 {"run_id": ...}
    GET    /runs/{id}/events  the run's events as Server-Sent Events: every event
                              from the first, then live ones, until RunFinished
                              (?deltas=true: the answer's text deltas too, as it streams)
    GET    /runs/{id}         {"status": "running"} or the result
    DELETE /runs/{id}         cancel the run -> 202
    GET    /runs/{id}/approvals            the tool calls waiting for approval
    POST   /runs/{id}/approvals/{call_id}  {"approve": true|false, "reason": "..."}

Agents: ``demo`` (answers in about 0.1 s), ``slow`` (5 s per model call) and
``guarded`` (its tool call waits for approval).

Security (the same in ``examples/trio_service.py``; see ``examples/_service.py``):

* ``TETHER_API_TOKENS`` holds the API tokens, comma-separated: ``client=token``
  names the client, a bare ``token`` is its own client name. Without it the
  service refuses to start, unless ``--insecure`` (no authentication at all:
  only for a trusted machine). A missing or wrong token is 401 with
  ``WWW-Authenticate: Bearer``; tokens are compared in constant time.
* A run belongs to the client that started it: any other client gets 404 for
  it on every route. Run ids are random (``run-`` and 144 bits).
* A body must be ``application/json`` (415), at most 64 KiB (413, counted while
  it is read) and a JSON object with the route's fields and types (422); an
  input is at most 16,000 characters.
* At most 4 runs in flight per client (429 with ``Retry-After``) and 64 in
  all (503). Quotas and sizes are ``Settings`` fields.
* Ctrl-C or SIGTERM: no new runs (503); runs in flight get ``--shutdown-grace``
  seconds (default 5) to finish, then are cancelled; each event stream sends
  its run's events up to RunFinished, then ``event: shutdown``, and closes;
  then the server exits.

No TLS here: serve it behind a TLS-terminating proxy when it leaves the host.

Try it::

    H="Authorization: Bearer $TOKEN"  # a token of TETHER_API_TOKENS
    curl -s -X POST localhost:8000/runs -H "$H" -H 'content-type: application/json' \\
         -d '{"input": "how many words is this"}'
    # {"run_id":"run-q3Vh9x0b..."}
    curl -N -H "$H" localhost:8000/runs/<id>/events
    # id: 0
    # event: RunStarted
    # data: {"run_id":"run-q3Vh9x0b...","seq":0,"round":0,...,"type":"RunStarted"}
    # ...
    # event: RunFinished
    curl -s -H "$H" localhost:8000/runs/<id>
    # {"run_id":...,"status":"finished","termination":"answered",
    #  "output":"Your input has 5 words.","usage":{...},"summary":"Model → Tools(1) → ..."}

    # A run whose tool call waits for approval:
    curl -s -X POST localhost:8000/runs -H "$H" -H 'content-type: application/json' \\
         -d '{"input": "count me", "agent": "guarded"}'
    curl -s -H "$H" localhost:8000/runs/<id>/approvals
    # {"run_id":...,"approvals":[{"call_id":"call_0_0","tool":"word_count",...}]}
    curl -s -X POST -H "$H" -H 'content-type: application/json' \\
         localhost:8000/runs/<id>/approvals/call_0_0 -d '{"approve": true}'

    # A slow run, cancelled while its events stream:
    curl -N -H "$H" localhost:8000/runs/<id>/events &
    curl -s -X DELETE -H "$H" localhost:8000/runs/<id>
    # the stream ends with RunFinished, termination "cancelled"

Each SSE message is ``id: <seq>``, ``event: <event class>`` and
``data: <json of tether.events.dump(event)>``; ``tether.events.load`` reads the
data back. A client that reconnects with ``Last-Event-ID: <seq>`` gets the
events after that one. A comment line (``: keep-alive``) is sent after 15 s
without an event, so proxies keep the stream open. With ``?deltas=true`` the
live ``TextDelta`` and ``ToolCallDelta`` events come between the others, from
the moment of the request, without an ``id:`` (they are not kept, so they are
not resumed: the text is in each call's ``ModelCallFinished``)::

    curl -N -H "$H" "localhost:8000/runs/<id>/events?deltas=true"
    # event: TextDelta
    # data: {"run_id":...,"text":"Let ","call_index":0,...,"type":"TextDelta"}

The Runtime lives in the app's lifespan. The service keeps the handles of at
most ``max_runs`` runs: starting one past the bound drops the oldest finished
runs (their ids then answer 404).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import uvicorn
from fastapi import FastAPI, Request, Response

import tether

# Run as a script, examples/ is sys.path[0] and this file is no package module.
if __package__:
    from ._service import Service, Settings, command_line, open_store
else:
    from _service import Service, Settings, command_line, open_store

__all__ = ["Server", "Service", "Settings", "create_app", "main"]


def create_app(
    agents: Mapping[str, tether.Agent] | None = None,
    *,
    tokens: Mapping[str, str] | None,
    settings: Settings | None = None,
    store: tether.RunStore | None = None,
    lease_s: float = 30.0,
) -> FastAPI:
    """The service, serving ``agents`` by name (default: ``demo``, ``slow``, ``guarded``).

    ``tokens`` is ``{client: token}``; ``None`` serves without authentication.
    ``store`` (a run store shared with other servers) makes runs durable, and
    ``lease_s`` is the length of their leases.
    The routes answer through ``examples/_service.py``, which the Starlette
    example on trio shares; the app's ``state.service`` is that Service.
    """
    service = Service(agents, tokens=tokens, settings=settings, store=store, lease_s=lease_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with service.running():
            yield

    # No /docs or /openapi.json: the API is the routes below, all behind the token.
    app = FastAPI(
        title="tether service", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.service = service

    @app.post("/runs", status_code=201)
    async def post_run(request: Request) -> Response:
        return await service.start_run(request)

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str, request: Request) -> Response:
        return await service.run_status(request, run_id)

    @app.get("/runs/{run_id}/events")
    async def get_run_events(run_id: str, request: Request) -> Response:
        return await service.run_events(request, run_id)

    @app.delete("/runs/{run_id}", status_code=202)
    async def delete_run(run_id: str, request: Request) -> Response:
        return await service.cancel_run(request, run_id)

    @app.get("/runs/{run_id}/approvals")
    async def get_approvals(run_id: str, request: Request) -> Response:
        return await service.approvals(request, run_id)

    @app.post("/runs/{run_id}/approvals/{call_id}")
    async def post_approval(run_id: str, call_id: str, request: Request) -> Response:
        return await service.answer(request, run_id, call_id)

    return app


class Server(uvicorn.Server):
    """uvicorn's server, which drains the service before it closes connections.

    uvicorn waits for open responses (event streams too) before it runs the
    lifespan's shutdown, so the runs must end first: :meth:`Service.drain`.
    """

    def __init__(self, app: FastAPI, **options: Any) -> None:
        # After the drain, open streams only have their last lines to send.
        options.setdefault("timeout_graceful_shutdown", 5)
        super().__init__(uvicorn.Config(app, **options))
        self.service: Service = app.state.service

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._forced, tg.cancel_scope)  # a second Ctrl-C ends the drain
            await self.service.drain()
            tg.cancel_scope.cancel()
        await super().shutdown(sockets)

    async def _forced(self, drain: anyio.CancelScope) -> None:
        while not self.force_exit:  # noqa: ASYNC110 - uvicorn sets a flag, no event
            await anyio.sleep(0.1)
        drain.cancel()


def main(argv: list[str] | None = None) -> None:
    args, tokens = command_line("tether FastAPI service (asyncio, uvicorn)", argv)
    store = None if args.store is None else open_store(args.store, args.store_schema)
    app = create_app(
        tokens=tokens,
        settings=Settings(shutdown_grace_s=args.shutdown_grace),
        store=store,
        lease_s=args.lease,
    )
    # uvicorn raises the Ctrl-C it handled again once it is done: that is no error.
    with contextlib.suppress(KeyboardInterrupt):
        Server(app, host=args.host, port=args.port).run()


if __name__ == "__main__":
    main()
