"""Cancellation at every await point durability adds: the store's writes, lease renewal, parking.

A store whose chosen method waits at a gate holds the run there; the test cancels
(the run, or the Runtime's host), releases the gate, and checks that the write
completed whole (writes are shielded), the run ended exactly once, the store
agrees with the run's result, and no task was left behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.runtime._durable import dump_result

from .test_durable import Hold, agent, asker, effects

pytestmark = pytest.mark.anyio


class Gated(tether.SQLiteRunStore):
    """A SQLite run store whose method ``at`` waits at a gate the first time it is called."""

    def __init__(self, path: Path, at: str) -> None:
        super().__init__(path, poll_s=0.01)
        self.at = at
        self.reached = anyio.Event()
        self.release = anyio.Event()

    async def _gate(self, name: str) -> None:
        if name == self.at and not self.reached.is_set():
            self.reached.set()
            await self.release.wait()

    async def create(self, *a: Any, **kw: Any) -> None:
        await self._gate("create")
        await super().create(*a, **kw)

    async def commit(self, *a: Any, **kw: Any) -> Any:
        await self._gate("commit")
        return await super().commit(*a, **kw)

    async def record_tool(self, *a: Any, **kw: Any) -> None:
        await self._gate("record_tool")
        await super().record_tool(*a, **kw)

    async def park(self, *a: Any, **kw: Any) -> None:
        await self._gate("park")
        await super().park(*a, **kw)

    async def finish(self, *a: Any, **kw: Any) -> None:
        await self._gate("finish")
        await super().finish(*a, **kw)

    async def renew(self, *a: Any, **kw: Any) -> Any:
        await self._gate("renew")
        return await super().renew(*a, **kw)

    async def tool_records(self, *a: Any, **kw: Any) -> Any:
        await self._gate("tool_records")
        return await super().tool_records(*a, **kw)


@pytest.fixture(autouse=True)
def _reset() -> None:
    """No side effects counted, no tool held."""
    effects.clear()
    Hold.release = None


async def check_stored(store: tether.RunStore, result: tether.RunResult) -> None:
    """The store holds the run finished, with the result's events and the result."""
    stored = await store.get(result.run_id)
    assert stored is not None
    assert stored.status == "finished"
    assert stored.result == dump_result(result)
    assert await store.events(result.run_id) == [ev.dump(e) for e in result.events]
    assert [e.seq for e in result.events] == list(range(len(result.events)))


@pytest.mark.parametrize("at", ["create", "commit", "record_tool", "park"])
async def test_cancelled_during_a_write_the_write_completes_and_the_run_ends_once(
    tmp_path: Path, at: str
) -> None:
    """A run cancelled while its store write is in flight ends cancelled after the write."""
    store = Gated(tmp_path / "runs.db", at)
    tasks = len(anyio.get_running_tasks())
    with anyio.fail_after(20):
        async with tether.Runtime(store=store) as rt:
            handle = rt.start(asker() if at == "park" else agent(), "a")
            await store.reached.wait()
            handle.cancel("enough")
            await anyio.wait_all_tasks_blocked()
            assert not handle.done  # the write is shielded: the run waits for it
            store.release.set()
            result = await handle.result()
            assert rt.running == 0
        assert result.termination is tether.Termination.CANCELLED
        assert result.error == "enough"
        assert [type(e) for e in result.events].count(ev.RunFinished) == 1
        await check_stored(store, result)
    assert len(anyio.get_running_tasks()) == tasks
    await store.aclose()


