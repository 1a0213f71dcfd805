"""What the two service examples share: the demo agent, the run registry, SSE, the answers.

``examples/fastapi_service.py`` (FastAPI, asyncio, uvicorn) and
``examples/trio_service.py`` (Starlette, trio, hypercorn) serve the same routes.
FastAPI is built on Starlette and both run on anyio, so everything here is plain
Starlette and anyio: each example only wires these into its framework's routes,
its lifespan and its server.

The route logic is a function per route, taking the run registry (the app's
lifespan state) and the request's already parsed parts, and answering with a
Starlette response::

    start_run(runs, agents, input, agent)  POST   /runs             201, 422 or 503
    run_status(runs, run_id)               GET    /runs/{id}        200 or 404
    run_events(runs, run_id, last_id)      GET    /runs/{id}/events SSE or 404
    cancel_run(runs, run_id)               DELETE /runs/{id}        202 or 404
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

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


# ---------------------------------------------------------------- the routes


async def read_json(request: Request) -> dict[str, Any]:
    """The request's body, if it is a JSON object, else ``{}`` (``start_run`` answers 422)."""
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def start_run(
    runs: RunRegistry, agents: Mapping[str, tether.Agent], input: object, agent: object = "demo"
) -> JSONResponse:
    """``POST /runs``: start ``agents[agent]`` on ``input`` -> 201 ``{"run_id": ...}``."""
    if not isinstance(input, str):
        return JSONResponse({"detail": 'expected {"input": "..."}'}, status_code=422)
    chosen = agents.get(agent) if isinstance(agent, str) else None
    if chosen is None:
        return JSONResponse(
            {"detail": f"unknown agent {agent!r}; known: {sorted(agents)}"}, status_code=422
        )
    handle = runs.start(chosen, input)
    if handle is None:
        return JSONResponse({"detail": "too many runs in flight"}, status_code=503)
    return JSONResponse({"run_id": handle.run_id}, status_code=201)


def not_found(run_id: str) -> JSONResponse:
    return JSONResponse({"detail": f"no run {run_id!r}"}, status_code=404)


async def run_status(runs: RunRegistry, run_id: str) -> JSONResponse:
    """``GET /runs/{id}``: ``{"status": "running"}``, or the run's result."""
    handle = runs.get(run_id)
    if handle is None:
        return not_found(run_id)
    if not handle.done:
        return JSONResponse({"run_id": run_id, "status": "running"})
    return JSONResponse(result_json(await handle.result()))  # finished: returns at once


def run_events(runs: RunRegistry, run_id: str, last_event_id: str | None = None) -> Response:
    """``GET /runs/{id}/events``: the events after ``Last-Event-ID`` (all, without one), as SSE."""
    handle = runs.get(run_id)
    if handle is None:
        return not_found(run_id)
    try:
        after = int(last_event_id) if last_event_id is not None else -1
    except ValueError:
        after = -1
    return StreamingResponse(
        SSEStream(handle.events(), after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def cancel_run(runs: RunRegistry, run_id: str) -> JSONResponse:
    """``DELETE /runs/{id}``: cancel the run -> 202 (also when it has finished already)."""
    handle = runs.get(run_id)
    if handle is None:
        return not_found(run_id)
    handle.cancel("cancelled by client")
    status = "finished" if handle.done else "cancelling"
    return JSONResponse({"run_id": run_id, "status": status}, status_code=202)
