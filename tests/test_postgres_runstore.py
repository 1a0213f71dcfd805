"""PostgresRunStore: the run store contract, and what is PostgreSQL's own (LISTEN/NOTIFY, claims
raced by processes, the schema)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.runstore_contract import *  # noqa: F403
from tests.runstore_contract import MakeStore, new_run

from .pg import PgServer, need_psycopg

pytestmark = pytest.mark.anyio

need_psycopg()

from tether.postgres import PostgresRunStore  # noqa: E402
from tether.postgres._pg_runs import _RUNS_V1  # noqa: E402


@pytest.fixture
def make_store(pg_server: PgServer, pg_schema: str) -> MakeStore:
    """A new PostgresRunStore object on one fresh schema each time it is called."""
    return lambda: PostgresRunStore(pg_server.dsn, schema=pg_schema)


def _event(seq: int, run_id: str) -> dict[str, Any]:
    return {"type": "StageEntered", "run_id": run_id, "seq": seq, "round": 0, "at": 1.0}


_CLAIMER = textwrap.dedent(
    """
    import sys, time
    import anyio
    from tether.postgres import PostgresRunStore

    async def main() -> None:
        dsn, schema, me, runs, start = sys.argv[1:6]
        store = PostgresRunStore(dsn, schema=schema)
        try:
            await store.get("warm-up")  # connect first, so that the race is the claims
            await anyio.sleep(max(0.0, float(start) - time.time()))
            for i in range(int(runs)):
                if await store.claim(f"r{i}", owner=me, lease_s=60) is not None:
                    print(f"r{i}", flush=True)
        finally:
            await store.aclose()

    anyio.run(main, backend=sys.argv[6])
    """
)


# Processes racing: asyncio in the default tier, trio in the slow one (pytest -m slow).
@pytest.mark.parametrize("anyio_backend", ["asyncio", pytest.param("trio", marks=pytest.mark.slow)])
async def test_processes_racing_for_expired_leases_claim_each_run_once(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Four processes claim the same 40 expired runs at the same moment: each is won once."""
    store = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    try:
        for i in range(40):
            await store.create(new_run(f"r{i}"), owner="dead", lease_s=0)
        start = time.time() + 3.0
        won: dict[str, list[str]] = {}

        async def claimer(me: str) -> None:
            args = [pg_server.dsn, pg_schema, me, "40", str(start), anyio_backend]
            proc = await anyio.run_process(
                [sys.executable, "-c", _CLAIMER, *args], check=False, stderr=subprocess.STDOUT
            )
            assert proc.returncode == 0, proc.stdout.decode()
            for run_id in proc.stdout.decode().split():
                won.setdefault(run_id, []).append(me)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for n in range(4):
                    tg.start_soon(claimer, f"p{n}")
        assert sorted(won) == sorted(f"r{i}" for i in range(40))
        assert all(len(owners) == 1 for owners in won.values()), won
        for run_id, (owner,) in won.items():
            run = await store.get(run_id)
            assert run is not None
            assert (run.owner, run.previous_owner, run.status) == (owner, "dead", "running")
        assert await store.claimable() == []
    finally:
        await store.aclose()


_COMMITTER = textwrap.dedent(
    """
    import sys
    import anyio
    from tether.postgres import PostgresRunStore

    async def main() -> None:
        dsn, schema = sys.argv[1:3]
        store = PostgresRunStore(dsn, schema=schema)
        try:
            event = {"type": "StageEntered", "run_id": "r1", "seq": 0, "round": 0, "at": 1.0}
            await store.commit("r1", owner="A", events=[event], checkpoint=None, lease_s=60)
        finally:
            await store.aclose()

    anyio.run(main)
    """
)


