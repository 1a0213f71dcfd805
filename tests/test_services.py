"""The service examples, served for real on 127.0.0.1 and driven over HTTP.

``examples/fastapi_service.py`` runs under uvicorn on asyncio and
``examples/trio_service.py`` under hypercorn on trio: in this process on a
free port for most tests, as a subprocess for the start-up refusal and the
Ctrl-C shutdown. httpx drives them over the socket and httpx-sse reads the
event streams. Every server test runs against both servers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse

from tether import events as ev

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("hypercorn")

from examples import fastapi_service, trio_service
from examples._service import (
    RunRegistry,
    Service,
    Settings,
    demo_agent,
    parse_tokens,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: Each in-process server test, servers up and down included, ends within this.
BOUND_S = 10
#: A subprocess's start, shutdown or exit: a generous timeout, not a measure.
SUBPROCESS_S = 20

#: Alice and Bob named; the last a bare token, its own client name.
TOKENS = {
    "alice": "alice-7Qd2KfX9pLm3",
    "bob": "bob-Zr8Vn1cW4yHs",
    "carol-bare-token": "carol-bare-token",
}
ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
BOB = {"Authorization": f"Bearer {TOKENS['bob']}"}
CAROL = {"Authorization": "Bearer carol-bare-token"}
ENV_TOKENS = f"alice={TOKENS['alice']}, bob={TOKENS['bob']}, carol-bare-token"

#: (example, anyio backend): FastAPI on asyncio with uvicorn, Starlette on trio with hypercorn.
servers = pytest.mark.parametrize(
    ("kind", "anyio_backend"),
    [pytest.param("fastapi", "asyncio", id="fastapi"), pytest.param("trio", "trio", id="trio")],
)


@asynccontextmanager
async def serving(
    kind: str,
    *,
    tokens: dict[str, str] | None = TOKENS,
    settings: Settings | None = None,
    agents: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[str, Service]]:
    """The example ``kind`` served on a free port: its base URL and its Service."""
    settings = settings or Settings(shutdown_grace_s=0.1)
    with anyio.fail_after(BOUND_S):
        if kind == "fastapi":
            app = fastapi_service.create_app(agents, tokens=tokens, settings=settings)
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
                server = fastapi_service.Server(app, lifespan="on", log_level="warning")
                async with anyio.create_task_group() as tg:
                    tg.start_soon(server.serve, [sock])
                    while not server.started:  # noqa: ASYNC110 - uvicorn has no started event
                        await anyio.sleep(0.01)
                    try:
                        yield f"http://127.0.0.1:{port}", app.state.service
                    finally:
                        server.should_exit = True
        else:
            app = trio_service.create_app(agents, tokens=tokens, settings=settings)
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                binds = await tg.start(
                    partial(trio_service.serve, app, "127.0.0.1", 0, shutdown_trigger=stop.wait)
                )
                try:
                    yield binds[0], app.state.service
                finally:
                    stop.set()


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


async def start(
    client: httpx.AsyncClient, input: str = "how many words is this", agent: str = "demo"
) -> str:
    response = await client.post("/runs", json={"input": input, "agent": agent})
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    assert response.headers["location"] == f"/runs/{run_id}"
    return run_id


async def pending(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """The run's approvals, once there is one."""
    while True:
        response = await client.get(f"/runs/{run_id}/approvals")
        assert response.status_code == 200
        approvals: list[dict[str, Any]] = response.json()["approvals"]
        if approvals:
            return approvals
        await anyio.sleep(0.01)


