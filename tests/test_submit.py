"""``await rt.submit(...)``: a run recorded before its handle returns; ``tether.RunNotFound``."""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall

from .helpers import assert_consistent

pytestmark = pytest.mark.anyio


class Gate:
    """Where ``wait`` waits until the test opens it."""

    opened: anyio.Event | None = None
    reached: anyio.Event | None = None


@tether.tool
async def wait() -> str:
    """Wait for the test."""
    assert Gate.opened is not None
    assert Gate.reached is not None
    Gate.reached.set()
    await Gate.opened.wait()
    return "waited"


def _script(request: object, ctx: object) -> Reply:
    messages = request.messages  # type: ignore[attr-defined]
    if messages[0].text == "block" and len(messages) == 1:
        return Reply(tool_calls=[ToolCall(name="wait", arguments={})])
    return Reply(text=f"done {messages[0].text}")


def _agent() -> tether.Agent:
    return tether.Agent(name="worker", provider=ScriptedProvider(_script), tools=[wait])


@pytest.fixture(autouse=True)
def _gate() -> None:
    Gate.opened, Gate.reached = anyio.Event(), anyio.Event()


@pytest.fixture(params=["sqlite", "postgres"])
def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[tether.RunStore, tether.RunStore]:
    """Two stores on one run store (one file, one PostgreSQL schema): two processes' view."""
    if request.param == "sqlite":
        path = tmp_path / "runs.db"
        return tether.SQLiteRunStore(path, poll_s=0.01), tether.SQLiteRunStore(path, poll_s=0.01)
    from .pg import need_psycopg

    need_psycopg()
    from tether.postgres import PostgresRunStore

    dsn = request.getfixturevalue("pg_server").dsn
    schema = request.getfixturevalue("pg_schema")
    return PostgresRunStore(dsn, schema=schema), PostgresRunStore(dsn, schema=schema)


async def test_a_submitted_run_is_in_the_store_when_submit_returns(
    two_stores: tuple[tether.RunStore, tether.RunStore],
) -> None:
    """A run queued behind another (max_concurrent_runs=1) is in the store once submit
    returns, before it began: a second Runtime on the store reads it, follows it, and
    gets its result. A run start()ed the same way is not in the store yet."""
    store, other_store = two_stores
    assert Gate.opened is not None
    assert Gate.reached is not None
    with anyio.fail_after(30):
        async with (
            tether.Runtime(store=store, max_concurrent_runs=1) as rt,
            tether.Runtime(store=other_store) as rt2,
        ):
            blocker = rt.start(_agent(), "block")
            await Gate.reached.wait()  # it holds the only slot
            handle = await rt.submit(_agent(), "q")
            started = rt.start(_agent(), "s")
            stored = await other_store.get(handle.run_id)
            assert stored is not None
            assert (stored.status, stored.agent, stored.input, stored.events) == (
                "running",
                "worker",
                "q",
                0,
            )
            assert [m["role"] for m in stored.messages] == ["user"]
            assert await other_store.get(started.run_id) is None  # not recorded yet
            seen: list[ev.Event] = []

            async def follow() -> None:
                async for event in rt2.handle(handle.run_id).events():
                    seen.append(event)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                Gate.opened.set()
                local = await handle.result()
                remote = await rt2.handle(handle.run_id).result()
            await blocker.result()
            await started.result()
    assert_consistent(local)
    assert local.output == "done q"
    assert remote.termination is local.termination is tether.Termination.ANSWERED
    assert remote.events == local.events
    assert seen == list(local.events)


async def test_submit_without_a_store_is_start() -> None:
    """Without a store, submit returns the handle at once; the run is an ordinary one."""
    async with tether.Runtime() as rt:
        handle = await rt.submit(_agent(), "q", run_id="mine")
        assert handle.run_id == "mine"
        result = await handle.result()
        other = rt.start(_agent(), "q", run_id="other")
        with pytest.raises(ValueError, match="already in flight"):
            await rt.submit(_agent(), "q", run_id="other")
        await other.result()
    assert result.output == "done q"