async def test_a_follower_is_woken_by_notify_from_another_process(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """A follower that never re-reads on its own (recheck_s=600) wakes at a NOTIFY from afar."""
    follower = PostgresRunStore(pg_server.dsn, schema=pg_schema, recheck_s=600)
    reads: list[int] = []
    try:
        await follower.create(new_run(), owner="A", lease_s=60)
        woke = anyio.Event()

        async def follow() -> None:
            await follower.wait("r1", seen=0, timeout_s=60)
            reads.append(len(await follower.events("r1")))
            woke.set()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await anyio.sleep(0.3)  # the follower is listening and parked
                assert not woke.is_set()
                proc = await anyio.run_process(
                    [sys.executable, "-c", _COMMITTER, pg_server.dsn, pg_schema],
                    check=False,
                    stderr=subprocess.STDOUT,
                )
                assert proc.returncode == 0, proc.stdout.decode()
                with anyio.fail_after(5):  # far below recheck_s: the NOTIFY woke it
                    await woke.wait()
        assert reads == [1]
    finally:
        await follower.aclose()


async def test_many_followers_of_many_runs_share_one_listener(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Fifty followers of ten runs each wake on their own run's events, through one LISTEN."""
    store = PostgresRunStore(pg_server.dsn, schema=pg_schema, recheck_s=600)
    writer = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    woken: list[str] = []
    try:
        for i in range(10):
            await store.create(new_run(f"r{i}"), owner="A", lease_s=60)

        all_woken = anyio.Event()

        async def follow(run_id: str) -> None:
            await store.wait(run_id, seen=0, timeout_s=60)
            woken.append(run_id)
            if len(woken) == 25:
                all_woken.set()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for n in range(50):
                    tg.start_soon(follow, f"r{n % 10}")
                await anyio.sleep(0.3)
                assert woken == []
                for i in range(0, 10, 2):  # only the even runs get events
                    events = [_event(0, f"r{i}")]
                    await writer.commit(
                        f"r{i}", owner="A", events=events, checkpoint=None, lease_s=60
                    )
                await all_woken.wait()
                assert sorted(set(woken)) == [f"r{i}" for i in range(0, 10, 2)]
                tg.cancel_scope.cancel()
        listeners = [t for t in threading.enumerate() if t.name.startswith("tether-listen-")]
        assert len(listeners) == 1
    finally:
        await store.aclose()
        await writer.aclose()


async def test_a_lost_listen_connection_reconnects_and_wakes(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """When the server drops the LISTEN connection, the store listens again; followers wake."""
    store = PostgresRunStore(pg_server.dsn, schema=pg_schema, recheck_s=600)
    writer = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    try:
        await store.create(new_run(), owner="A", lease_s=60)
        await store.wait("r1", seen=0, timeout_s=0.01)  # starts the listener
        killed: list[Any] = []
        with anyio.fail_after(10), pg_server.connect() as conn:
            while not killed:  # the listener connects in the background (slowly, under load)
                killed = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN%%' AND query LIKE %s",
                    (f"%{store.channel}%",),
                ).fetchall()
                await anyio.sleep(0.02)
        assert killed == [(True,)]
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:

                async def follow() -> None:
                    await store.wait("r1", seen=0, timeout_s=60)

                tg.start_soon(follow)
                await anyio.sleep(1.0)  # the listener reconnects meanwhile
                await writer.commit(
                    "r1", owner="A", events=[_event(0, "r1")], checkpoint=None, lease_s=60
                )
    finally:
        await store.aclose()
        await writer.aclose()


async def test_events_keep_any_json_exactly(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Events, checkpoints and results with NUL characters, emoji and nesting read back equal."""
    store = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    try:
        await store.create(new_run(), owner="A", lease_s=60)
        odd = {**_event(0, "r1"), "text": "nul \x00 and 🐍", "nested": [[[{"a": 1.5}]]]}
        await store.commit("r1", owner="A", events=[odd], checkpoint={"x": "\x00"}, lease_s=60)
        await store.finish("r1", owner="A", events=[], result={"output": "\x00🐍"})
        assert await store.events("r1") == [odd]
        run = await store.get("r1")
        assert run is not None
        assert (run.checkpoint, run.result) == ({"x": "\x00"}, {"output": "\x00🐍"})
        # The listing reads such a row too (what PostgreSQL's json cannot read is unknown).
        (listed,) = (await store.list_runs()).runs
        assert (listed.run_id, listed.status) == ("r1", "finished")
    finally:
        await store.aclose()


async def test_runs_tables_are_versioned_and_a_newer_version_refused(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """The runs component records version 3; a higher one is refused with a clear error."""
    store = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    await store.create(new_run(), owner="A", lease_s=60)
    await store.aclose()
    with pg_server.connect() as conn:
        rows = conn.execute(
            f'SELECT component, version FROM "{pg_schema}".tether_versions'
        ).fetchall()
        assert rows == [("runs", 3)]
        conn.execute(f'UPDATE "{pg_schema}".tether_versions SET version = 4')
    again = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    with pytest.raises(tether.RunStoreError, match="schema version 4"):
        await again.get("r1")
    await again.aclose()


async def test_version_1_tables_are_migrated_to_epochs(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Tables from before lease epochs are migrated on first use: their runs are at epoch
    0, the next claim gives epoch 1, and the claimer's fenced writes land."""
    with pg_server.connect() as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
        conn.execute(
            f'CREATE TABLE "{pg_schema}".tether_versions '
            "(component text PRIMARY KEY, version integer NOT NULL)"
        )
        for statement in _RUNS_V1:
            conn.execute(statement.format(schema=f'"{pg_schema}"').encode())
        conn.execute(f"INSERT INTO \"{pg_schema}\".tether_versions VALUES ('runs', 1)")
        conn.execute(
            f'INSERT INTO "{pg_schema}".runs (run_id, agent, input, messages, created_at, '
            "status, owner, lease_expires_at, updated_at) VALUES ('old', 'planner', 'hi', "
            "'[]', 1, 'running', 'gone', 0, 1)"
        )
    store = PostgresRunStore(pg_server.dsn, schema=pg_schema)
    try:
        old = await store.get("old")
        assert old is not None
        assert (old.owner, old.epoch, old.input) == ("gone", 0, "hi")
        claim = await store.claim("old", owner="A", lease_s=60)
        assert claim is not None
        assert claim.epoch == 1
        await store.commit(
            "old", owner="A", events=[], checkpoint={"round": 1}, lease_s=60, epoch=1
        )
    finally:
        await store.aclose()
    with pg_server.connect() as conn:
        rows = conn.execute(
            f'SELECT component, version FROM "{pg_schema}".tether_versions'
        ).fetchall()
        assert rows == [("runs", 3)]


def test_bad_arguments_are_clear() -> None:
    """A bad recheck interval is a ValueError at construction; the repr hides the password."""
    with pytest.raises(ValueError, match="recheck_s"):
        PostgresRunStore("postgresql://x/y", recheck_s=0)
    store = PostgresRunStore("postgresql://u:pw@h/d", schema="s")
    assert repr(store) == "PostgresRunStore('postgresql://u@h:5432/d', schema='s')"
    assert isinstance(store, tether.RunStore)


def test_the_b10_benchmark_runs(pg_server: PgServer) -> None:
    """`python -m benchmarks.durable_pg` runs B2 with and without the store and drops its schema."""
    root = Path(__file__).resolve().parent.parent
    args = ["--runs", "5", "--rounds", "2", "--repeats", "1", "--dsn", pg_server.dsn]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.durable_pg", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line.split(":")[0].strip() for line in proc.stdout.splitlines()[1:]] == [
        "asyncio",
        "trio",
    ]
    with pg_server.connect() as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, 'tether_bench_')"
        ).fetchall()
    assert left == []