async def finished(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run's result, once it has finished."""
    while True:
        result: dict[str, Any] = (await client.get(f"/runs/{run_id}")).json()
        if result["status"] == "finished":
            return result
        await anyio.sleep(0.01)


# ----------------------------------------------------------------- the routes


@pytest.mark.anyio
@servers
async def test_a_run_streams_replays_and_cancels(kind: str) -> None:
    """A run streams from its start to its end, replays, resumes, and a slow one cancels."""
    async with (
        serving(kind) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ALICE, timeout=5) as client,
    ):
        for method in ("GET", "DELETE"):
            response = await client.request(method, "/runs/nope")
            assert response.status_code == 404
            assert "nope" in response.json()["detail"]
        assert (await client.get("/runs/nope/events")).status_code == 404

        run_id = await start(client)
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
        finished_event = events[-1]
        assert isinstance(finished_event, ev.RunFinished)
        assert finished_event.termination == "answered"

        result = (await client.get(f"/runs/{run_id}")).json()
        assert result["status"] == "finished"
        assert result["termination"] == "answered"
        assert result["output"] == "Your input has 5 words."
        assert result["usage"]["tool_calls"] == 1
        assert result["usage"]["input_tokens"] == finished_event.usage.input_tokens > 0
        assert result["summary"] == "Model → Tools(1) → Model → answered"

        # A finished run replays in full; Last-Event-ID resumes after that event.
        assert [m.data for m in await read_events(client, run_id)] == [m.data for m in messages]
        tail = await read_events(client, run_id, headers={"Last-Event-ID": "5"})
        assert [m.data for m in tail] == [m.data for m in messages[6:]]

        # A slow run, cancelled while its events stream.
        slow_id = await start(client, "take your time", "slow")
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
        finished_event = events[-1]
        assert isinstance(finished_event, ev.RunFinished)
        assert finished_event.termination == "cancelled"
        assert finished_event.error == "cancelled by client"
        assert "shutdown" not in [m.event for m in streamed]  # only when the server stops
        result = (await client.get(f"/runs/{slow_id}")).json()
        assert result["termination"] == "cancelled"
        assert result["output"] is None
        assert (await client.delete(f"/runs/{slow_id}")).status_code == 202  # harmless


@pytest.mark.anyio
@servers
async def test_deltas_stream_over_sse_before_the_run_ends(kind: str) -> None:
    """With ?deltas=true a client gets the text as it streams, while the run still goes on."""
    agents = {"demo": demo_agent(latency_s=0.01, chunk_latency_s=0.05)}
    async with (
        serving(kind, agents=agents) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ALICE, timeout=5) as client,
    ):
        run_id = await start(client)
        status_at_first_text = None
        messages: list[ServerSentEvent] = []
        async with aconnect_sse(client, "GET", f"/runs/{run_id}/events?deltas=true") as source:
            async for sse in source.aiter_sse():
                if sse.event == "TextDelta" and status_at_first_text is None:
                    status_at_first_text = (await client.get(f"/runs/{run_id}")).json()["status"]
                messages.append(sse)
        assert status_at_first_text == "running"
        deltas = [m for m in messages if m.event in ("TextDelta", "ToolCallDelta")]
        # A delta has no id of its own: the client's last id stays the kept event's.
        assert [m.id for m in deltas] == [str(load(m).seq) for m in deltas]
        events = check_trail([m for m in messages if m not in deltas], run_id)
        texts = [load(m) for m in deltas if m.event == "TextDelta"]
        finished = [e for e in events if isinstance(e, ev.ModelCallFinished)]
        assert len(texts) > len(finished), "the text came in pieces"
        for index, call in enumerate(finished):
            pieces = [
                t.text for t in texts if isinstance(t, ev.TextDelta) and t.call_index == index
            ]
            assert "".join(pieces) == call.text
        arguments = "".join(
            d.arguments_delta for d in (load(m) for m in deltas) if isinstance(d, ev.ToolCallDelta)
        )
        assert json.loads(arguments) == {"text": "how many words is this"}
        # Without the flag the same route sends the kept events only; a bad flag is 422.
        assert [m.event for m in await read_events(client, run_id)] == [
            type(e).__name__ for e in events
        ]
        response = await client.get(f"/runs/{run_id}/events?deltas=maybe")
        assert response.status_code == 422


# ------------------------------------------------------------- authentication


