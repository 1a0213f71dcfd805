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
import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

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


def last_event_id(request: Request) -> int:
    try:
        return int(request.headers.get("last-event-id", "-1"))
    except ValueError:
        return -1


async def status_json(handle: tether.RunHandle) -> dict[str, Any]:
    """``{"status": "running"}``, or the run's result."""
    if not handle.done:
        return {"run_id": handle.run_id, "status": "running"}
    return result_json(await handle.result())  # finished: returns at once


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


def not_found(run_id: str) -> JSONResponse:
    return JSONResponse({"detail": f"no run {run_id!r}"}, status_code=404)


# ------------------------------------------------------------------------ app


class RunRequest(BaseModel):
    input: str
    agent: str = "demo"


def create_app(
    agents: Mapping[str, tether.Agent] | None = None,
    *,
    max_runs: int = MAX_RUNS,
    shutdown_grace_s: float = 5.0,
) -> FastAPI:
    """The service, serving ``agents`` by name (default: ``demo`` and ``slow``)."""
    known = dict(agents) if agents is not None else default_agents()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        async with tether.Runtime(shutdown_grace_s=shutdown_grace_s) as rt:
            # Lifespan state: every request sees it as request.state.runs.
            yield {"runs": RunRegistry(rt, max_runs)}

    app = FastAPI(title="tether service", lifespan=lifespan)

    @app.post("/runs", status_code=201)
    async def start_run(body: RunRequest, request: Request) -> Any:
        agent = known.get(body.agent)
        if agent is None:
            return JSONResponse(
                {"detail": f"unknown agent {body.agent!r}; known: {sorted(known)}"},
                status_code=422,
            )
        handle = request.state.runs.start(agent, body.input)
        if handle is None:
            return JSONResponse({"detail": "too many runs in flight"}, status_code=503)
        return {"run_id": handle.run_id}

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str, request: Request) -> Any:
        handle = request.state.runs.get(run_id)
        return not_found(run_id) if handle is None else await status_json(handle)

    @app.get("/runs/{run_id}/events")
    async def run_events(run_id: str, request: Request) -> Any:
        handle = request.state.runs.get(run_id)
        if handle is None:
            return not_found(run_id)
        return StreamingResponse(
            SSEStream(handle.events(), last_event_id(request)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.delete("/runs/{run_id}", status_code=202)
    async def cancel_run(run_id: str, request: Request) -> Any:
        handle = request.state.runs.get(run_id)
        if handle is None:
            return not_found(run_id)
        handle.cancel("cancelled by client")
        return {"run_id": run_id, "status": "finished" if handle.done else "cancelling"}

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
