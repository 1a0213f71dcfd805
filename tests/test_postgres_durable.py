"""Durable runs on PostgreSQL, end to end: recorded, resumed after a crash, followed from afar.

The scenarios of tests/test_durable.py (its agent, tools and crashable store),
on :class:`tether.postgres.PostgresRunStore`; followers here never re-read on
their own (``recheck_s=600``), so every wake-up is a NOTIFY.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import anyio
import pytest

import tether
from tether import events as ev
from tether.runtime._durable import dump_result

from .pg import PgServer, need_psycopg
from .test_approval_race import approve_while_parking
from .test_durable import Crashable, Hold, agent, assert_trail, effects

pytestmark = pytest.mark.anyio

need_psycopg()

from tether.postgres import PostgresRunStore  # noqa: E402


@pytest.fixture(autouse=True)
def _reset() -> None:
    """Each test starts with no side effects counted and no tool held."""
    effects.clear()
    Hold.release = None


def pg_store(pg_server: PgServer, schema: str) -> PostgresRunStore:
    return PostgresRunStore(pg_server.dsn, schema=schema, recheck_s=600)


async def test_a_run_is_recorded_checkpointed_and_finished(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """PostgreSQL holds the run's every event, its last checkpoint and its result."""
    store = pg_store(pg_server, pg_schema)
    async with tether.Runtime(store=store) as rt:
        result = await rt.run(agent(), "a")
    assert result.output == "done a"
    stored = await store.get(result.run_id)
    assert stored is not None
    assert (stored.status, stored.owner, stored.agent) == ("finished", None, "worker")
    assert stored.result == dump_result(result)
    assert stored.checkpoint is not None
    assert await store.events(result.run_id) == [ev.dump(e) for e in result.events]
    await store.aclose()


async def test_a_crashed_run_resumes_on_another_runtime(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """Killed mid-round, the run is claimed and resumed by another Runtime: no gap, no rerun."""
    store = Crashable(pg_store(pg_server, pg_schema))
    Hold.release, Hold.started = anyio.Event(), anyio.Event()
    async with tether.Runtime(store=store, lease_s=0.3, shutdown_grace_s=0) as rt:
        handle = rt.start(agent(), "a")
        await Hold.started.wait()
        await store.round_two.wait()
        store.crashed = True
        first_owner = rt._keeper.owner if rt._keeper else None
    Hold.release = None
    second = pg_store(pg_server, pg_schema)
    with anyio.fail_after(20):
        async with tether.Runtime(store=second, agents=[agent()], lease_s=0.3, resume=True) as rt2:
            result = await rt2.handle(handle.run_id).result()
    assert result.output == "done a"
    assert effects == {"a-1": 1, "a-2a": 1, "a-2b": 1}
    assert_trail(result.events, result)
    [seam] = [e for e in result.events if isinstance(e, ev.RunResumed)]
    assert (seam.from_round, seam.previous_owner) == (1, first_owner)
    await second.aclose()


async def test_a_handle_on_another_runtime_follows_and_cancels(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """rt.handle() on another Runtime (another store object) follows by NOTIFY and cancels."""
    Hold.release, Hold.started = anyio.Event(), anyio.Event()
    async with tether.Runtime(store=pg_store(pg_server, pg_schema), lease_s=0.3) as rt:
        live = rt.start(agent(), "a")
        await Hold.started.wait()
        async with tether.Runtime(store=pg_store(pg_server, pg_schema)) as other:
            remote = other.handle(live.run_id)
            seen = []
            with anyio.fail_after(10):
                async for event in remote.events():
                    seen.append(type(event).__name__)
                    if event.round == 1 and isinstance(event, ev.Transition):
                        break
            assert seen[0] == "RunStarted"
            remote.cancel("from afar")
            with anyio.fail_after(10):
                result = await remote.result()
        local = await live.result()
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == local.error == "from afar"
    assert result.events == local.events


_OWNER = textwrap.dedent(
    """
    import sys
    import anyio
    import tether
    from tether.postgres import PostgresRunStore
    from tests.test_durable import agent

    async def main() -> None:
        dsn, schema = sys.argv[1:3]
        store = PostgresRunStore(dsn, schema=schema)
        a = agent()
        a.provider.latency_s = 0.2  # a few rounds a follower can watch arrive
        async with tether.Runtime(store=store) as rt:
            handle = rt.start(a, "far")
            while await store.get(handle.run_id) is None:  # recorded as the run starts
                await anyio.sleep(0.01)
            print(handle.run_id, flush=True)
            await handle.result()

    anyio.run(main, backend=sys.argv[3])
    """
)


async def test_a_run_in_another_process_is_followed_live(
    pg_server: PgServer, pg_schema: str, anyio_backend: str
) -> None:
    """A run owned by another process is followed round by round and its result read here."""
    store = pg_store(pg_server, pg_schema)
    args = [sys.executable, "-c", _OWNER, pg_server.dsn, pg_schema, anyio_backend]
    try:
        with anyio.fail_after(30):
            async with await anyio.open_process(
                args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            ) as proc:
                assert proc.stdout is not None
                run_id = (await proc.stdout.receive()).decode().split()[0]
                async with tether.Runtime(store=store) as rt:
                    remote = rt.handle(run_id)
                    seen = [type(e).__name__ async for e in remote.events()]
                    result = await remote.result()
                assert await proc.wait() == 0
        assert seen[0] == "RunStarted"
        assert seen[-1] == "RunFinished"
        assert result.output == "done far"
        assert [type(e).__name__ for e in result.events] == seen
    finally:
        await store.aclose()


@pytest.mark.parametrize("where", ["before", "after"])
async def test_an_approval_while_the_run_parks_waits_for_the_park(
    pg_server: PgServer, pg_schema: str, anyio_backend: str, where: str
) -> None:
    """tests/test_approval_race.py on PostgreSQL: approved while the park is being written
    (before it lands, or after it, before the run left), the call runs once, resumed here."""
    store = pg_store(pg_server, pg_schema)
    await approve_while_parking(store, where, "approve")
    await store.aclose()
