"""tether in a Starlette service on trio, served by hypercorn.

The same routes and rules as ``examples/fastapi_service.py``, on trio:
Starlette (and FastAPI) are built on anyio, so they run on trio under
hypercorn's trio worker, and so does tether. Install and run (offline: the
demo agents play a scripted model)::

    pip install 'tether[examples]'
    export TETHER_API_TOKENS="alice=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    python examples/trio_service.py              # http://127.0.0.1:8000
    python examples/trio_service.py --port 9000  # or TETHER_HOST / TETHER_PORT

The routes, the demo agents and the security rules (bearer tokens from
``TETHER_API_TOKENS``, runs private to their client, random run ids, body
limits, quotas, the shutdown drain) are those of ``examples/fastapi_service.py``:
both servers are thin shells around ``examples/_service.py``.

No TLS here: serve it behind a TLS-terminating proxy when it leaves the host.

Try it: the ``curl`` session of ``examples/fastapi_service.py`` works as is.
Each SSE message is ``id: <seq>``, ``event: <event class>`` and
``data: <json of tether.events.dump(event)>``. A client that reconnects with
``Last-Event-ID: <seq>`` gets the events after that one; a ``: keep-alive``
comment is sent after 15 s without an event.

The Runtime lives in the app's lifespan, which hypercorn runs in a trio task
for the life of the server. hypercorn closes connections before that
lifespan ends, so the shutdown trigger drains the service first
(``Service.drain``).

To embed it in a trio program of your own, ``await serve(app, host, port)`` (or
``nursery.start(serve, app, host, port, shutdown_trigger=event.wait)``, which
returns the bound URLs once the server listens).
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial

import trio
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import tether

# Run as a script, examples/ is sys.path[0] and this file is no package module.
if __package__:
    from ._service import Service, Settings, command_line, open_store
else:
    from _service import Service, Settings, command_line, open_store

__all__ = ["Service", "Settings", "create_app", "main", "make_config", "serve"]


def create_app(
    agents: Mapping[str, tether.Agent] | None = None,
    *,
    tokens: Mapping[str, str] | None,
    settings: Settings | None = None,
    store: tether.RunStore | None = None,
    lease_s: float = 30.0,
) -> Starlette:
    """The service, serving ``agents`` by name (default: ``demo``, ``slow``, ``guarded``).

    ``tokens`` is ``{client: token}``; ``None`` serves without authentication.
    ``store`` (a run store shared with other servers) makes runs durable, and
    ``lease_s`` is the length of their leases.
    The routes answer through ``examples/_service.py``, which the FastAPI
    example on asyncio shares; the app's ``state.service`` is that Service.
    """
    service = Service(agents, tokens=tokens, settings=settings, store=store, lease_s=lease_s)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with service.running():
            yield

    async def post_run(request: Request) -> Response:
        return await service.start_run(request)

    async def get_run(request: Request) -> Response:
        return await service.run_status(request, request.path_params["run_id"])

    async def get_run_events(request: Request) -> Response:
        return await service.run_events(request, request.path_params["run_id"])

    async def delete_run(request: Request) -> Response:
        return await service.cancel_run(request, request.path_params["run_id"])

    async def get_approvals(request: Request) -> Response:
        return await service.approvals(request, request.path_params["run_id"])

    async def post_approval(request: Request) -> Response:
        params = request.path_params
        return await service.answer(request, params["run_id"], params["call_id"])

    routes = [
        Route("/runs", post_run, methods=["POST"]),
        Route("/runs/{run_id}", get_run, methods=["GET"]),
        Route("/runs/{run_id}", delete_run, methods=["DELETE"]),
        Route("/runs/{run_id}/events", get_run_events, methods=["GET"]),
        Route("/runs/{run_id}/approvals", get_approvals, methods=["GET"]),
        Route("/runs/{run_id}/approvals/{call_id}", post_approval, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = service
    return app


def make_config(host: str = "127.0.0.1", port: int = 8000) -> Config:
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.graceful_timeout = 5.0  # after the drain: streams only have their last lines to send
    return config


async def until_signalled() -> None:
    """Return on the first SIGINT or SIGTERM (a second one interrupts as usual)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


async def serve(
    app: Starlette,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] = until_signalled,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on trio until ``shutdown_trigger`` returns and the service has drained.

    ``task_status`` gets the bound URLs.
    """
    from hypercorn.trio import serve as hypercorn_serve

    service: Service = app.state.service

    async def drained() -> None:
        await shutdown_trigger()
        await service.drain()

    await hypercorn_serve(
        app,  # type: ignore[arg-type]
        make_config(host, port),
        shutdown_trigger=drained,
        task_status=task_status,
    )


def main(argv: list[str] | None = None) -> None:
    args, tokens = command_line("tether Starlette service (trio, hypercorn)", argv)
    store = None if args.store is None else open_store(args.store, args.store_schema)
    app = create_app(
        tokens=tokens,
        settings=Settings(shutdown_grace_s=args.shutdown_grace),
        store=store,
        lease_s=args.lease,
    )
    trio.run(partial(serve, app, args.host, args.port))


if __name__ == "__main__":
    main()