@pytest.mark.anyio
@servers
async def test_every_route_needs_a_valid_bearer_token(kind: str) -> None:
    """No token, a wrong one or another scheme is 401 with WWW-Authenticate: Bearer."""
    async with (
        serving(kind) as (url, _),
        httpx.AsyncClient(base_url=url, timeout=5) as client,  # no token of its own
    ):
        response = await client.post("/runs", json={"input": "x"}, headers=ALICE)
        run_id = response.json()["run_id"]
        routes = [
            ("POST", "/runs"),
            ("GET", f"/runs/{run_id}"),
            ("GET", f"/runs/{run_id}/events"),
            ("DELETE", f"/runs/{run_id}"),
            ("GET", f"/runs/{run_id}/approvals"),
            ("POST", f"/runs/{run_id}/approvals/call_0_0"),
        ]
        wrong = [
            {},
            {"Authorization": ""},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer not-a-token"},
            {"Authorization": f"Bearer {TOKENS['alice']}x"},
            {"Authorization": f"Bearer {TOKENS['alice'][:-1]}"},
            {"Authorization": f"Basic {TOKENS['alice']}"},
            {"Authorization": "Bearer alice"},  # a client's name is no token
        ]
        for method, path in routes:
            for headers in wrong:
                response = await client.request(
                    method, path, headers=headers, json={"input": "x", "approve": True}
                )
                assert response.status_code == 401, (method, path, headers)
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert TOKENS["alice"] not in response.text
        # Each valid token works; the scheme is case-insensitive; a bare token is a client.
        for headers in (ALICE, BOB, CAROL, {"Authorization": f"bearer {TOKENS['bob']}"}):
            response = await client.post("/runs", json={"input": "x"}, headers=headers)
            assert response.status_code == 201
        assert (await client.get(f"/runs/{run_id}", headers=ALICE)).status_code == 200


@pytest.mark.anyio
@servers
async def test_without_tokens_the_service_serves_everyone_as_one_client(kind: str) -> None:
    """tokens=None (--insecure): no header needed, every caller is the same client."""
    async with (
        serving(kind, tokens=None) as (url, _),
        httpx.AsyncClient(base_url=url, timeout=5) as client,
    ):
        run_id = await start(client)
        check_trail(await read_events(client, run_id), run_id)
        response = await client.get(f"/runs/{run_id}", headers={"Authorization": "Bearer x"})
        assert response.json()["termination"] == "answered"


def test_tokens_from_the_environment() -> None:
    """TETHER_API_TOKENS: client=token or a bare token, comma-separated; malformed is refused."""
    assert parse_tokens(" alice=a1 , b2,, carol = c3 ") == {
        "alice": "a1",
        "b2": "b2",
        "carol": "c3",
    }
    bad_specs = ("", " , ", "alice=", "=secret1", "a=x,a=y", "a=same,b=same", "same,b=same")
    for bad in (*bad_specs, "same,same", "same,same=y"):
        with pytest.raises(ValueError, match="TETHER_API_TOKENS") as info:
            parse_tokens(bad)
        for secret in ("secret1", "same", "x", "y"):
            assert f"'{secret}'" not in str(info.value), "no message repeats a token"


@pytest.mark.parametrize("script", ["fastapi_service.py", "trio_service.py"])
def test_the_examples_refuse_to_start_without_tokens(script: str, tmp_path: Path) -> None:
    """Without TETHER_API_TOKENS (or with a malformed one) and no --insecure: one line, exit 1."""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_API_TOKENS"}
    for extra, says in (({}, "--insecure"), ({"TETHER_API_TOKENS": "alice="}, "entry 1")):
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / script), "--port", "1"],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_S,
            check=False,
        )
        assert done.returncode == 1
        assert done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert done.stderr.startswith("error: TETHER_API_TOKENS")
        assert says in done.stderr


# ------------------------------------------------------------- isolation, ids


@pytest.mark.anyio
@servers
async def test_a_run_is_visible_only_to_its_client(kind: str) -> None:
    """Another client gets 404 for a run on every route, as for an unknown id."""
    async with (
        serving(kind) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ALICE, timeout=5) as alice,
        httpx.AsyncClient(base_url=url, headers=BOB, timeout=5) as bob,
    ):
        run_id = await start(alice, "count these words", "guarded")  # waits for approval
        [approval] = await pending(alice, run_id)
        call = approval["call_id"]
        for some_id in (run_id, "run-unknown"):
            for method, path in [
                ("GET", f"/runs/{some_id}"),
                ("GET", f"/runs/{some_id}/events"),
                ("DELETE", f"/runs/{some_id}"),
                ("GET", f"/runs/{some_id}/approvals"),
                ("POST", f"/runs/{some_id}/approvals/{call}"),
            ]:
                response = await bob.request(method, path, json={"approve": False})
                assert response.status_code == 404, (method, path)
                assert response.json() == {"detail": f"no run {some_id!r}"}
        # Bob touched nothing: the run still waits, and Alice can answer it.
        assert (await alice.get(f"/runs/{run_id}")).json()["status"] == "running"
        assert await pending(alice, run_id) == [approval]
        response = await alice.post(f"/runs/{run_id}/approvals/{call}", json={"approve": True})
        assert response.status_code == 200
        assert (await finished(alice, run_id))["termination"] == "answered"


