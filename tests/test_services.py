"""The service examples, served for real on 127.0.0.1 and driven over HTTP.

``examples/fastapi_service.py`` runs under uvicorn on asyncio and
``examples/trio_service.py`` under hypercorn on trio, each in this process on
a free port; an ``httpx.AsyncClient`` drives them over the socket and reads
the event streams with httpx-sse.
"""

from __future__ import annotations

import json
import socket
from functools import partial

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from tether import events as ev

pytestmark = pytest.mark.anyio

#: Each service test, servers up and down included, ends within this.
BOUND_S = 10


def load(sse: ServerSentEvent) -> ev.Event:
    return ev.load(json.loads(sse.data))


async def read_events(
    client: httpx.AsyncClient, run_id: str, headers: dict[str, str] | None = None
) -> list[ServerSentEvent]:
    url = f"/runs/{run_id}/events"
    async with aconnect_sse(client, "GET", url, headers=dict(headers or {})) as source:
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
        return [sse async for sse in source.aiter_sse()]


def check_trail(messages: list[ServerSentEvent], run_id: str) -> list[ev.Event]:
    """SSE ids, names and data agree, and the trail is one whole run."""
    events = [load(m) for m in messages]
    assert [m.id for m in messages] == [str(e.seq) for e in events]
    assert [m.event for m in messages] == [type(e).__name__ for e in events]
    assert {e.run_id for e in events} == {run_id}
    assert [e.seq for e in events] == list(range(len(events))), "gap-free seq from 0"
    assert isinstance(events[0], ev.RunStarted)
    assert isinstance(events[-1], ev.RunFinished)
    assert sum(isinstance(e, ev.RunFinished) for e in events) == 1
    return events


async def exercise(base_url: str) -> None:
    """The same conversation with either service."""
    async with httpx.AsyncClient(base_url=base_url, timeout=5) as client:
        # Unknown ids and agents.
        for method in ("GET", "DELETE"):
            response = await client.request(method, "/runs/nope")
            assert response.status_code == 404
            assert "nope" in response.json()["detail"]
        response = await client.get("/runs/nope/events")
        assert response.status_code == 404
        response = await client.post("/runs", json={"input": "x", "agent": "nobody"})
        assert response.status_code == 422

        # A run, streamed from its start to its end.
        response = await client.post("/runs", json={"input": "how many words is this"})
        assert response.status_code == 201
        run_id = response.json()["run_id"]
        messages = await read_events(client, run_id)
        events = check_trail(messages, run_id)
        # The demo agent: a model call asks for the tool, then a second one answers.
        milestones = (ev.ModelCallFinished, ev.ToolCallStarted, ev.ToolCallFinished)
        assert [type(e).__name__ for e in events if isinstance(e, milestones)] == [
            "ModelCallFinished",
            "ToolCallStarted",
            "ToolCallFinished",
            "ModelCallFinished",
        ]
        finished = events[-1]
        assert isinstance(finished, ev.RunFinished)
        assert finished.termination == "answered"
        # Events arrived over time: the demo model takes a while per call.
        assert events[-1].at - events[0].at >= 0.05

        response = await client.get(f"/runs/{run_id}")
        assert response.status_code == 200
        result = response.json()
        assert result["status"] == "finished"
        assert result["termination"] == "answered"
        assert result["output"] == "Your input has 5 words."
        assert result["usage"]["tool_calls"] == 1
        assert result["usage"]["input_tokens"] == finished.usage.input_tokens > 0
        assert result["summary"] == "Model → Tools(1) → Model → answered"

        # A finished run replays in full; Last-Event-ID resumes after that event.
        assert [m.data for m in await read_events(client, run_id)] == [m.data for m in messages]
        tail = await read_events(client, run_id, headers={"Last-Event-ID": "5"})
        assert [m.data for m in tail] == [m.data for m in messages[6:]]

        # A slow run, cancelled while its events stream.
        response = await client.post("/runs", json={"input": "take your time", "agent": "slow"})
        assert response.status_code == 201
        slow_id = response.json()["run_id"]
        assert (await client.get(f"/runs/{slow_id}")).json() == {
            "run_id": slow_id,
            "status": "running",
        }
        streamed: list[ServerSentEvent] = []
        async with aconnect_sse(client, "GET", f"/runs/{slow_id}/events") as source:
            async for sse in source.aiter_sse():
                streamed.append(sse)
                if sse.event == "ModelCallStarted":
                    # The model is mid-call (5 s): cancel it from another request.
                    response = await client.delete(f"/runs/{slow_id}")
                    assert response.status_code == 202
                    assert response.json()["run_id"] == slow_id
        events = check_trail(streamed, slow_id)
        finished = events[-1]
        assert isinstance(finished, ev.RunFinished)
        assert finished.termination == "cancelled"
        assert finished.error == "cancelled by client"
        assert not any(isinstance(e, ev.ModelCallFinished) for e in events)
        result = (await client.get(f"/runs/{slow_id}")).json()
        assert result["status"] == "finished"
        assert result["termination"] == "cancelled"
        assert result["output"] is None
        # Cancelling a finished run is harmless.
        assert (await client.delete(f"/runs/{slow_id}")).status_code == 202


async def test_registry_is_bounded() -> None:
    """Past max_runs the oldest finished runs are dropped; runs in flight never are."""
    pytest.importorskip("fastapi")
    import tether
    from examples.fastapi_service import RunRegistry, demo_agent

    fast, slow = demo_agent(latency_s=0), demo_agent("slow", latency_s=30)
    async with tether.Runtime() as rt:
        runs = RunRegistry(rt, max_runs=3)
        first = runs.start(fast, "a")
        assert first is not None
        await first.result()
        held = [runs.start(slow, "b"), runs.start(slow, "c")]
        assert all(h is not None for h in held)
        fourth = runs.start(slow, "d")  # drops the finished first run
        assert fourth is not None
        assert runs.get(first.run_id) is None
        assert len(runs) == 3
        assert runs.start(slow, "e") is None  # every kept run is in flight
        for handle in [*held, fourth]:
            assert handle is not None
            handle.cancel("done")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_fastapi_service_on_asyncio_with_uvicorn() -> None:
    """The FastAPI example serves the run API under uvicorn on asyncio (127.0.0.1)."""
    pytest.importorskip("fastapi")
    uvicorn = pytest.importorskip("uvicorn")
    from examples.fastapi_service import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(create_app(), lifespan="on", log_level="warning")
        server = uvicorn.Server(config)
        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve, [sock])
                while not server.started:  # noqa: ASYNC110 - uvicorn has no started event
                    await anyio.sleep(0.01)
                try:
                    await exercise(f"http://127.0.0.1:{port}")
                finally:
                    server.should_exit = True


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_service_on_trio_with_hypercorn() -> None:
    """The trio example serves the run API under hypercorn on trio (127.0.0.1)."""
    pytest.importorskip("starlette")
    pytest.importorskip("hypercorn")
    import trio

    from examples import trio_service

    stop = trio.Event()
    with anyio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(
                partial(trio_service.serve, "127.0.0.1", 0, shutdown_trigger=stop.wait)
            )
            try:
                await exercise(binds[0])
            finally:
                stop.set()