@pytest.mark.parametrize(
    ("at", "ran", "shielded"), [("tool_records", {}, False), ("record_tool", {"k": 1}, True)]
)
async def test_an_answered_run_cancelled_in_its_held_round_ends_once(
    tmp_path: Path, at: str, ran: dict[str, int], shielded: bool
) -> None:
    """A parked run, approved and resumed, cancelled while its held round looks up its tool
    records (a read: cut at once) or records its approved call (a write: completed first):
    it ends cancelled once, stored, nothing left."""
    path = tmp_path / "runs.db"
    async with tether.Runtime(store=tether.SQLiteRunStore(path, poll_s=0.01)) as rt:
        run_id = rt.start(asker(), "k").run_id
        while (await rt.pending_approvals(run_id)) == []:  # noqa: ASYNC110 (the store is polled)
            await anyio.sleep(0.01)
    store = Gated(path, at)
    tasks = len(anyio.get_running_tasks())
    with anyio.fail_after(20):
        async with tether.Runtime(store=store, agents=[asker()]) as rt2:
            await rt2.approve(run_id, "b1")  # resumed here
            await store.reached.wait()
            handle = rt2.handle(run_id)
            handle.cancel("enough")
            if shielded:  # the write completes first: the run waits for it
                await anyio.wait_all_tasks_blocked()
                assert not handle.done
                store.release.set()
                result = await handle.result()
            else:  # the read is cut at once: the run ends (its end stored) without it
                result = await handle.result()
                store.release.set()
        assert result.termination is tether.Termination.CANCELLED
        assert result.error == "enough"
        assert effects == ran
        kinds = [type(e) for e in result.events]
        assert kinds.count(ev.RunFinished) == kinds.count(ev.ApprovalRequested) == 1
        await check_stored(store, result)
    assert len(anyio.get_running_tasks()) == tasks
    await store.aclose()


async def test_a_host_cancelled_during_the_last_write_still_stores_the_end(
    tmp_path: Path,
) -> None:
    """The Runtime's host cancelled while the result is being written: the result is stored."""
    store = Gated(tmp_path / "runs.db", "finish")
    handles: list[tether.RunHandle] = []
    tasks = len(anyio.get_running_tasks())

    async def host(scope: anyio.CancelScope) -> None:
        with scope:
            async with tether.Runtime(store=store) as rt:
                handles.append(rt.start(agent(), "a"))
                await anyio.sleep_forever()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()
            tg.start_soon(host, scope)
            await store.reached.wait()
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            store.release.set()
    result = await handles[0].result()
    assert result.termination is tether.Termination.ANSWERED
    await check_stored(store, result)
    assert len(anyio.get_running_tasks()) == tasks
    await store.aclose()


async def test_a_runtime_closed_during_lease_renewal_leaves_nothing(tmp_path: Path) -> None:
    """Closing the Runtime while it renews leases ends the renewal and the run, and no task."""
    store = Gated(tmp_path / "runs.db", "renew")
    Hold.release, Hold.started = anyio.Event(), anyio.Event()
    tasks = len(anyio.get_running_tasks())
    with anyio.fail_after(20):
        async with tether.Runtime(store=store, lease_s=0.3, shutdown_grace_s=0) as rt:
            handle = rt.start(agent(), "a")
            await store.reached.wait()  # the renewal waits at the gate, never released
        result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    await check_stored(store, result)
    assert len(anyio.get_running_tasks()) == tasks
    await store.aclose()


async def test_followers_of_a_stored_run_cancel_cleanly(tmp_path: Path) -> None:
    """Cancelling a task that waits on a stored run's result or events leaves nothing behind."""
    path = tmp_path / "runs.db"
    Hold.release, Hold.started = anyio.Event(), anyio.Event()
    tasks = len(anyio.get_running_tasks())
    with anyio.fail_after(20):
        async with tether.Runtime(store=tether.SQLiteRunStore(path, poll_s=0.01)) as rt:
            live = rt.start(agent(), "a")
            await Hold.started.wait()
            async with tether.Runtime(store=tether.SQLiteRunStore(path, poll_s=0.01)) as other:
                remote = other.handle(live.run_id)

                async def follow() -> None:
                    async for _ in remote.events():
                        pass

                with anyio.move_on_after(0.2):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(follow)
                        await remote.result()
                assert not remote.done
            Hold.release.set()
            assert (await live.result()).ok
    assert len(anyio.get_running_tasks()) == tasks
