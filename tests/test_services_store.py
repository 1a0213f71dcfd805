"""Two service processes on one PostgreSQL serve each other's runs (docs/guides/embedding.md).

``examples/fastapi_service.py`` (asyncio, uvicorn) and
``examples/trio_service.py`` (trio, hypercorn) run as subprocesses with
``--store postgresql://...``: a run started on one is read, streamed and
cancelled on the other; a client's run stays private on both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import connect_sse

from tether import events as ev

from .pg import PgServer, need_psycopg

pytest.importorskip("fastapi")
pytest.importorskip("hypercorn")
need_psycopg()

from examples._service import new_run_id, tagged_for  # noqa: E402

from .test_services import (  # noqa: E402
    ALICE,
    BOB,
    ENV_TOKENS,
    EXAMPLES,
    SUBPROCESS_S,
    check_trail,
    free_port,
)


@pytest.fixture
def two_servers(pg_server: PgServer, pg_schema: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The FastAPI and the trio example, both on one PostgreSQL schema: their URLs."""
    procs: list[subprocess.Popen[bytes]] = []
    urls = []
    env = {**os.environ, "TETHER_API_TOKENS": ENV_TOKENS}
    for script in ("fastapi_service.py", "trio_service.py"):
        port = free_port()
        command = [sys.executable, str(EXAMPLES / script), "--port", str(port)]
        command += ["--store", pg_server.dsn, "--store-schema", pg_schema, "--lease", "1.5"]
        with (tmp_path / f"{script}.log").open("wb") as log:
            procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=log))
        urls.append(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + SUBPROCESS_S
        for proc, url in zip(procs, urls, strict=True):
            while True:
                logs = "\n".join(p.read_text() for p in tmp_path.glob("*.log"))
                assert proc.poll() is None, logs
                try:
                    if httpx.get(f"{url}/runs/none", headers=ALICE, timeout=1).status_code == 404:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"the servers did not come up: {logs}"
                time.sleep(0.05)
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _finished(client: httpx.Client, run_id: str) -> dict[str, object]:
    deadline = time.monotonic() + SUBPROCESS_S
    while True:
        response = client.get(f"/runs/{run_id}")  # 404 until the store has the run's record
        result: dict[str, object] = response.json()
        if response.status_code == 200 and result["status"] == "finished":
            return result
        assert time.monotonic() < deadline, result
        time.sleep(0.02)


def test_runs_started_on_one_server_are_served_by_the_other(two_servers: tuple[str, str]) -> None:
    """Started on FastAPI: streamed, cancelled, approved on trio; and the other way round."""
    fastapi_url, trio_url = two_servers
    with (
        httpx.Client(base_url=fastapi_url, headers=ALICE, timeout=SUBPROCESS_S) as a,
        httpx.Client(base_url=trio_url, headers=ALICE, timeout=SUBPROCESS_S) as b,
    ):
        # A slow run (5 s per model call) on FastAPI, followed live on trio, cancelled there.
        run_id = a.post("/runs", json={"input": "take your time", "agent": "slow"}).json()["run_id"]
        deadline = time.monotonic() + SUBPROCESS_S
        while b.get(f"/runs/{run_id}").status_code == 404:  # until the store has its record
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert b.get(f"/runs/{run_id}").json() == {"run_id": run_id, "status": "running"}
        assert b.get(f"/runs/{run_id}", headers=BOB).status_code == 404  # Alice's run only
        streamed = []
        with connect_sse(b, "GET", f"/runs/{run_id}/events") as source:
            for sse in source.iter_sse():
                streamed.append(sse)
                if sse.event == "Transition" and len(streamed) < 200:
                    response = b.delete(f"/runs/{run_id}")
                    assert response.status_code == 202
                    assert response.json()["status"] == "cancelling"
        events = check_trail(streamed, run_id)
        end = events[-1]
        assert isinstance(end, ev.RunFinished)
        assert (end.termination, end.error) == ("cancelled", "cancelled by client")
        assert _finished(a, run_id)["termination"] == "cancelled"  # the owner's view agrees

        # A guarded run on FastAPI parks in the store; trio lists its call and approves it.
        held = a.post("/runs", json={"input": "count these words", "agent": "guarded"})
        held_id = held.json()["run_id"]
        deadline = time.monotonic() + SUBPROCESS_S
        while True:
            response = b.get(f"/runs/{held_id}/approvals")
            if response.status_code == 200 and response.json()["approvals"]:
                break
            assert time.monotonic() < deadline, response.text
            time.sleep(0.02)
        [approval] = response.json()["approvals"]
        assert (approval["tool"], approval["arguments"]) == (
            "word_count",
            {"text": "count these words"},
        )
        assert b.get(f"/runs/{held_id}").json()["status"] == "parked"
        call = approval["call_id"]
        assert b.get(f"/runs/{held_id}/approvals", headers=BOB).status_code == 404
        response = b.post(f"/runs/{held_id}/approvals/{call}", json={"approve": True})
        assert response.status_code == 200, response.text
        assert (
            b.post(f"/runs/{held_id}/approvals/{call}", json={"approve": True}).status_code == 404
        )
        result = _finished(a, held_id)  # resumed on trio, read on FastAPI
        assert result["output"] == "Your input has 3 words."
        with connect_sse(a, "GET", f"/runs/{held_id}/events") as source:
            names = [m.event for m in source.iter_sse()]
        assert names.index("ApprovalRequested") < names.index("RunResumed")
        assert names.index("RunResumed") < names.index("ApprovalAnswered")

        # A quick run on trio, its result and its trail read on FastAPI.
        other = b.post("/runs", json={"input": "one two three", "agent": "demo"}).json()["run_id"]
        result = _finished(a, other)
        assert (result["termination"], result["output"]) == ("answered", "Your input has 3 words.")
        with connect_sse(a, "GET", f"/runs/{other}/events") as source:
            check_trail(list(source.iter_sse()), other)


def test_run_ids_are_tagged_for_their_client() -> None:
    """With a store, a run id carries its client's tag: another key does not match it."""
    alice, bob = b"alice-token", b"bob-token"
    run_id = new_run_id(alice)
    assert run_id.startswith("run-")
    assert tagged_for(alice, run_id)
    assert not tagged_for(bob, run_id)
    assert not tagged_for(alice, new_run_id())  # no tag: not a stored run of anyone's
    assert not tagged_for(alice, run_id.replace("run-", "xyz-"))
