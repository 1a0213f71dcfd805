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
import json
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import trio
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import tether
from tether.providers import (
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)

#: Runs whose handles the service keeps, by default (see ``RunRegistry``).
MAX_RUNS = 1000
#: Seconds without an event after which an SSE stream gets a keep-alive comment.
HEARTBEAT_S = 15.0


# --------------------------------------------------------------- the demo agent


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


def demo_agent(name: str = "demo", latency_s: float = 0.05) -> tether.Agent:
    """An offline agent: each model call takes ``latency_s``, so events arrive over time."""
    return tether.Agent(
        name=name,
        instructions="Count the words of the user's input with the word_count tool.",
        provider=ScriptedProvider(demo_script, latency_s=latency_s),
        tools=[word_count],
    )


def default_agents() -> dict[str, tether.Agent]:
    return {"demo": demo_agent(), "slow": demo_agent("slow", latency_s=5.0)}


# ------------------------------------------------------------- runs and events


class RunRegistry:
    """The handles of the service's runs, by id, bounded at ``max_runs``.

    Runs in flight are always kept. Starting a run past the bound drops the
    oldest finished runs; when every kept run is in flight, :meth:`start`
    returns ``None`` (the service answers 503).
    """

    def __init__(self, rt: tether.Runtime, max_runs: int = MAX_RUNS) -> None:
        if max_runs < 1:
            raise ValueError(f"max_runs must be >= 1, got {max_runs!r}")
        self.rt = rt
        self.max_runs = max_runs
        self._handles: dict[str, tether.RunHandle] = {}  # oldest first

    def __len__(self) -> int:
        return len(self._handles)

    def get(self, run_id: str) -> tether.RunHandle | None:
        return self._handles.get(run_id)

    def start(self, agent: tether.Agent, input: str) -> tether.RunHandle | None:
        if len(self._handles) >= self.max_runs:
            for run_id in [rid for rid, h in self._handles.items() if h.done]:
                del self._handles[run_id]
                if len(self._handles) < self.max_runs:
                    break
            else:
                return None
        handle = self.rt.start(agent, input)
        self._handles[handle.run_id] = handle
        return handle


def sse_message(event: tether.events.Event) -> str:
    """One Server-Sent Events message for ``event``."""
    data = json.dumps(tether.events.dump(event), separators=(",", ":"), default=str)
    return f"id: {event.seq}\nevent: {type(event).__name__}\ndata: {data}\n\n"


class SSEStream:
    """A run's events as SSE messages: replay from ``after + 1``, then live, until RunFinished.

    An iterator object, not an async generator, so a client that goes away
    (the server cancels the response) leaves no generator to finalize.
    """

    def __init__(
        self,
        events: AsyncIterator[tether.events.Event],
        after: int = -1,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self._events = events
        self._after = after
        self._heartbeat_s = heartbeat_s

    def __aiter__(self) -> SSEStream:
        return self

    async def __anext__(self) -> str:
        while True:
            # Waiting for the next event can be cancelled without losing one.
            with anyio.move_on_after(self._heartbeat_s):
                event = await self._events.__anext__()
                if event.seq > self._after:
                    return sse_message(event)
                continue
            return ": keep-alive\n\n"


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


# ------------------------------------------------------------------------ app


def create_app(
    agents: Mapping[str, tether.Agent] | None = None,
    *,
    max_runs: int = MAX_RUNS,
    shutdown_grace_s: float = 5.0,
) -> Starlette:
    """The service, serving ``agents`` by name (default: ``demo`` and ``slow``)."""
    known = dict(agents) if agents is not None else default_agents()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with tether.Runtime(shutdown_grace_s=shutdown_grace_s) as rt:
            # Lifespan state: every request sees it as request.state.runs.
            yield {"runs": RunRegistry(rt, max_runs)}

    def lookup(request: Request) -> tether.RunHandle | Response:
        run_id = request.path_params["run_id"]
        handle: tether.RunHandle | None = request.state.runs.get(run_id)
        if handle is None:
            return JSONResponse({"detail": f"no run {run_id!r}"}, status_code=404)
        return handle

    async def start_run(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("input"), str):
            return JSONResponse({"detail": 'expected {"input": "..."}'}, status_code=422)
        name = body.get("agent", "demo")
        agent = known.get(name) if isinstance(name, str) else None
        if agent is None:
            return JSONResponse(
                {"detail": f"unknown agent {name!r}; known: {sorted(known)}"}, status_code=422
            )
        handle = request.state.runs.start(agent, body["input"])
        if handle is None:
            return JSONResponse({"detail": "too many runs in flight"}, status_code=503)
        return JSONResponse({"run_id": handle.run_id}, status_code=201)

    async def get_run(request: Request) -> Response:
        handle = lookup(request)
        if isinstance(handle, Response):
            return handle
        if not handle.done:
            return JSONResponse({"run_id": handle.run_id, "status": "running"})
        return JSONResponse(result_json(await handle.result()))

    async def run_events(request: Request) -> Response:
        handle = lookup(request)
        if isinstance(handle, Response):
            return handle
        try:
            after = int(request.headers.get("last-event-id", "-1"))
        except ValueError:
            after = -1
        return StreamingResponse(
            SSEStream(handle.events(), after),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def cancel_run(request: Request) -> Response:
        handle = lookup(request)
        if isinstance(handle, Response):
            return handle
        handle.cancel("cancelled by client")
        status = "finished" if handle.done else "cancelling"
        return JSONResponse({"run_id": handle.run_id, "status": status}, status_code=202)

    routes = [
        Route("/runs", start_run, methods=["POST"]),
        Route("/runs/{run_id}", get_run, methods=["GET"]),
        Route("/runs/{run_id}", cancel_run, methods=["DELETE"]),
        Route("/runs/{run_id}/events", run_events, methods=["GET"]),
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
