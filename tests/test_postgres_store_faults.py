"""Dropped PostgreSQL connections under load (issue 26, defect 3): ridden out, one ending each.

The server terminates the store's connections (``pg_terminate_backend``, twice)
while 40 durable runs are in flight. Every run must end answered (none
crashed), the store must hold for each exactly the ending its caller got, no
tool call may run twice, and a later ``resume=True`` Runtime finds nothing to
resume. Only this test's connections are terminated: those whose last statement
named its schema (the server is shared). The lease is short (3 s), so a fault
the store takes seconds to get over shows as a ``store_failed`` run.

The root of such seconds, once: the pool's own check on checkout slept a
backoff (1 s, then 2 s, ...) in the worker thread after each dropped
connection it handed out, so after a kill one job went through the pool's dead
idle connections one a second, into a ``PoolTimeout``; renewals failed with it
and leases lapsed (about 1 pass in 6 of the test below at ``lease_s=3``).
``test_a_pool_of_dropped_connections_serves_the_next_call`` pins that.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

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
LEASE_S = 3.0

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


def terminate_pids(pg_server: PgServer, pids: set[int]) -> None:
    """Terminate the backends ``pids`` and wait until they are gone."""
    with pg_server.connect() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (list(pids),)
        )
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (list(pids),)
        ).fetchone() != (0,):
            conn.execute("SELECT pg_sleep(0.01)")


async def test_a_pool_of_dropped_connections_serves_the_next_call(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """The server drops all eight idle pooled connections: the next call is served (through
    the dead ones at once, onto a new one), not refused with a pool timeout."""
    store = PostgresRunStore(
        pg_server.dsn, schema=pg_schema, max_connections=8, connect_timeout_s=2.0
    )

    def backend(conn: Any) -> int:
        conn.execute("SELECT pg_sleep(0.2)")  # held a moment: eight at once fill the pool
        return int(conn.info.backend_pid)

    pids: set[int] = set()

    async def one() -> None:
        pids.add(await store._run(backend))

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(one)
    assert len(pids) == 8  # eight connections, idle in the pool now
    await anyio.to_thread.run_sync(terminate_pids, pg_server, pids)
    assert await store.get("nope") is None  # before: RunStoreUnavailable (no connection in 2 s)
    assert await store._run(lambda conn: int(conn.info.backend_pid)) not in pids
    await store.aclose()


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
