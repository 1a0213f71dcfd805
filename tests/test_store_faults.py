"""Store faults (DESIGN §22, issue 26): ridden out within the round, or one ``store_failed`` end.

A :class:`Flaky` store makes chosen calls fail the way a lost connection does,
with :class:`~tether.runtime._runstore.RunStoreUnavailable`: *before* the call
reaches the store (nothing written), *after* it (written, the answer lost: a
write of unknown outcome), or every call while it is ``down``. Real faults are
in ``tests/test_postgres_store_faults.py`` (``pg_terminate_backend``) and
``tests/test_full_disk.py`` (``RLIMIT_FSIZE``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.runtime._runstore import RunStoreUnavailable

from .test_durable import Hold, agent, asker, assert_trail, effects, wait_status

pytestmark = [
    pytest.mark.anyio,
    # The keeper says when a renewal failed past its retries; these tests make it so.
    pytest.mark.filterwarnings("ignore:the run store failed:RuntimeWarning"),
]

LEASE_S = 0.5


@pytest.fixture(autouse=True)
def _reset() -> None:
    effects.clear()
    Hold.release = None


class Flaky:
    """A run store whose planned calls fail with ``RunStoreUnavailable`` (see the module
    docstring); everything else goes to the store it wraps."""

    def __init__(self, inner: tether.RunStore) -> None:
        self.inner = inner
        #: Per method, what its next calls do: "before" or "after" (then as usual).
        self.plan: dict[str, list[str]] = {}
        #: Every call fails before reaching the store.
        self.down = False
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        planned = self.plan.get(name)
        when = planned.pop(0) if planned else None
        if self.down or when == "before":
            await anyio.lowlevel.checkpoint()
            raise RunStoreUnavailable(f"{name}: the connection was lost before it was sent")
        out = await getattr(self.inner, name)(*args, **kwargs)
        if when == "after":
            raise RunStoreUnavailable(f"{name}: the connection was lost before the answer")
        return out

    async def create(self, *a: Any, **kw: Any) -> Any:
        return await self._call("create", *a, **kw)

    async def get(self, *a: Any, **kw: Any) -> Any:
        return await self._call("get", *a, **kw)

    async def commit(self, *a: Any, **kw: Any) -> Any:
        return await self._call("commit", *a, **kw)

    async def record_tool(self, *a: Any, **kw: Any) -> Any:
        return await self._call("record_tool", *a, **kw)

    async def tool_records(self, *a: Any, **kw: Any) -> Any:
        return await self._call("tool_records", *a, **kw)

    async def park(self, *a: Any, **kw: Any) -> Any:
        return await self._call("park", *a, **kw)

    async def finish(self, *a: Any, **kw: Any) -> Any:
        return await self._call("finish", *a, **kw)

    async def renew(self, *a: Any, **kw: Any) -> Any:
        return await self._call("renew", *a, **kw)

    async def claim(self, *a: Any, **kw: Any) -> Any:
        return await self._call("claim", *a, **kw)

    async def events(self, *a: Any, **kw: Any) -> Any:
        return await self._call("events", *a, **kw)


def flaky(tmp_path: Path) -> Flaky:
    return Flaky(tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01))


async def ended(store: tether.RunStore, run_id: str) -> str | None:
    """The termination the store holds for ``run_id`` (``None``: not finished)."""
    stored = await store.get(run_id)
    assert stored is not None
    return None if stored.result is None else str(stored.result["termination"])


async def resumes_nothing(path: Path) -> None:
    """A ``resume=True`` Runtime on the file finds nothing to claim."""
    store = tether.SQLiteRunStore(path, poll_s=0.01)
    assert await store.claimable() == []
    async with tether.Runtime(store=store, agents=[agent()], resume=True, lease_s=LEASE_S) as rt:
        await anyio.sleep(LEASE_S)
        assert rt.running == 0
    await store.aclose()


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("method", ["create", "commit", "record_tool", "finish"])
async def test_a_passing_fault_is_ridden_out_within_the_round(
    tmp_path: Path, anyio_backend: str, method: str, when: str
) -> None:
    """A write lost twice (before it was sent, or after it committed: unknown outcome) is
    tried again: the run ends answered, once, and the store holds exactly its trail."""
    store = flaky(tmp_path)
    store.plan[method] = [when, when]
    seen: list[ev.Event] = []
    async with tether.Runtime(store=store, lease_s=LEASE_S, event_sink=seen.append) as rt:
        with anyio.fail_after(20):
            result = await rt.run(agent(), "a")
    assert result.termination is tether.Termination.ANSWERED, result.error
    assert effects == {"a-1": 1, "a-2a": 1, "a-2b": 1}
    assert store.plan[method] == []  # the faults happened
    assert_trail(result.events, result)
    assert await store.inner.events(result.run_id) == [ev.dump(e) for e in result.events]
    assert await ended(store.inner, result.run_id) == "answered"
    assert [type(e) for e in seen].count(ev.RunFinished) == 1
    await resumes_nothing(tmp_path / "runs.db")


async def test_a_sink_sees_run_finished_once_after_the_end_is_stored(
    tmp_path: Path, anyio_backend: str
) -> None:
    """The end's write fails, then succeeds: the sink and the followers get RunFinished
    once, and only once the store has the end."""
    store = flaky(tmp_path)
    store.plan["finish"] = ["after", "before", "after"]
    finished_in_store: list[str | None] = []

    def sink(event: ev.Event) -> None:
        if isinstance(event, ev.RunFinished):
            # In the sink's thread: the store already holds the end it reports.
            finished_in_store.append(
                anyio.from_thread.run(ended, store.inner, event.run_id, token=token)
            )

    async with tether.Runtime(store=store, lease_s=LEASE_S, event_sink=sink) as rt:
        token = anyio.lowlevel.current_token()
        handle = rt.start(agent(), "a")
        followed = [e async for e in handle.events()]
        result = await handle.result()
    assert result.termination is tether.Termination.ANSWERED
    assert finished_in_store == ["answered"]
    assert [type(e) for e in followed].count(ev.RunFinished) == 1
    assert followed == list(result.events)


async def test_a_fault_past_the_lease_ends_the_run_store_failed_and_the_store_agrees(
    tmp_path: Path, anyio_backend: str
) -> None:
    """The store is down from the end's write on, longer than lease_s: the caller gets
    store_failed (never the answer the store did not keep), the sink one RunFinished;
    once the store is back the same Runtime records store_failed, and nobody resumes it."""
    store = flaky(tmp_path)
    seen: list[ev.Event] = []
    real_finish = store.finish

    async def finish_down(*a: Any, **kw: Any) -> Any:
        if "finish" not in store.calls:  # the run's end: down from here on
            store.down = True
        return await real_finish(*a, **kw)

    store.finish = finish_down  # type: ignore[method-assign]
    async with tether.Runtime(store=store, lease_s=LEASE_S, event_sink=seen.append) as rt:
        with anyio.fail_after(20):
            result = await rt.run(agent(), "a")
        assert result.termination is tether.Termination.STORE_FAILED
        assert result.output is None
        assert "(answered)" in (result.error or "")
        assert await ended(store.inner, result.run_id) is None  # not yet: the store is down
        store.down = False  # back: the Runtime records the end it reported
    assert await ended(store.inner, result.run_id) == "store_failed"
    finished = [e for e in seen if isinstance(e, ev.RunFinished)]
    assert [e.termination for e in finished] == [tether.Termination.STORE_FAILED]
    await resumes_nothing(tmp_path / "runs.db")


async def test_a_round_that_cannot_be_committed_past_the_lease_ends_store_failed(
    tmp_path: Path, anyio_backend: str
) -> None:
    """Down at a round's commit for longer than the lease: the run stops there (no more
    tool calls), ends store_failed, and the store gets that end once it is back."""
    store = flaky(tmp_path)
    real_commit = store.commit

    async def commit(*a: Any, **kw: Any) -> Any:
        if store.calls.get("commit", 0) == 1:  # the first round's boundary
            store.down = True
        return await real_commit(*a, **kw)

    store.commit = commit  # type: ignore[method-assign]
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        with anyio.fail_after(20):
            result = await rt.run(agent(), "a")
        store.down = False
    assert result.termination is tether.Termination.STORE_FAILED
    assert effects == {"a-1": 1}  # round 2's calls never started
    assert await ended(store.inner, result.run_id) == "store_failed"
    await resumes_nothing(tmp_path / "runs.db")


async def test_a_run_cancelled_while_its_commit_is_retried_ends_cancelled_in_both(
    tmp_path: Path, anyio_backend: str
) -> None:
    """Cancelled during the backoff of a commit's retries: the commit is shielded and
    lands, then the run ends cancelled, in the caller and in the store alike."""
    store = flaky(tmp_path)
    real_commit = store.commit
    retrying = anyio.Event()

    async def commit(*a: Any, **kw: Any) -> Any:
        if store.calls.get("commit", 0) == 1:
            store.plan["commit"] = ["before", "before", "before"]
        if store.calls.get("commit", 0) == 2:
            retrying.set()
        return await real_commit(*a, **kw)

    store.commit = commit  # type: ignore[method-assign]
    async with tether.Runtime(store=store, lease_s=2.0) as rt:
        handle = rt.start(agent(), "a")
        with anyio.fail_after(20):
            await retrying.wait()
            handle.cancel("enough")
            result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    assert await ended(store.inner, result.run_id) == "cancelled"
    assert await store.inner.events(result.run_id) == [ev.dump(e) for e in result.events]


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_park_lost_before_or_after_it_committed_parks_once(
    tmp_path: Path, anyio_backend: str, when: str
) -> None:
    """A park whose answer is lost is tried again, or found done: the run parks once, and
    answered it goes on to its end. (Its resumed trail's second ApprovalRequested is
    issue 26's first defect, the resume's, not the park's.)"""
    store = flaky(tmp_path)
    store.plan["park"] = [when]
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        handle = rt.start(asker(), "k")
        with anyio.fail_after(20):
            parked = await wait_status(store.inner, handle.run_id, "parked")
            assert parked.pending == ("b1",)
            # The store shows it parked while the run settles the park's lost answer:
            # approving a run still in flight here does not resume it (rt.approve's race).
            while rt.running:  # noqa: ASYNC110 - no event for a run leaving
                await anyio.sleep(0.01)
            await rt.approve(handle.run_id, "b1")
            result = await handle.result()
    assert store.plan["park"] == []
    assert result.output == "done: bumped k"
    assert effects == {"k": 1}
    assert await ended(store.inner, result.run_id) == "answered"