@pytest.mark.anyio
@servers
async def test_run_ids_are_random(kind: str) -> None:
    """Run ids carry 144 random bits, and the events and result use the same id."""
    async with (
        serving(kind) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ALICE, timeout=5) as client,
    ):
        ids = [await start(client) for _ in range(4)]
        assert len(set(ids)) == 4
        for run_id in ids:
            assert re.fullmatch(r"run-[A-Za-z0-9_-]{24}", run_id), run_id
        assert len({run_id[:8] for run_id in ids}) > 1, "no shared prefix"
        check_trail(await read_events(client, ids[0]), ids[0])
        assert (await finished(client, ids[0]))["run_id"] == ids[0]


# --------------------------------------------------------- bodies and quotas


@pytest.mark.anyio
@servers
async def test_bodies_must_be_small_json_objects_of_the_right_shape(kind: str) -> None:
    """415 without application/json, 413 past 64 KiB (while read), 422 naming the fault."""
    limit = Settings().max_body_bytes
    async with (
        serving(kind) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ALICE, timeout=5) as client,
    ):
        body = b'{"input": "a b c"}'
        for content_type in (None, "text/plain", "application/x-www-form-urlencoded", "json"):
            headers = {} if content_type is None else {"Content-Type": content_type}
            response = await client.post("/runs", content=body, headers=headers)
            assert response.status_code == 415, content_type
            assert "application/json" in response.json()["detail"]
        json_type = {"Content-Type": "application/json; charset=utf-8"}
        assert (await client.post("/runs", content=body, headers=json_type)).status_code == 201

        # Exactly the limit is fine; a byte more is 413, declared or streamed.
        padded = body + b" " * (limit - len(body))
        assert (await client.post("/runs", content=padded, headers=json_type)).status_code == 201
        response = await client.post("/runs", content=padded + b" ", headers=json_type)
        assert response.status_code == 413
        assert str(limit) in response.json()["detail"]

        async def chunked() -> AsyncIterator[bytes]:
            yield b'{"input": "'
            for _ in range(limit // 4096 + 1):
                yield b"x" * 4096
            yield b'"}'

        response = await client.post("/runs", content=chunked(), headers=json_type)
        assert "content-length" not in response.request.headers
        assert response.status_code == 413

        for sent, detail in [
            (b"", "not valid JSON"),
            (b"{", "not valid JSON"),
            (b"\xff\xfe", "not valid JSON"),
            (b"[" * 20_000 + b"]" * 20_000, "not valid JSON"),
            (b'["a b c"]', "must be a JSON object"),
            (b'"a b c"', "must be a JSON object"),
            (b"{}", "missing field 'input'"),
            (b'{"agent": "demo"}', "missing field 'input'"),
            (b'{"input": 5}', "field 'input' must be a string"),
            (b'{"input": null}', "field 'input' must be a string"),
            (b'{"input": "x", "agent": 1}', "field 'agent' must be a string"),
            (b'{"input": "x", "extra": 1}', "unknown field(s): 'extra'"),
            (b'{"input": ""}', "input must be 1 to 16000 characters"),
            (b'{"input": "' + b"x" * 16_001 + b'"}', "input must be 1 to 16000 characters"),
            (b'{"input": "x", "agent": "nobody"}', "unknown agent 'nobody'"),
        ]:
            response = await client.post("/runs", content=sent, headers=json_type)
            assert response.status_code == 422, sent[:40]
            assert detail in response.json()["detail"], sent[:40]
        # The longest input passes.
        assert (await client.post("/runs", json={"input": "x" * 16_000})).status_code == 201


@pytest.mark.anyio
@servers
async def test_quotas_per_client_and_in_all(kind: str) -> None:
    """A client past its in-flight quota gets 429; others still start runs, until the global 503."""
    settings = Settings(max_in_flight_per_client=2, max_in_flight=3, shutdown_grace_s=0.1)
    async with (
        serving(kind, settings=settings) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ALICE, timeout=5) as alice,
        httpx.AsyncClient(base_url=url, headers=BOB, timeout=5) as bob,
    ):
        held = [await start(alice, "x", "slow") for _ in range(2)]
        response = await alice.post("/runs", json={"input": "x"})
        assert response.status_code == 429
        assert int(response.headers["retry-after"]) > 0
        assert "2 runs in flight" in response.json()["detail"]

        await start(bob, "x", "slow")  # Alice's quota is hers alone
        response = await bob.post("/runs", json={"input": "x"})
        assert response.status_code == 503  # three in flight in all
        assert int(response.headers["retry-after"]) > 0

        # A run that ends frees its place.
        assert (await alice.delete(f"/runs/{held[0]}")).status_code == 202
        await finished(alice, held[0])
        await start(alice, "x", "demo")


