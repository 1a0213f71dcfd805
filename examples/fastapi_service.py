"""tether in a FastAPI service, on asyncio with uvicorn.

Install and run (offline: the demo agent plays a scripted model)::

    pip install 'tether[examples]'
    python examples/fastapi_service.py              # http://127.0.0.1:8000
    python examples/fastapi_service.py --port 9000  # or TETHER_HOST / TETHER_PORT

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
``data: <json of tether.events.dump(event)>``; ``tether.events.load`` reads the
data back. A client that reconnects with ``Last-Event-ID: <seq>`` gets the
events after that one. A comment line (``: keep-alive``) is sent after
``HEARTBEAT_S`` seconds without an event, so proxies keep the stream open.

The Runtime lives in the app's lifespan: it starts with the server and, on
shutdown, gives runs in flight ``shutdown_grace_s`` to finish, then cancels
them (each still ends with one ``RunFinished``).

The service keeps the handles of at most ``max_runs`` runs (``RunRegistry``):
runs in flight are always kept; starting a run past the bound drops the oldest
finished runs (their ids then answer 404), and when every kept run is still in
flight a new run is refused with 503.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Header, Request, Response
from pydantic import BaseModel

import tether

# Run as a script, examples/ is sys.path[0] and this file is no package module.
if __package__:
    from ._service import (
        MAX_RUNS,
        RunRegistry,
        cancel_run,
        default_agents,
        demo_agent,
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
        run_events,
        run_status,
        start_run,
    )

__all__ = ["MAX_RUNS", "RunRegistry", "RunRequest", "create_app", "demo_agent", "main"]


class RunRequest(BaseModel):
    input: str
    agent: str = "demo"


def create_app(
    agents: Mapping[str, tether.Agent] | None = None,
    *,
    max_runs: int = MAX_RUNS,
    shutdown_grace_s: float = 5.0,
) -> FastAPI:
    """The service, serving ``agents`` by name (default: ``demo`` and ``slow``).

    The routes answer through the functions of ``examples/_service.py``, which
    the Starlette example on trio shares.
    """
    known = dict(agents) if agents is not None else default_agents()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        async with tether.Runtime(shutdown_grace_s=shutdown_grace_s) as rt:
            # Lifespan state: every request sees it as request.state.runs.
            yield {"runs": RunRegistry(rt, max_runs)}

    app = FastAPI(title="tether service", lifespan=lifespan)

    @app.post("/runs", status_code=201)
    async def post_run(body: RunRequest, request: Request) -> Response:
        return start_run(request.state.runs, known, body.input, body.agent)

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str, request: Request) -> Response:
        return await run_status(request.state.runs, run_id)

    @app.get("/runs/{run_id}/events")
    async def get_run_events(
        run_id: str, request: Request, last_event_id: Annotated[str | None, Header()] = None
    ) -> Response:
        return run_events(request.state.runs, run_id, last_event_id)

    @app.delete("/runs/{run_id}", status_code=202)
    async def delete_run(run_id: str, request: Request) -> Response:
        return cancel_run(request.state.runs, run_id)

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="tether FastAPI service (asyncio, uvicorn)")
    parser.add_argument("--host", default=os.environ.get("TETHER_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("TETHER_PORT", "8000")))
    args = parser.parse_args(argv)
    uvicorn.run(create_app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
