"""The run viewer's ASGI app without a browser, on both backends (docs/guides/viewer.md):
the list, filters and pages, a run's page, the SSE stream, the actions' guard, traces,
redaction, bad input."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest

import tether
from tether import web

from .memory_runstore import MemoryRunStore
from .viewer_agents import asker, calc, fill, wait_status

pytestmark = pytest.mark.anyio

TOKEN = "t0ken"


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://viewer")


async def test_list_filters_and_run_page(tmp_path: Path) -> None:
    """The list shows the stored runs, filters and pages them; a run's page shows its trail."""
    path = tmp_path / "runs.db"
    await fill(path)
    store = tether.SQLiteRunStore(path)
    try:
        async with client(web.app(store=store)) as c:
            page = (await c.get("/")).text
            assert page.count("<tr data-run=") == 5
            assert "<main" in page
            assert 'aria-label="Filter runs"' in page
            parked = (await c.get("/?status=parked")).text
            assert parked.count("<tr data-run=") == 1
            assert 'data-run="ask-0"' in parked
            answered = (await c.get("/?termination=answered&agent=calc")).text
            assert answered.count("<tr data-run=") == 3
            run = (await c.get("/runs/calc-0")).text
            assert run.count('class="round"') == 3
            assert "mentions_sum" in run
            assert "The sum is 5." in run
            bad = await c.get("/?status=nope")
            assert bad.status_code == 400
            assert "status" in bad.json()["error"]
            assert (await c.get("/runs/nope")).status_code == 404
            stream = await c.get("/runs/calc-0/stream")
            assert stream.headers["content-type"] == "text/event-stream"
            assert '"status": "finished"' in stream.text
            assert "event: end" in stream.text
            assert (await c.get("/static/viewer.js")).status_code == 200
            head = await c.head("/")
            assert head.status_code == 200
            assert head.content == b""
            assert (await c.get("/static/../_app.py")).status_code == 404
    finally:
        await store.aclose()


async def test_ceilings_are_drawn_against_the_limits(tmp_path: Path) -> None:
    """With limits= for the agent, the run's usage is drawn against each as a bar."""
    path = tmp_path / "runs.db"
    await fill(path)
    store = tether.SQLiteRunStore(path)
    try:
        limits = {"looper": {"max_steps": 2, "max_tool_calls": 10, "max_cost_usd": None}}
        async with client(web.app(store=store, limits=limits)) as c:
            page = (await c.get("/runs/loop-0")).text
        assert page.count("<meter") == 2
        assert 'aria-label="steps: 2 of 2"' in page
        assert "Ceiling" in page or "max_steps" in page
    finally:
        await store.aclose()


async def test_pages_follow_the_cursor(tmp_path: Path) -> None:
    """Past the first page, 'Next page' carries a keyset cursor and no run repeats."""
    store = MemoryRunStore()
    from tether.runtime import NewRun

    for i in range(120):
        await store.create(
            NewRun(run_id=f"r{i:03d}", agent="a", input="q", created_at=float(i)),
            owner="x",
            lease_s=60,
        )
    seen: list[str] = []
    async with client(web.app(store=store)) as c:  # type: ignore[arg-type]
        url = "/"
        while url:
            text = (await c.get(url)).text
            seen += [part.split('"')[0] for part in text.split('<tr data-run="')[1:]]
            url = (
                text.split('rel="next" href="')[1].split('"')[0].replace("&amp;", "&")
                if 'rel="next"' in text
                else ""
            )
    assert seen == [f"r{i:03d}" for i in reversed(range(120))]


async def test_actions_need_a_token_and_a_runtime(tmp_path: Path) -> None:
    """No token: 401; a wrong one: 401; read-only: 409; the right one approves the parked call
    and the run goes on to answered."""
    path = tmp_path / "runs.db"
    await fill(path)
    store = tether.SQLiteRunStore(path)
    try:
        async with tether.Runtime(store=store, agents=[asker(), calc()]) as rt:
            with pytest.raises(ValueError, match="tokens"):
                web.app(store=store, runtime=rt)
            async with client(web.app(store=store, runtime=rt, read_only=True)) as c:
                assert (
                    await c.post("/runs/ask-0/approve", data={"call_id": "b1"})
                ).status_code == 409
            viewer = web.app(store=store, runtime=rt, tokens={"me": TOKEN})
            async with client(viewer) as c:
                refused = await c.post("/runs/ask-0/approve", data={"call_id": "b1"})
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"].startswith("Bearer")
                wrong = await c.post(
                    "/runs/ask-0/approve",
                    data={"call_id": "b1"},
                    headers={"authorization": "Bearer nope"},
                )
                assert wrong.status_code == 401
                assert (await store.get("ask-0")).status == "parked"  # type: ignore[union-attr]
                missing = await c.post(
                    "/runs/ask-0/approve",
                    data={"call_id": "zz"},
                    headers={"authorization": f"Bearer {TOKEN}"},
                )
                assert missing.status_code == 409
                ok = await c.post(
                    "/runs/ask-0/approve",
                    data={"call_id": "b1"},
                    headers={"authorization": f"Bearer {TOKEN}"},
                )
                assert ok.status_code == 200, ok.text
                await wait_status(store, "ask-0", "finished")
                done = await store.get("ask-0")
                assert done is not None
                assert done.result["termination"] == "answered"
    finally:
        await store.aclose()


