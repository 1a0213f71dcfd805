"""The run store conformance suite: every :class:`tether.RunStore` must pass it.

Reuse it from a store's own test module by importing the tests and giving
a ``make_store`` fixture: a callable that returns a *new store object on the
same, fresh, storage* each time it is called (several objects on one store
stand for several processes)::

    from tests.runstore_contract import *  # noqa: F403

    @pytest.fixture
    def make_store(tmp_path):
        return lambda: tether.SQLiteRunStore(tmp_path / "runs.db")

The tests close every store they make.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import pytest

from tether import LeaseLost, RunStore
from tether.runtime import Answer, ListableRunStore, NewRun, ToolRecord

pytestmark = pytest.mark.anyio

MakeStore = Callable[[], RunStore]

__all__ = [
    "test_answers_make_a_parked_run_ready_once",
    "test_claim_takes_an_expired_lease_only",
    "test_commit_appends_gap_free_and_checkpoints",
    "test_concurrent_claimers_in_threads_one_wins",
    "test_concurrent_claimers_one_wins",
    "test_create_and_get",
    "test_epoch_grows_with_every_claim",
    "test_finish_stores_the_result_and_ends_ownership",
    "test_list_runs_filters_and_pages_by_keyset",
    "test_list_runs_refuses_bad_arguments",
    "test_list_runs_sorts_by_the_counts_in_keyset_pages",
    "test_park_releases_the_run",
    "test_release_makes_the_run_claimable_at_once",
    "test_renew_checks_the_epoch",
    "test_renew_extends_own_leases_and_reports_lost_ones",
    "test_requests_reach_the_owner",
    "test_tool_records_are_kept_per_round",
    "test_tool_records_of_every_round_come_in_recording_order",
    "test_wait_wakes_on_new_events_and_times_out",
    "test_writes_need_the_lease",
    "test_writes_of_an_earlier_epoch_are_refused",
]


@asynccontextmanager
async def opened(make_store: MakeStore) -> AsyncIterator[RunStore]:
    store = make_store()
    assert isinstance(store, RunStore)
    try:
        yield store
    finally:
        await store.aclose()


def new_run(run_id: str = "r1", **kw: Any) -> NewRun:
    return NewRun(run_id=run_id, agent="planner", input="hello", created_at=1.0, **kw)


def event(seq: int, run_id: str = "r1", kind: str = "StageEntered") -> dict[str, Any]:
    return {"type": kind, "run_id": run_id, "seq": seq, "round": 0, "at": 1.0}


async def test_create_and_get(make_store: MakeStore) -> None:
    """A created run is running, owned, leased, with no events; a second create is refused."""
    async with opened(make_store) as store:
        assert await store.get("r1") is None
        message = {"role": "user", "content": [{"type": "text", "text": "hello"}]}
        await store.create(new_run(messages=[message], parent_run_id="p"), owner="A", lease_s=60)
        run = await store.get("r1")
        assert run is not None
        assert (run.agent, run.input, run.parent_run_id, run.messages) == (
            "planner",
            "hello",
            "p",
            [message],
        )
        assert (run.status, run.owner, run.events, run.checkpoint, run.result) == (
            "running",
            "A",
            0,
            None,
            None,
        )
        assert run.lease_expires_at is not None
        assert run.cancel is None
        assert not run.stop
        with pytest.raises(ValueError, match="r1"):
            await store.create(new_run(), owner="B", lease_s=60)
        again = await store.get("r1")
        assert again is not None
        assert again.owner == "A"


async def test_commit_appends_gap_free_and_checkpoints(make_store: MakeStore) -> None:
    """Commits append in seq order and replace the checkpoint; a gap writes nothing."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        control = await store.commit(
            "r1", owner="A", events=[event(0), event(1)], checkpoint={"round": 1}, lease_s=60
        )
        assert (control.lost, control.cancel, control.stop) == (False, None, False)
        await store.commit("r1", owner="A", events=[event(2)], checkpoint=None, lease_s=60)
        for bad in ([event(4)], [event(2)], [event(3), event(5)]):
            with pytest.raises(ValueError, match="seq"):
                await store.commit("r1", owner="A", events=bad, checkpoint={"round": 9}, lease_s=60)
        run = await store.get("r1")
        assert run is not None
        assert run.events == 3
        assert run.checkpoint == {"round": 1}
        assert [e["seq"] for e in await store.events("r1")] == [0, 1, 2]
        assert await store.events("r1", start=2) == [event(2)]
        assert await store.events("r1", start=3) == []
        assert await store.events("nope") == []


