"""Dropped PostgreSQL connections under load (issue 26, defect 3): ridden out, one ending each.

The server terminates the store's connections (``pg_terminate_backend``, twice)
while 40 durable runs are in flight. Every run must end answered (none
crashed), the store must hold for each exactly the ending its caller got, no
tool call may run twice, and a later ``resume=True`` Runtime finds nothing to
resume. Only this test's connections are terminated: those whose last statement
named its schema (the server is shared).
"""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

import tether
from tether.providers import ModelRequest, ProviderContext, Reply, ScriptedProvider, ToolCall

from .pg import PgServer, need_psycopg

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:the run store failed:RuntimeWarning"),
]

need_psycopg()

from tether.postgres import PostgresRunStore  # noqa: E402

RUNS = 40
ROUNDS = 4
LEASE_S = 10.0

steps: Counter[str] = Counter()


@tether.tool
async def step(key: str) -> str:
    """A side effect, counted; it takes a moment, so kills land mid-run."""
    await anyio.sleep(0.05)
    steps[key] += 1
    return f"stepped {key}"


def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
    text = request.messages[0].text
    done = sum(1 for m in request.messages if m.role == "assistant")
    if done < ROUNDS:
        return Reply(tool_calls=[ToolCall(name="step", arguments={"key": f"{text}-{done}"})])
    return Reply(text=f"done {text}")


def walker() -> tether.Agent:
    return tether.Agent(
        name="walker",
        provider=ScriptedProvider(model),
        tools=[step],
        limits=tether.Limits(max_steps=ROUNDS + 2),
    )


def terminate(pg_server: PgServer, schema: str) -> int:
    """Terminate every connection whose last statement named ``schema``; how many."""
    with pg_server.connect() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND query LIKE %s",
            (f"%{schema}%",),
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


@pytest.mark.timeout(240)
async def test_terminated_connections_under_forty_runs_end_each_run_once(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Two rounds of pg_terminate_backend under 40 runs: all answered, the store agrees."""
    steps.clear()
    # A short wait for a pooled connection: a job waiting for the pool to replace the
    # killed ones fails fast and is tried again, instead of waiting 10 s.
    store = PostgresRunStore(
        pg_server.dsn, schema=pg_schema, max_connections=8, connect_timeout_s=2.0
    )
    killed: list[int] = []
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        handles = [rt.start(walker(), f"w{i}") for i in range(RUNS)]

        async def kill_twice() -> None:
            for _ in range(2):
                await anyio.sleep(0.3)
                killed.append(await anyio.to_thread.run_sync(terminate, pg_server, pg_schema))

        try:
            with anyio.fail_after(90):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(kill_twice)
                    results = [await h.result() for h in handles]
        except TimeoutError:
            stuck = [h.run_id for h in handles if not h.done]
            raise AssertionError(
                f"runs never ended: {[(i, await store.get(i)) for i in stuck][:2]}"
            ) from None
    assert all(n > 0 for n in killed), killed  # the kills hit live connections
    got = Counter(r.termination.value for r in results)
    assert got == {"answered": RUNS}, [r.error for r in results if not r.ok][:3]
    # Each tool call ran once.
    assert steps == Counter({f"w{i}-{n}": 1 for i in range(RUNS) for n in range(ROUNDS)})
    for result in results:
        stored = await store.get(result.run_id)
        assert stored is not None
        assert stored.status == "finished"
        assert stored.result is not None
        assert stored.result["termination"] == result.termination.value
        assert len(await store.events(result.run_id)) == len(result.events)
    assert await store.claimable() == []
    # A later Runtime that resumes whatever is claimable resumes nothing.
    async with tether.Runtime(store=store, agents=[walker()], resume=True, lease_s=LEASE_S) as rt:
        await anyio.sleep(0.5)
        assert rt.running == 0
    await store.aclose()