async def test_a_trace_and_redaction(tmp_path: Path) -> None:
    """A JSONL trace is listed and shown; --redact hides message contents."""
    trace = tmp_path / "trace.jsonl"
    async with tether.Runtime(event_sink=tether.runtime.JsonlSink(trace)) as rt:
        await rt.run(calc(), "secret question")
    async with client(web.app(trace=trace, redact=True)) as c:
        listing = (await c.get("/")).text
        assert listing.count("<tr data-run=") == 1
        run_id = listing.split('<tr data-run="')[1].split('"')[0]
        page = (await c.get(f"/runs/{run_id}")).text
        assert "secret question" not in page
        assert "The sum is 5" not in page
        assert "[redacted]" in page
        assert "mentions_sum" in page
        stream = await c.get(f"/runs/{run_id}/stream")
        assert "event: end" in stream.text
    with pytest.raises(ValueError, match="one of"):
        web.app()
    with pytest.raises(ValueError, match="no trace file"):
        web.app(trace=tmp_path / "missing.jsonl")


async def test_cancelling_the_stream_leaves_nothing(tmp_path: Path) -> None:
    """A client that goes away mid-stream ends the stream's tasks (nothing left running)."""
    path = tmp_path / "runs.db"
    await fill(path)
    store = tether.SQLiteRunStore(path)
    viewer = web.app(store=store)
    sent: list[Any] = []
    gone = anyio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)
        if message.get("body", b"").startswith(b"data:"):
            gone.set()

    scope = {"type": "http", "method": "GET", "path": "/runs/ask-0/stream", "headers": []}
    with anyio.fail_after(10):
        await viewer(scope, receive, send)  # parked: would follow forever, ends on disconnect
    assert json.loads(sent[1]["body"].decode().removeprefix("data: "))["status"] == "parked"
    await store.aclose()


def test_serve_refuses_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tether serve: neither or both sources is a usage error; a missing file a data error."""
    pytest.importorskip("uvicorn", reason="tether serve needs the 'web' extra")
    from tether.cli._main import main

    assert main(["serve"]) == 64
    assert main(["serve", "--store", "a.db", "--trace", "b.jsonl"]) == 64
    assert main(["serve", "--store", str(tmp_path / "missing.db"), "--read-only"]) == 65
    assert main(["serve", "--trace", str(tmp_path / "missing.jsonl")]) == 65
    assert main(["serve", "--store", "mysql://nope", "--read-only"]) == 64
    assert "no run store file" in capsys.readouterr().err


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``tether serve ARGS`` in a subprocess on a free loopback port; yields its URL."""
    import subprocess
    import sys
    import time

    port = free_port()
    command = [sys.executable, "-m", "tether", "serve", *args, "--port", str(port)]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "tether serve did not start"
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(10)
        if server.stderr:
            server.stderr.close()


def test_serve_needs_tokens_or_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """tether serve --store without TETHER_API_TOKENS refuses to start unless --read-only."""
    pytest.importorskip("uvicorn", reason="tether serve needs the 'web' extra")
    from tether.cli._main import main

    path = tmp_path / "runs.db"
    anyio.run(fill, path)
    monkeypatch.delenv(web.TOKENS_ENV, raising=False)
    assert main(["serve", "--store", str(path)]) == 64
    assert "TETHER_API_TOKENS" in capsys.readouterr().err
    assert main(["serve", "--trace", "t.jsonl", "--agent", "m:a"]) == 64


@pytest.mark.slow  # subprocesses' starts: about 6 s each on a shared machine
def test_serve_serves_a_store_on_loopback(tmp_path: Path) -> None:
    """tether serve --store --read-only: the list over HTTP on 127.0.0.1, no actions; with
    TETHER_API_TOKENS and --agent, approving a parked call resumes the run to answered."""
    pytest.importorskip("uvicorn", reason="the web extra is not installed")
    import sqlite3
    import time

    path = tmp_path / "runs.db"
    anyio.run(fill, path)
    with serving("--store", f"sqlite:///{path}", "--read-only") as url:
        answer = httpx.get(url + "/", timeout=5)
        assert answer.status_code == 200
        assert answer.text.count("<tr data-run=") == 5
        assert 'id="token"' not in answer.text  # read-only: no token field, no actions
        assert httpx.post(url + "/runs/ask-0/cancel", timeout=5).status_code == 409
    agent = str(Path(__file__).parent / "viewer_agents.py") + ":asker"
    tokens = {web.TOKENS_ENV: "ops=tok3n"}
    with serving("--store", str(path), "--agent", agent, env=tokens) as url:
        assert 'id="token"' in httpx.get(url + "/runs/ask-0", timeout=5).text
        data = {"call_id": "b1"}
        refused = httpx.post(url + "/runs/ask-0/approve", data=data, timeout=5)
        assert refused.status_code == 401
        bearer = {"authorization": "Bearer tok3n"}
        ok = httpx.post(url + "/runs/ask-0/approve", data=data, headers=bearer, timeout=10)
        assert ok.status_code == 200, ok.text
        deadline = time.monotonic() + 20
        while True:
            with sqlite3.connect(path) as conn:
                (status, result) = conn.execute(
                    "SELECT status, result FROM runs WHERE run_id = 'ask-0'"
                ).fetchone()
            if status == "finished":
                break
            assert time.monotonic() < deadline, f"ask-0 is still {status}"
            time.sleep(0.05)
        assert json.loads(result)["termination"] == "answered"