async def test_writes_need_the_lease(make_store: MakeStore) -> None:
    """Another owner, or the owner after its lease expired, writes nothing: LeaseLost."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        record = ToolRecord(round=1, call_id="c1", name="add", arguments="{}", result={"x": 1})
        with pytest.raises(LeaseLost):
            await store.commit("r1", owner="B", events=[event(0)], checkpoint={}, lease_s=60)
        with pytest.raises(LeaseLost):
            await store.record_tool("r1", owner="B", record=record)
        with pytest.raises(LeaseLost):
            await store.finish("r1", owner="B", events=[event(0)], result={})
        with pytest.raises(LeaseLost):
            await store.park("r1", owner="B", events=[], checkpoint={}, pending=["c1"])
        with pytest.raises(LeaseLost):
            await store.commit("nope", owner="A", events=[], checkpoint=None, lease_s=60)
        await store.commit("r1", owner="A", events=[], checkpoint=None, lease_s=0)  # expires now
        with pytest.raises(LeaseLost):
            await store.commit("r1", owner="A", events=[event(0)], checkpoint={}, lease_s=60)
        run = await store.get("r1")
        assert run is not None
        assert run.events == 0
        assert run.checkpoint is None
        assert await store.tool_records("r1", 1) == []


async def test_claim_takes_an_expired_lease_only(make_store: MakeStore) -> None:
    """A live lease is not claimable; an expired one is, once, and the old owner is fenced."""
    async with opened(make_store) as store:
        await store.create(new_run("live"), owner="A", lease_s=60)
        await store.create(new_run("dead"), owner="A", lease_s=0)
        assert await store.claimable() == ["dead"]
        assert await store.claim("live", owner="B", lease_s=60) is None
        assert await store.claim("nope", owner="B", lease_s=60) is None
        claim = await store.claim("dead", owner="B", lease_s=60)
        assert claim is not None
        assert claim.previous_owner == "A"
        assert (claim.run.owner, claim.run.status, claim.run.previous_owner) == (
            "B",
            "running",
            "A",
        )
        assert await store.claim("dead", owner="C", lease_s=60) is None
        assert await store.claimable() == []
        with pytest.raises(LeaseLost):
            await store.commit("dead", owner="A", events=[], checkpoint=None, lease_s=60)
        await store.commit("dead", owner="B", events=[event(0, "dead")], checkpoint={}, lease_s=60)


async def test_concurrent_claimers_one_wins(make_store: MakeStore) -> None:
    """Eight store objects (processes, say) race for each of five expired runs: one wins each."""
    async with opened(make_store) as store:
        for i in range(5):
            await store.create(new_run(f"r{i}"), owner="dead", lease_s=0)
    stores = [make_store() for _ in range(8)]
    wins: dict[str, list[str]] = {f"r{i}": [] for i in range(5)}

    async def claimer(n: int) -> None:
        for run_id in wins:
            if await stores[n].claim(run_id, owner=f"o{n}", lease_s=60) is not None:
                wins[run_id].append(f"o{n}")

    try:
        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(claimer, n)
    finally:
        for s in stores:
            await s.aclose()
    assert all(len(owners) == 1 for owners in wins.values()), wins
    async with opened(make_store) as store:
        for run_id, owners in wins.items():
            run = await store.get(run_id)
            assert run is not None
            assert run.owner == owners[0]


async def test_concurrent_claimers_in_threads_one_wins(make_store: MakeStore) -> None:
    """Six threads, each with its own event loop and store object, race for one run."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="dead", lease_s=0)
    wins: list[str] = []
    barrier = threading.Barrier(6)

    def thread(n: int) -> None:
        async def claim() -> None:
            own = make_store()
            try:
                barrier.wait()
                if await own.claim("r1", owner=f"t{n}", lease_s=60) is not None:
                    wins.append(f"t{n}")
            finally:
                await own.aclose()

        anyio.run(claim)

    threads = [threading.Thread(target=thread, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    await anyio.to_thread.run_sync(lambda: [t.join() for t in threads])
    assert len(wins) == 1, wins


async def test_renew_extends_own_leases_and_reports_lost_ones(make_store: MakeStore) -> None:
    """Renew keeps an owner's runs unclaimable and says which ones it lost."""
    async with opened(make_store) as store:
        await store.create(new_run("a"), owner="A", lease_s=0)
        await store.create(new_run("b"), owner="B", lease_s=60)
        await store.create(new_run("c"), owner="A", lease_s=60)
        controls = await store.renew("A", ["a", "b", "c", "nope"], lease_s=60)
        assert [(c.run_id, c.lost) for c in controls] == [
            ("a", True),  # expired before the renewal: it may have been claimed meanwhile
            ("b", True),
            ("c", False),
            ("nope", True),
        ]
        assert await store.claim("c", owner="B", lease_s=60) is None
        assert await store.renew("A", [], lease_s=60) == []


async def test_release_makes_the_run_claimable_at_once(make_store: MakeStore) -> None:
    """A released run is claimable now; a release by a non-owner does nothing."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        await store.release("r1", owner="B")
        assert await store.claimable() == []
        await store.release("r1", owner="A")
        assert await store.claimable() == ["r1"]
        claim = await store.claim("r1", owner="B", lease_s=60)
        assert claim is not None
        assert claim.run.owner == "B"


async def test_tool_records_are_kept_per_round(make_store: MakeStore) -> None:
    """Tool records are listed per round in recording order, replaced by call id."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        one = ToolRecord(round=1, call_id="c1", name="add", arguments='{"a":1}', result={"v": 1})
        two = ToolRecord(round=1, call_id="c2", name="add", arguments='{"a":2}', result={"v": 2})
        other = ToolRecord(round=2, call_id="c1", name="mul", arguments="{}", result=[1, "x"])
        for record in (one, two, other):
            await store.record_tool("r1", owner="A", record=record)
        assert await store.tool_records("r1", 1) == [one, two]
        assert await store.tool_records("r1", 2) == [other]
        assert await store.tool_records("r1", 3) == []
        again = ToolRecord(round=1, call_id="c1", name="add", arguments='{"a":1}', result=None)
        await store.record_tool("r1", owner="A", record=again)
        assert {r.call_id: r.result for r in await store.tool_records("r1", 1)} == {
            "c1": None,
            "c2": {"v": 2},
        }


async def test_tool_records_of_every_round_come_in_recording_order(make_store: MakeStore) -> None:
    """Without a round, every round's records of the run (none of another run's), in the
    order they were recorded: a replaced record counts as recorded when it was replaced."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        await store.create(new_run("r2"), owner="A", lease_s=60)
        one = ToolRecord(round=1, call_id="c1", name="add", arguments='{"a":1}', result=1)
        two = ToolRecord(round=2, call_id="c2", name="add", arguments='{"a":2}', result=2)
        three = ToolRecord(round=3, call_id="c3", name="mul", arguments="{}", result=3)
        foreign = ToolRecord(round=1, call_id="c1", name="add", arguments="{}", result=0)
        for record in (one, two, three):
            await store.record_tool("r1", owner="A", record=record)
        await store.record_tool("r2", owner="A", record=foreign)
        assert await store.tool_records("r1") == [one, two, three]
        again = attrs.evolve(one, result="again")
        await store.record_tool("r1", owner="A", record=again)
        assert await store.tool_records("r1") == [two, three, again]
        assert await store.tool_records("r2") == [foreign]
        assert await store.tool_records("nope") == []


async def test_finish_stores_the_result_and_ends_ownership(make_store: MakeStore) -> None:
    """Finish appends, stores the result, releases and drops tool records; then nothing writes."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        record = ToolRecord(round=1, call_id="c1", name="add", arguments="{}", result=1)
        await store.record_tool("r1", owner="A", record=record)
        with pytest.raises(ValueError, match="seq"):
            await store.finish("r1", owner="A", events=[event(1)], result={"output": "x"})
        await store.finish(
            "r1", owner="A", events=[event(0), event(1, kind="RunFinished")], result={"output": "x"}
        )
        run = await store.get("r1")
        assert run is not None
        assert (run.status, run.owner, run.result, run.events) == (
            "finished",
            None,
            {"output": "x"},
            2,
        )
        assert await store.tool_records("r1", 1) == []
        assert await store.claimable() == []
        assert await store.claim("r1", owner="B", lease_s=60) is None
        with pytest.raises(LeaseLost):
            await store.commit("r1", owner="A", events=[], checkpoint=None, lease_s=60)
        assert [c.lost for c in await store.renew("A", ["r1"], lease_s=60)] == [True]
        await store.request("r1", cancel="late")  # nothing happens to a finished run
        finished = await store.get("r1")
        assert finished is not None
        assert finished.status == "finished"


async def test_park_releases_the_run(make_store: MakeStore) -> None:
    """A parked run has no owner, keeps its pending calls, and is not claimable."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        with pytest.raises(ValueError, match="seq"):
            await store.park("r1", owner="A", events=[event(3)], checkpoint={}, pending=["c1"])
        await store.park(
            "r1", owner="A", events=[event(0)], checkpoint={"round": 1}, pending=["c1", "c2"]
        )
        run = await store.get("r1")
        assert run is not None
        assert (run.status, run.owner, run.pending, run.answers, run.checkpoint, run.events) == (
            "parked",
            None,
            ("c1", "c2"),
            (),
            {"round": 1},
            1,
        )
        assert await store.claimable() == []
        assert await store.claim("r1", owner="B", lease_s=60) is None
        with pytest.raises(LeaseLost):
            await store.commit("r1", owner="A", events=[], checkpoint=None, lease_s=60)


async def test_answers_make_a_parked_run_ready_once(make_store: MakeStore) -> None:
    """Answers are checked and kept; the last one makes the run ready and claimable."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        await store.create(new_run("running"), owner="A", lease_s=60)
        await store.park("r1", owner="A", events=[], checkpoint={}, pending=["c1", "c2"])
        with pytest.raises(KeyError, match="c9"):
            await store.answer("r1", Answer(call_id="c9", approved=True))
        with pytest.raises(KeyError):
            await store.answer("nope", Answer(call_id="c1", approved=True))
        with pytest.raises(KeyError):
            await store.answer("running", Answer(call_id="c1", approved=True))
        assert await store.answer("r1", Answer(call_id="c2", approved=False, note="no")) is False
        with pytest.raises(ValueError, match="c2"):
            await store.answer("r1", Answer(call_id="c2", approved=True))
        assert await store.claimable() == []
        assert await store.answer("r1", Answer(call_id="c1", approved=True)) is True
        run = await store.get("r1")
        assert run is not None
        assert run.status == "ready"
        assert set(run.answers) == {
            Answer(call_id="c2", approved=False, note="no"),
            Answer(call_id="c1", approved=True, note=None),
        }
        assert await store.claimable() == ["r1"]
        claim = await store.claim("r1", owner="B", lease_s=60)
        assert claim is not None
        assert claim.previous_owner is None
        assert (claim.run.status, claim.run.owner, claim.run.pending) == (
            "running",
            "B",
            ("c1", "c2"),
        )
        assert len(claim.run.answers) == 2


async def test_requests_reach_the_owner(make_store: MakeStore) -> None:
    """Cancel and stop requests come back in commit and renew; a parked run cancelled is ready."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=60)
        with pytest.raises(KeyError):
            await store.request("nope", cancel="x")
        await store.request("r1", stop=True)
        control = await store.commit("r1", owner="A", events=[], checkpoint=None, lease_s=60)
        assert (control.stop, control.cancel) == (True, None)
        await store.request("r1", cancel="enough")
        [renewed] = await store.renew("A", ["r1"], lease_s=60)
        assert (renewed.lost, renewed.stop, renewed.cancel) == (False, True, "enough")
        await store.create(new_run("p"), owner="A", lease_s=60)
        await store.park("p", owner="A", events=[], checkpoint={}, pending=["c1"])
        await store.request("p", cancel="never mind")
        parked = await store.get("p")
        assert parked is not None
        assert (parked.status, parked.cancel) == ("ready", "never mind")
        assert await store.claimable() == ["p"]


async def test_wait_wakes_on_new_events_and_times_out(make_store: MakeStore) -> None:
    """A follower's wait returns when another store object appends, and after its timeout."""
    async with opened(make_store) as store, opened(make_store) as writer:
        await store.create(new_run(), owner="A", lease_s=60)
        with anyio.fail_after(5):
            await store.wait("r1", seen=0, timeout_s=0.05)  # nothing new: the timeout
        woke: list[int] = []

        async def follower() -> None:
            await store.wait("r1", seen=0, timeout_s=30)
            woke.append(len(await store.events("r1")))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follower)
                await anyio.sleep(0.05)
                await writer.commit("r1", owner="A", events=[event(0)], checkpoint=None, lease_s=60)
        assert woke == [1]
        await writer.finish("r1", owner="A", events=[], result={})
        with anyio.fail_after(5):
            await store.wait("r1", seen=1, timeout_s=30)  # finished: at once


async def test_epoch_grows_with_every_claim(make_store: MakeStore) -> None:
    """Create sets epoch 1; each claim (of an expired lease, of a ready run) adds one."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=0)
        created = await store.get("r1")
        assert created is not None
        assert created.epoch == 1
        first = await store.claim("r1", owner="B", lease_s=0)
        assert first is not None
        assert (first.epoch, first.run.epoch) == (2, 2)
        second = await store.claim("r1", owner="B", lease_s=60)  # the same owner, again
        assert second is not None
        assert second.epoch == 3
        assert await store.claim("r1", owner="C", lease_s=60) is None  # refused: no change
        await store.park("r1", owner="B", events=[], checkpoint={}, pending=["c1"], epoch=3)
        await store.answer("r1", Answer(call_id="c1", approved=True))
        ready = await store.claim("r1", owner="C", lease_s=60)
        assert ready is not None
        assert ready.epoch == 4
        stored = await store.get("r1")
        assert stored is not None
        assert stored.epoch == 4


async def test_writes_of_an_earlier_epoch_are_refused(make_store: MakeStore) -> None:
    """An owner's write at another epoch than the run's writes nothing: LeaseLost, also for
    the same owner id (a stale task of a Runtime that claimed its own run again)."""
    async with opened(make_store) as store:
        await store.create(new_run(), owner="A", lease_s=0)
        claim = await store.claim("r1", owner="A", lease_s=60)
        assert claim is not None
        assert claim.epoch == 2
        record = ToolRecord(round=1, call_id="c1", name="add", arguments="{}", result={"x": 1})
        with pytest.raises(LeaseLost, match="epoch"):
            await store.commit(
                "r1", owner="A", events=[event(0)], checkpoint={"round": 1}, lease_s=60, epoch=1
            )
        with pytest.raises(LeaseLost, match="epoch"):
            await store.record_tool("r1", owner="A", record=record, epoch=1)
        with pytest.raises(LeaseLost, match="epoch"):
            await store.park(
                "r1", owner="A", events=[event(0)], checkpoint={}, pending=["c1"], epoch=1
            )
        with pytest.raises(LeaseLost, match="epoch"):
            await store.finish("r1", owner="A", events=[event(0)], result={}, epoch=3)
        run = await store.get("r1")
        assert run is not None
        assert (run.status, run.events, run.checkpoint, run.epoch) == ("running", 0, None, 2)
        assert await store.tool_records("r1", 1) == []
        # At its own epoch, each write lands.
        await store.commit(
            "r1", owner="A", events=[event(0)], checkpoint={"round": 1}, lease_s=60, epoch=2
        )
        await store.record_tool("r1", owner="A", record=record, epoch=2)
        assert await store.tool_records("r1", 1) == [record]
        await store.finish("r1", owner="A", events=[event(1)], result={"output": "x"}, epoch=2)
        done = await store.get("r1")
        assert done is not None
        assert (done.status, done.events) == ("finished", 2)


async def test_renew_checks_the_epoch(make_store: MakeStore) -> None:
    """Renew with epochs: a run at another epoch is lost (and keeps its lease); a length
    mismatch is a ValueError."""
    async with opened(make_store) as store:
        await store.create(new_run("a"), owner="A", lease_s=60)
        await store.create(new_run("b"), owner="A", lease_s=0)
        claim = await store.claim("b", owner="A", lease_s=60)
        assert claim is not None
        controls = await store.renew("A", ["a", "b"], lease_s=60, epochs=[1, 1])
        assert [(c.run_id, c.lost) for c in controls] == [("a", False), ("b", True)]
        controls = await store.renew("A", ["b", "a"], lease_s=60, epochs=[2, 1])
        assert [(c.run_id, c.lost) for c in controls] == [("b", False), ("a", False)]
        with pytest.raises(ValueError, match="epoch"):
            await store.renew("A", ["a", "b"], lease_s=60, epochs=[1])


def _usage(steps: int, tokens: int, cost: float | None, **more: Any) -> dict[str, Any]:
    return {
        "steps": steps,
        "input_tokens": tokens,
        "output_tokens": 1,
        "cost_usd": cost,
        **more,
    }


async def _listed(store: RunStore) -> ListableRunStore:
    assert isinstance(store, ListableRunStore)
    return store


async def test_list_runs_filters_and_pages_by_keyset(make_store: MakeStore) -> None:
    """The listing: newest or oldest first, every filter, counts from the result or the
    checkpoint, and keyset pages that neither repeat nor skip a run added meanwhile."""
    async with opened(make_store) as raw:
        store = await _listed(raw)
        assert (await store.list_runs()).runs == ()
        for i in range(7):
            agent = "planner" if i % 2 == 0 else "writer"
            run = NewRun(run_id=f"r{i}", agent=agent, input="q", created_at=100.0 + i)
            await store.create(run, owner="A", lease_s=60)
        # r0, r1 finished (answered, max_steps); r2 parked; r3 checkpointed; the rest fresh.
        await store.finish(
            "r0",
            owner="A",
            events=[event(0, "r0")],
            result={"termination": "answered", "usage": _usage(2, 10, 0.5)},
        )
        await store.finish(
            "r1",
            owner="A",
            events=[event(0, "r1")],
            result={"termination": "max_steps", "usage": _usage(3, 20, None)},
        )
        await store.park(
            "r2",
            owner="A",
            events=[event(0, "r2")],
            checkpoint={"usage": _usage(1, 5, 0.0, unpriced=True)},
            pending=["c1"],
        )
        await store.commit(
            "r3",
            owner="A",
            events=[event(0, "r3")],
            checkpoint={"usage": _usage(1, 7, 0.25, unpriced=False)},
            lease_s=60,
        )
        every = await store.list_runs()
        assert [r.run_id for r in every.runs] == [f"r{i}" for i in reversed(range(7))]
        assert every.next is None
        oldest = await store.list_runs(order="oldest", limit=2)
        assert [r.run_id for r in oldest.runs] == ["r0", "r1"]
        by_id = {r.run_id: r for r in every.runs}
        r0, r1, r2, r3, r6 = (by_id[k] for k in ("r0", "r1", "r2", "r3", "r6"))
        assert (r0.status, r0.termination, r0.rounds, r0.tokens, r0.cost_usd) == (
            "finished",
            "answered",
            2,
            11,
            0.5,
        )
        assert r0.duration_s is not None
        assert r0.duration_s >= 0
        assert (r1.termination, r1.cost_usd) == ("max_steps", None)
        assert (r2.status, r2.termination, r2.rounds, r2.tokens, r2.cost_usd) == (
            "parked",
            None,
            1,
            6,
            None,  # unpriced: never zero
        )
        assert (r3.status, r3.rounds, r3.tokens, r3.cost_usd) == ("running", 1, 8, 0.25)
        assert (r6.rounds, r6.tokens, r6.cost_usd, r6.duration_s) == (None, None, None, None)
        assert r3.events == 1
        assert r6.events == 0
        assert r6.created_at == 106.0

        async def ids(**kw: Any) -> list[str]:
            return [r.run_id for r in (await store.list_runs(**kw)).runs]

        assert await ids(agent="writer") == ["r5", "r3", "r1"]
        assert await ids(status="finished") == ["r1", "r0"]
        assert await ids(status="parked") == ["r2"]
        assert await ids(termination="answered") == ["r0"]
        assert await ids(since=102.0, until=104.0) == ["r3", "r2"]
        assert await ids(agent="planner", status="running") == ["r6", "r4"]
        assert await ids(agent="nobody") == []

        # Pages of 3: r6 r5 r4 | r3 r2 r1 | r0, and a run added meanwhile changes nothing
        # on the pages after the cursor (it sorts before it).
        first = await store.list_runs(limit=3)
        assert [r.run_id for r in first.runs] == ["r6", "r5", "r4"]
        assert first.next is not None
        await store.create(
            NewRun(run_id="r7", agent="planner", input="q", created_at=107.0), owner="A", lease_s=60
        )
        second = await store.list_runs(limit=3, after=first.next)
        assert [r.run_id for r in second.runs] == ["r3", "r2", "r1"]
        assert second.next is not None
        third = await store.list_runs(limit=3, after=second.next)
        assert [r.run_id for r in third.runs] == ["r0"]
        assert third.next is None
        # Ties on the start time are broken by run id, in the same order both ways.
        for run_id in ("t2", "t1"):
            await store.create(
                NewRun(run_id=run_id, agent="tie", input="q", created_at=50.0),
                owner="A",
                lease_s=60,
            )
        tie = await store.list_runs(agent="tie", limit=1)
        assert [r.run_id for r in tie.runs] == ["t2"]
        assert tie.next is not None
        assert await ids(agent="tie", after=tie.next, limit=1) == ["t1"]
        up = await store.list_runs(agent="tie", order="oldest", limit=1)
        assert [r.run_id for r in up.runs] == ["t1"]
        assert up.next is not None
        assert await ids(agent="tie", order="oldest", after=up.next) == ["t2"]


async def test_list_runs_sorts_by_the_counts_in_keyset_pages(make_store: MakeStore) -> None:
    """Sorted by duration, tokens, cost or rounds, both ways: unknown values sort as -1
    (ties by run id), and pages of two chain into the whole listing."""
    async with opened(make_store) as raw:
        store = await _listed(raw)
        for i in range(7):
            run = NewRun(run_id=f"r{i}", agent="a", input="q", created_at=100.0 + i)
            await store.create(run, owner="A", lease_s=60)
        await store.finish(
            "r0", owner="A", events=[event(0, "r0")], result={"usage": _usage(2, 10, 0.5)}
        )
        await store.finish(
            "r1", owner="A", events=[event(0, "r1")], result={"usage": _usage(3, 20, None)}
        )
        await store.park(
            "r2",
            owner="A",
            events=[event(0, "r2")],
            checkpoint={"usage": _usage(1, 5, 0.75, unpriced=True)},
            pending=["c1"],
        )
        await store.commit(
            "r3",
            owner="A",
            events=[event(0, "r3")],
            checkpoint={"usage": _usage(1, 7, 0.25, unpriced=False)},
            lease_s=60,
        )

        async def paged(sort: Any, order: Any) -> list[str]:
            whole = [r.run_id for r in (await store.list_runs(sort=sort, order=order)).runs]
            seen: list[str] = []
            after = None
            while True:
                page = await store.list_runs(sort=sort, order=order, after=after, limit=2)
                seen += [r.run_id for r in page.runs]
                if page.next is None:
                    break
                after = page.next
            assert seen == whole, (sort, order)
            return whole

        unknown = ["r6", "r5", "r4"]
        assert await paged("tokens", "newest") == ["r1", "r0", "r3", "r2", *unknown]
        assert await paged("tokens", "oldest") == ["r4", "r5", "r6", "r2", "r3", "r0", "r1"]
        # r1 has no cost and r2 is unpriced: both unknown, never zero.
        assert await paged("cost", "newest") == ["r0", "r3", *unknown, "r2", "r1"]
        assert await paged("rounds", "newest") == ["r1", "r0", "r3", "r2", *unknown]
        # Only a finished run has a duration: r0 started a second before r1 and ended
        # just before it.
        assert await paged("duration", "newest") == ["r0", "r1", *unknown, "r3", "r2"]
        assert await paged("started", "newest") == [f"r{i}" for i in reversed(range(7))]


async def test_list_runs_refuses_bad_arguments(make_store: MakeStore) -> None:
    """A bad status, order, sort, limit or cursor is a ValueError naming it."""
    async with opened(make_store) as raw:
        store = await _listed(raw)
        with pytest.raises(ValueError, match="sort"):
            await store.list_runs(sort="size")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="status"):
            await store.list_runs(status="done")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="order"):
            await store.list_runs(order="up")  # type: ignore[arg-type]
        for limit in (0, 501, True):
            with pytest.raises(ValueError, match="limit"):
                await store.list_runs(limit=limit)
        with pytest.raises(ValueError, match="cursor"):
            await store.list_runs(after="not-a-cursor")