# ------------------------------------------------------------------ approvals


@pytest.mark.anyio
@servers
async def test_approvals_are_listed_and_answered(kind: str) -> None:
    """GET lists held calls; POST approves or rejects one; an unknown call id is 404."""
    async with (
        serving(kind) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ALICE, timeout=5) as client,
    ):
        run_id = await start(client, "count these words", "guarded")
        [approval] = await pending(client, run_id)
        assert approval["tool"] == "word_count"
        assert approval["arguments"] == {"text": "count these words"}
        assert approval["reason"] == "a human approves each tool call"
        call = approval["call_id"]
        answer_url = f"/runs/{run_id}/approvals/{call}"

        response = await client.post(
            f"/runs/{run_id}/approvals/no-such-call", json={"approve": True}
        )
        assert response.status_code == 404
        for body, detail in [
            ({}, "missing field 'approve'"),
            ({"approve": "yes"}, "field 'approve' must be true or false"),
            ({"approve": True, "reason": 1}, "field 'reason' must be a string"),
            ({"approve": True, "why": "x"}, "unknown field(s): 'why'"),
        ]:
            response = await client.post(answer_url, json=body)
            assert response.status_code == 422
            assert detail in response.json()["detail"]
        response = await client.post(answer_url, content=b'{"approve": true}')
        assert response.status_code == 415

        response = await client.post(answer_url, json={"approve": True})
        assert response.status_code == 200
        assert response.json() == {"run_id": run_id, "call_id": call, "approved": True}
        assert (await client.post(answer_url, json={"approve": True})).status_code == 404
        result = await finished(client, run_id)
        assert result["output"] == "Your input has 3 words."
        assert (await client.get(f"/runs/{run_id}/approvals")).json()["approvals"] == []

        # A rejection: the model gets an error result with the reason.
        run_id = await start(client, "count these words", "guarded")
        [approval] = await pending(client, run_id)
        response = await client.post(
            f"/runs/{run_id}/approvals/{approval['call_id']}",
            json={"approve": False, "reason": "not today"},
        )
        assert response.json()["approved"] is False
        events = check_trail(await read_events(client, run_id), run_id)
        answered = [e for e in events if isinstance(e, ev.ApprovalAnswered)]
        assert [(a.approved, a.reason) for a in answered] == [(False, "not today")]
        [tool_call] = [e for e in events if isinstance(e, ev.ToolCallFinished)]
        assert tool_call.is_error
        assert "not today" in tool_call.content


# ------------------------------------------------------------------- shutdown