async def test_a_finished_run_replays_from_its_page(tmp_path: Path) -> None:
    """With its agent known, a finished run's page replays it offline: ``identical``;
    a changed judge is reported where it diverged; without the agent, the page shows
    the command instead and the action says which agent is missing; with tokens the
    replay needs one."""
    path = tmp_path / "runs.db"
    await fill(path)
    store = tether.SQLiteRunStore(path)
    stricter = attrs.evolve(
        calc(), judge=tether.RuleJudge({"mentions_sum": lambda c: (0.0, "never enough")})
    )
    try:
        async with client(web.app(store=store)) as c:
            page = (await c.get("/runs/calc-0")).text
            assert "tether replay --store STORE_URL calc-0 --agent MODULE:AGENT" in page
            refused = await c.post("/runs/calc-0/replay")
            assert refused.status_code == 409
            assert "no agent 'calc'" in refused.json()["error"]
        async with client(web.app(store=store, agents=[calc()])) as c:
            assert "Replay this run" in (await c.get("/runs/calc-0")).text
            assert "Replay this run" not in (await c.get("/runs/ask-0")).text  # parked
            same = (await c.post("/runs/calc-0/replay")).json()
            assert (same["identical"], same["message"]) == (True, "identical")
        async with client(web.app(store=store, agents=[stricter])) as c:
            changed = (await c.post("/runs/calc-1/replay")).json()
            assert changed["identical"] is False
            assert changed["divergence"]["stage"] == "judge"
            assert changed["message"].startswith("diverged at round")
        async with tether.Runtime(store=store) as rt:
            guarded = web.app(store=store, runtime=rt, tokens={"me": TOKEN}, agents=[calc()])
            async with client(guarded) as c:
                assert (await c.post("/runs/calc-0/replay")).status_code == 401
                answer = await c.post(
                    "/runs/calc-0/replay", headers={"authorization": f"Bearer {TOKEN}"}
                )
                assert answer.json()["identical"] is True
    finally:
        await store.aclose()


async def test_reject_sends_the_reason_to_the_model(tmp_path: Path) -> None:
    """Reject with a reason: the call is refused with it and the run goes on to its end."""
    path = tmp_path / "runs.db"
    await fill(path)
    store = tether.SQLiteRunStore(path)
    try:
        async with tether.Runtime(store=store, agents=[asker()]) as rt:
            viewer = web.app(store=store, runtime=rt, tokens={"me": TOKEN})
            async with client(viewer) as c:
                answer = await c.post(
                    "/runs/ask-0/reject",
                    data={"call_id": "b1", "reason": "not today", "token": TOKEN},
                )
                assert answer.status_code == 200, answer.text
                await wait_status(store, "ask-0", "finished")
                page = (await c.get("/runs/ask-0")).text
        answered = [e for e in await store.events("ask-0") if e["type"] == "ApprovalAnswered"]
        assert [(e["approved"], e["reason"]) for e in answered] == [(False, "not today")]
        assert "rejected — not today" in page
    finally:
        await store.aclose()


async def test_time_filters_take_utc_times(tmp_path: Path) -> None:
    """since/until take YYYY-MM-DDTHH:MM (UTC), as the form's fields send them; a bad
    time is a 400 naming the field."""
    from tether.runtime import NewRun

    store = MemoryRunStore()
    day = 1_767_225_600.0  # 2026-01-01T00:00 UTC
    for i in range(4):
        run = NewRun(run_id=f"h{i}", agent="a", input="q", created_at=day + i * 3600)
        await store.create(run, owner="x", lease_s=60)
    async with client(web.app(store=store)) as c:  # type: ignore[arg-type]
        page = (await c.get("/?since=2026-01-01T01:00&until=2026-01-01T03:00")).text
        assert page.count("<tr data-run=") == 2
        assert 'data-run="h1"' in page
        assert 'value="2026-01-01T01:00"' in page  # the form keeps the filter
        bad = await c.get("/?since=yesterday")
        assert bad.status_code == 400
        assert "since" in bad.json()["error"]