async def test_submit_cancelled_while_recording_still_starts_the_run(tmp_path: Path) -> None:
    """A submit cancelled while the record is written completes the write and starts the
    run: nothing is left recorded with nobody running it."""
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01)
    with anyio.fail_after(30):
        async with tether.Runtime(store=store) as rt:
            with anyio.CancelScope() as scope:
                scope.cancel()
                handle = await rt.submit(_agent(), "q")
                await anyio.sleep(1)  # the cancellation lands here
            assert scope.cancelled_caught
            result = await handle.result()
    assert result.output == "done q"
    stored = await store.get(handle.run_id)
    assert stored is not None
    assert stored.status == "finished"
    await store.aclose()


async def test_submit_refused_by_the_store_starts_nothing(tmp_path: Path) -> None:
    """An id the store has already is the store's ValueError at submit; no run starts."""
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01)
    async with tether.Runtime(store=store) as rt:
        first = await rt.run(_agent(), "q", run_id="dup")
        with pytest.raises(ValueError, match="dup"):
            await rt.submit(_agent(), "again", run_id="dup")
        assert rt.running == 0
    assert first.output == "done q"
    assert [e for e in await store.events("dup") if e["type"] == "RunFinished"]
    await store.aclose()


async def test_unknown_run_ids_raise_run_not_found(tmp_path: Path) -> None:
    """Every way to reach a run by id says RunNotFound (a KeyError) for an unknown one."""
    assert issubclass(tether.RunNotFound, KeyError)
    async with tether.Runtime() as rt:
        with pytest.raises(tether.RunNotFound, match="no run store") as caught:
            rt.handle("nope")
        assert str(caught.value).startswith("no run 'nope'")  # no KeyError quotes
        with pytest.raises(tether.RunNotFound):
            await rt.approve("nope", "call")
        with pytest.raises(tether.RunNotFound):
            await rt.pending_approvals("nope")
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01)
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        async with tether.Runtime(store=store, agents=[_agent()]) as rt:
            handle = rt.handle("nope")
            with pytest.raises(tether.RunNotFound, match="no run 'nope'"):
                await handle.result()
            with pytest.raises(tether.RunNotFound):
                async for _ in handle.events():
                    pass
            for call in (
                rt.resume("nope"),
                rt.pending_approvals("nope"),
                rt.approve("nope", "call"),
            ):
                with pytest.raises(tether.RunNotFound):
                    await call
            handle.cancel()  # a request for nobody: a warning, not the Runtime's end
            handle.stop()
            result = await rt.run(_agent(), "still")
    assert result.output == "done still"
    assert [str(w.message) for w in caught_warnings if w.category is RuntimeWarning] == [
        "cannot cancel or stop run 'nope': the run store has no such run"
    ] * 2
    await store.aclose()


async def test_a_submitted_run_cancelled_in_the_queue_ends_in_the_store(tmp_path: Path) -> None:
    """A submitted run cancelled before it left the queue ends cancelled, and the store
    (which had its record from the start) has that ending: nothing is left running."""
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01)
    assert Gate.opened is not None
    assert Gate.reached is not None
    with anyio.fail_after(30):
        async with tether.Runtime(store=store, max_concurrent_runs=1) as rt:
            blocker = rt.start(_agent(), "block")
            await Gate.reached.wait()
            handle = await rt.submit(_agent(), "q")
            handle.cancel("changed my mind")
            result = await handle.result()
            Gate.opened.set()
            await blocker.result()
    assert result.termination is tether.Termination.CANCELLED
    stored = await store.get(handle.run_id)
    assert stored is not None
    assert stored.status == "finished"
    assert stored.result is not None
    assert stored.result["termination"] == "cancelled"
    assert await store.claimable() == []
    await store.aclose()
