"""tether in a Starlette service on trio, served by hypercorn.

The same routes as ``examples/fastapi_service.py``, on trio: Starlette (and
FastAPI) are built on anyio, so they run on trio under hypercorn's trio
worker, and so does tether. Install and run (offline: the demo agent plays a
scripted model)::

    pip install 'tether[examples]'
    python examples/trio_service.py              # http://127.0.0.1:8000
    python examples/trio_service.py --port 9000  # or TETHER_HOST / TETHER_PORT

Routes::

    POST   /runs              {"input": "...", "agent": "demo"}  -> 201 {"run_id": ...}
    GET    /runs/{id}/events  the run's events as Server-Sent Events: every event
                              from the first, then live ones, until RunFinished
    GET    /runs/{id}         {"status": "running"} or the result
    DELETE /runs/{id}         cancel the run -> 202

Try it::

    curl -s -X POST localhost:8000/runs -H 'content-type: application/json' \\
         -d '{"input": "how many words is this"}'
    # {"run_id":"run-3f2a1c-1"}
    curl -N localhost:8000/runs/run-3f2a1c-1/events
    # id: 0
    # event: RunStarted
    # data: {"run_id":"run-3f2a1c-1","seq":0,"round":0,...,"type":"RunStarted"}
    # ...
    # event: RunFinished
    curl -s localhost:8000/runs/run-3f2a1c-1
    # {"run_id":...,"status":"finished","termination":"answered",
    #  "output":"Your input has 5 words.","usage":{...},"summary":"Model → Tools(1) → ..."}

    # A slow agent (5 s per model call), cancelled while its events stream:
    curl -s -X POST localhost:8000/runs -H 'content-type: application/json' \\
         -d '{"input": "take your time", "agent": "slow"}'
    curl -N localhost:8000/runs/<id>/events &
    curl -s -X DELETE localhost:8000/runs/<id>
    # the stream ends with RunFinished, termination "cancelled"

Each SSE message is ``id: <seq>``, ``event: <event class>`` and
``data: <json of tether.events.dump(event)>``. A client that reconnects with
``Last-Event-ID: <seq>`` gets the events after that one; a ``: keep-alive``
comment is sent after ``HEARTBEAT_S`` seconds without an event.

The Runtime lives in the app's lifespan, which hypercorn runs in a trio task
for the life of the server. Ctrl-C or SIGTERM shuts the server down
gracefully: runs in flight get ``shutdown_grace_s`` to finish, then are
cancelled (each still ends with one ``RunFinished``).

The service keeps the handles of at most ``max_runs`` runs (``RunRegistry``):
runs in flight are always kept; starting a run past the bound drops the oldest
finished runs (their ids then answer 404), and when every kept run is still in
flight a new run is refused with 503.

To embed it in a trio program of your own, ``await serve(host, port)`` (or
``nursery.start(serve, host, port, shutdown_trigger=event.wait)``, which
returns the bound URLs once the server listens).
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import tether

# Run as a script, examples/ is sys.path[0] and this file is no package module.
if __package__:
    from ._service import (
        MAX_RUNS,
        RunRegistry,
        cancel_run,
        default_agents,
        demo_agent,
        read_json,
        run_events,
        run_status,
        start_run,
    )
else:
    from _service import (
        MAX_RUNS,
        RunRegistry,
        cancel_run,
        default_agents,
        demo_agent,
        read_json,
        run_events,
        run_status,
        start_run,
    )

__all__ = ["MAX_RUNS", "RunRegistry", "create_app", "demo_agent", "main", "make_config", "serve"]


def create_app(
    agents: Mapping[str, tether.Agent] | None = None,
    *,
    max_runs: int = MAX_RUNS,
    shutdown_grace_s: float = 5.0,
) -> Starlette:
    """The service, serving ``agents`` by name (default: ``demo`` and ``slow``).

    The routes answer through the functions of ``examples/_service.py``, which
    the FastAPI example on asyncio shares.
    """
    known = dict(agents) if agents is not None else default_agents()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with tether.Runtime(shutdown_grace_s=shutdown_grace_s) as rt:
            # Lifespan state: every request sees it as request.state.runs.
            yield {"runs": RunRegistry(rt, max_runs)}

    async def post_run(request: Request) -> Response:
        body = await read_json(request)
        return start_run(request.state.runs, known, body.get("input"), body.get("agent", "demo"))

    async def get_run(request: Request) -> Response:
        return await run_status(request.state.runs, request.path_params["run_id"])

    async def get_run_events(request: Request) -> Response:
        run_id, last_event_id = request.path_params["run_id"], request.headers.get("last-event-id")
        return run_events(request.state.runs, run_id, last_event_id)

    async def delete_run(request: Request) -> Response:
        return cancel_run(request.state.runs, request.path_params["run_id"])

    routes = [
        Route("/runs", post_run, methods=["POST"]),
        Route("/runs/{run_id}", get_run, methods=["GET"]),
        Route("/runs/{run_id}", delete_run, methods=["DELETE"]),
        Route("/runs/{run_id}/events", get_run_events, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def make_config(host: str = "127.0.0.1", port: int = 8000) -> Config:
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.graceful_timeout = 5.0
    return config


async def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    app: Starlette | None = None,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve on trio until ``shutdown_trigger`` returns; ``task_status`` gets the bound URLs."""
    from hypercorn.trio import serve as hypercorn_serve

    await hypercorn_serve(
        app or create_app(),  # type: ignore[arg-type]
        make_config(host, port),
        shutdown_trigger=shutdown_trigger,
        task_status=task_status,
    )


async def _until_signalled() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tether Starlette service (trio, hypercorn)")
    parser.add_argument("--host", default=os.environ.get("TETHER_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("TETHER_PORT", "8000")))
    args = parser.parse_args(argv)
    trio.run(lambda: serve(args.host, args.port, shutdown_trigger=_until_signalled))


if __name__ == "__main__":
    main()