@pytest.mark.anyio
@servers
async def test_drain_refuses_runs_lets_short_ones_finish_and_cancels_the_rest(kind: str) -> None:
    """Draining: 503 for new runs, runs done within the grace answer, the rest are cancelled."""
    settings = Settings(shutdown_grace_s=1.0)
    async with (
        serving(kind, settings=settings) as (url, service),
        httpx.AsyncClient(base_url=url, headers=ALICE, timeout=5) as client,
    ):
        slow_id = await start(client, "take your time", "slow")
        streamed: list[ServerSentEvent] = []
        async with (
            aconnect_sse(client, "GET", f"/runs/{slow_id}/events") as source,
            anyio.create_task_group() as tg,
        ):
            async for sse in source.aiter_sse():
                streamed.append(sse)
                if sse.event == "ModelCallStarted":
                    quick_id = await start(client)  # about 0.1 s: well within the grace
                    tg.start_soon(service.drain)
                    await anyio.lowlevel.checkpoint()  # the drain has begun
                    response = await client.post("/runs", json={"input": "x"})
                    assert response.status_code == 503
                    assert response.json() == {"detail": "the server is shutting down"}
        assert [m.event for m in streamed[-2:]] == ["RunFinished", "shutdown"]
        finished_event = check_trail(streamed[:-1], slow_id)[-1]
        assert isinstance(finished_event, ev.RunFinished)
        assert finished_event.termination == "cancelled"
        assert finished_event.error == "server shutdown"
        assert json.loads(streamed[-1].data) == {"reason": "server shutdown"}
        assert (await client.get(f"/runs/{quick_id}")).json()["termination"] == "answered"
        # A stream opened now replays the run and ends the same way.
        replay = await read_events(client, quick_id)
        assert [m.event for m in replay[-2:]] == ["RunFinished", "shutdown"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def example_server(tmp_path: Path) -> Iterator[partial[tuple[subprocess.Popen[bytes], str]]]:
    """Start an example as a subprocess (killed at the end if still alive)."""
    procs: list[subprocess.Popen[bytes]] = []

    def launch(script: str) -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        env = {**os.environ, "TETHER_API_TOKENS": ENV_TOKENS}
        command = [sys.executable, str(EXAMPLES / script), "--port", str(port)]
        with (tmp_path / f"{script}.log").open("wb") as log:
            proc = subprocess.Popen(
                [*command, "--shutdown-grace", "0.5"], env=env, stdout=log, stderr=log
            )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SUBPROCESS_S
        while True:
            assert proc.poll() is None, (tmp_path / f"{script}.log").read_text()
            try:
                if httpx.get(f"{url}/runs/none", headers=ALICE, timeout=1).status_code == 404:
                    return proc, url
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.05)

    yield partial(launch)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# SIGTERM in the default tier, SIGINT (the same path, another signal) in the slow one.
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, id="SIGINT", marks=pytest.mark.slow),
        pytest.param(signal.SIGTERM, id="SIGTERM"),
    ],
)
@pytest.mark.parametrize("script", ["fastapi_service.py", "trio_service.py"])
def test_a_signal_ends_streams_with_run_finished_and_the_server_exits(
    script: str,
    sig: signal.Signals,
    example_server: partial[tuple[subprocess.Popen[bytes], str]],
) -> None:
    """Ctrl-C with an SSE client attached: RunFinished (cancelled), then shutdown, then exit."""
    proc, url = example_server(script)
    with httpx.Client(base_url=url, headers=ALICE, timeout=SUBPROCESS_S) as client:
        response = client.post("/runs", json={"input": "take your time", "agent": "slow"})
        run_id = response.json()["run_id"]
        streamed: list[ServerSentEvent] = []
        with connect_sse(client, "GET", f"/runs/{run_id}/events") as source:
            for sse in source.iter_sse():
                streamed.append(sse)
                if sse.event == "ModelCallStarted":  # mid-call, for 5 s
                    proc.send_signal(sig)
    assert [m.event for m in streamed[-2:]] == ["RunFinished", "shutdown"]
    finished_event = check_trail(streamed[:-1], run_id)[-1]
    assert isinstance(finished_event, ev.RunFinished)
    assert finished_event.termination == "cancelled"
    assert finished_event.error == "server shutdown"
    returncode = proc.wait(timeout=SUBPROCESS_S)
    # uvicorn raises a SIGTERM it handled again once done, ending the process by it.
    assert returncode in (0, -signal.SIGTERM if sig == signal.SIGTERM else 0)


# --------------------------------------------------------------- the registry


@pytest.mark.anyio
async def test_the_registry_keeps_runs_in_flight_and_drops_old_finished_ones() -> None:
    """Past max_runs the oldest finished runs are dropped; runs in flight never are."""
    import tether
    from examples._service import Refused

    fast, slow = demo_agent(latency_s=0), demo_agent("slow", latency_s=30)
    async with tether.Runtime() as rt:
        runs = RunRegistry(rt, Settings(max_runs=3))
        first = runs.start("alice", fast, "a")
        await first.result()
        held = [runs.start("alice", slow, "b"), runs.start("bob", slow, "c")]
        assert runs.get("bob", first.run_id) is None  # not Bob's
        fourth = runs.start("bob", slow, "d")  # drops the finished first run
        assert runs.get("alice", first.run_id) is None
        assert len(runs) == 3
        with pytest.raises(Refused) as info:
            runs.start("carol", slow, "e")  # every kept run is in flight
        assert info.value.status == 503
        assert {h.run_id for h in runs.in_flight("bob")} == {held[1].run_id, fourth.run_id}
        for handle in [*held, fourth]:
            handle.cancel("done")
