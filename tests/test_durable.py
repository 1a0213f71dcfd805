"""Durable runs (docs/guides/durable.md): recorded, checkpointed, resumed, handled anywhere."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import (
    ModelRequest,
    Price,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)
from tether.runtime import Answer, Claim, Control, NewRun, StoredRun, ToolRecord
from tether.runtime._durable import dump_result

pytestmark = pytest.mark.anyio

#: Side effects of the tools, by key (a finished call must never run twice).
effects: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    """Each test starts with no side effects counted and no tool held."""
    effects.clear()
    Hold.release = None


class Hold:
    """Where ``hang`` waits; ``None``: it does not wait."""

    release: anyio.Event | None = None
    started: anyio.Event | None = None


@tether.tool
async def bump(key: str) -> str:
    """Count a side effect."""
    effects[key] += 1
    return f"bumped {key}"


@tether.tool
async def hang(key: str) -> str:
    """Count a side effect after waiting while a test holds it."""
    if Hold.release is not None:
        assert Hold.started is not None
        Hold.started.set()
        await Hold.release.wait()
    effects[key] += 1
    return f"hung {key}"


def results_in(request: ModelRequest) -> int:
    return sum(isinstance(b, ToolResultBlock) for m in request.messages for b in m.content)


def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """Round 1: bump; round 2: bump and hang together; then the answer."""
    text = request.messages[0].text
    done = results_in(request)
    if done == 0:
        return Reply(tool_calls=[ToolCall(name="bump", arguments={"key": f"{text}-1"})])
    if done == 1:
        return Reply(
            tool_calls=[
                ToolCall(name="bump", arguments={"key": f"{text}-2a"}),
                ToolCall(name="hang", arguments={"key": f"{text}-2b"}),
            ]
        )
    return Reply(text=f"done {text}")


def agent(name: str = "worker") -> tether.Agent:
    return tether.Agent(
        name=name,
        instructions="work",
        provider=ScriptedProvider(model, cost_per_mtok=Price(input=1.0, output=2.0)),
        tools=[bump, hang],
        limits=tether.Limits(max_steps=10),
    )


class Crashable:
    """A run store that a test can 'crash': from then on no write reaches the file,
    as when the process holding it was killed."""

    def __init__(self, store: tether.RunStore) -> None:
        self.inner = store
        self.crashed = False
        #: Leases are not renewed (the owner is alive but too slow, say).
        self.stalled = False
        #: Set once a tool result of round 2 is recorded.
        self.round_two = anyio.Event()

    async def create(self, run: NewRun, *, owner: str, lease_s: float) -> None:
        if not self.crashed:
            await self.inner.create(run, owner=owner, lease_s=lease_s)

    async def get(self, run_id: str) -> StoredRun | None:
        return await self.inner.get(run_id)

    async def commit(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, Any]],
        checkpoint: Mapping[str, Any] | None,
        lease_s: float,
        epoch: int | None = None,
    ) -> Control:
        if self.crashed:
            return Control(run_id=run_id)
        return await self.inner.commit(
            run_id, owner=owner, events=events, checkpoint=checkpoint, lease_s=lease_s, epoch=epoch
        )

    async def record_tool(
        self, run_id: str, *, owner: str, record: ToolRecord, epoch: int | None = None
    ) -> None:
        if not self.crashed:
            await self.inner.record_tool(run_id, owner=owner, record=record, epoch=epoch)
            if record.round == 2:
                self.round_two.set()

    async def tool_records(self, run_id: str, round: int | None = None) -> list[ToolRecord]:
        return await self.inner.tool_records(run_id, round)

    async def park(self, run_id: str, **kw: Any) -> None:
        if not self.crashed:
            await self.inner.park(run_id, **kw)

    async def answer(self, run_id: str, answer: Answer) -> bool:
        return await self.inner.answer(run_id, answer)

    async def finish(self, run_id: str, **kw: Any) -> None:
        if not self.crashed:
            await self.inner.finish(run_id, **kw)

    async def renew(
        self,
        owner: str,
        run_ids: Sequence[str],
        *,
        lease_s: float,
        epochs: Sequence[int] | None = None,
    ) -> list[Control]:
        if self.crashed or self.stalled:
            return [Control(run_id=i) for i in run_ids]
        return await self.inner.renew(owner, run_ids, lease_s=lease_s, epochs=epochs)

    async def release(self, run_id: str, *, owner: str) -> None:
        if not self.crashed:
            await self.inner.release(run_id, owner=owner)

    async def claimable(self, *, limit: int = 100) -> list[str]:
        return await self.inner.claimable(limit=limit)

    async def claim(self, run_id: str, *, owner: str, lease_s: float) -> Claim | None:
        return await self.inner.claim(run_id, owner=owner, lease_s=lease_s)

    async def request(self, run_id: str, *, cancel: str | None = None, stop: bool = False) -> None:
        await self.inner.request(run_id, cancel=cancel, stop=stop)

    async def events(self, run_id: str, *, start: int = 0) -> list[Any]:
        return await self.inner.events(run_id, start=start)

    async def wait(self, run_id: str, *, seen: int, timeout_s: float) -> None:
        await self.inner.wait(run_id, seen=seen, timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self.inner.aclose()


def assert_trail(events: Sequence[ev.Event], result: tether.RunResult) -> None:
    """Gap-free seq, one RunFinished (last), usage the sum of the UsageCharged."""
    assert [e.seq for e in events] == list(range(len(events)))
    assert [type(e) for e in events].count(ev.RunFinished) == 1
    assert isinstance(events[-1], ev.RunFinished)
    charged = [e for e in events if isinstance(e, ev.UsageCharged)]
    assert result.usage.input_tokens == sum(e.input_tokens for e in charged)
    assert result.usage.output_tokens == sum(e.output_tokens for e in charged)


async def test_a_run_is_recorded_checkpointed_and_finished(tmp_path: Path) -> None:
    """The store holds the run's every event, its last checkpoint and its result."""
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01)
    async with tether.Runtime(store=store) as rt:
        result = await rt.run(agent(), "a")
    assert result.output == "done a"
    stored = await store.get(result.run_id)
    assert stored is not None
    assert (stored.status, stored.owner, stored.agent, stored.input) == (
        "finished",
        None,
        "worker",
        "a",
    )
    assert stored.result == dump_result(result)
    assert stored.checkpoint is not None
    assert stored.checkpoint["round"] == 2  # the last boundary the run went on from
    assert await store.events(result.run_id) == [ev.dump(e) for e in result.events]
    assert effects == {"a-1": 1, "a-2a": 1, "a-2b": 1}
    await store.aclose()


async def test_a_crashed_run_resumes_without_running_finished_calls_again(
    tmp_path: Path,
) -> None:
    """Killed mid-round, the run is resumed by another Runtime: the seam, no gap, no rerun."""
    path = tmp_path / "runs.db"
    store = Crashable(tether.SQLiteRunStore(path, poll_s=0.01))
    Hold.release, Hold.started = anyio.Event(), anyio.Event()
    async with tether.Runtime(store=store, lease_s=0.3, shutdown_grace_s=0) as rt:
        handle = rt.start(agent(), "a")
        await Hold.started.wait()  # round 2: bump finished, hang in flight
        await store.round_two.wait()  # bump's result is recorded: it has finished
        store.crashed = True
        first_owner = rt._keeper.owner if rt._keeper else None
    Hold.release = None
    assert effects == {"a-1": 1, "a-2a": 1}
    second = tether.SQLiteRunStore(path, poll_s=0.01)
    with anyio.fail_after(20):
        async with tether.Runtime(store=second, agents=[agent()], lease_s=0.3, resume=True) as rt2:
            result = await rt2.handle(handle.run_id).result()
    assert result.output == "done a"
    assert effects == {"a-1": 1, "a-2a": 1, "a-2b": 1}  # 2a's recorded result was used
    events = result.events
    assert_trail(events, result)
    [seam] = [e for e in events if isinstance(e, ev.RunResumed)]
    assert (seam.from_round, seam.previous_owner) == (1, first_owner)
    assert [type(e) for e in events].count(ev.RunStarted) == 1
    await second.aclose()


async def test_an_unknown_agent_is_a_clear_error_and_the_run_stays_claimable(
    tmp_path: Path,
) -> None:
    """A Runtime that does not know the run's agent refuses to resume it, and changes nothing."""
    path = tmp_path / "runs.db"
    store = Crashable(tether.SQLiteRunStore(path, poll_s=0.01))
    Hold.release, Hold.started = anyio.Event(), anyio.Event()
    async with tether.Runtime(store=store, lease_s=0.05, shutdown_grace_s=0) as rt:
        handle = rt.start(agent(), "a")
        await Hold.started.wait()
        store.crashed = True
    Hold.release = None
    await anyio.sleep(0.1)
    other = tether.SQLiteRunStore(path)
    async with tether.Runtime(store=other, agents=[agent("someone")]) as rt2:
        with pytest.raises(ValueError, match="does not know"):
            await rt2.resume(handle.run_id)
    assert await other.claimable() == [handle.run_id]
    await other.aclose()


async def test_handles_from_another_runtime_follow_and_cancel(tmp_path: Path) -> None:
    """rt.handle() on another Runtime replays and follows the trail; cancel reaches the owner."""
    path = tmp_path / "runs.db"
    Hold.release, Hold.started = anyio.Event(), anyio.Event()
    async with tether.Runtime(store=tether.SQLiteRunStore(path, poll_s=0.01), lease_s=0.3) as rt:
        live = rt.start(agent(), "a")
        await Hold.started.wait()
        async with tether.Runtime(store=tether.SQLiteRunStore(path, poll_s=0.01)) as other:
            remote = other.handle(live.run_id)
            seen = []
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


async def test_without_a_store_nothing_changes() -> None:
    """A Runtime without a store refuses the durable arguments clearly."""
    with pytest.raises(ValueError, match="needs a run store"):
        tether.Runtime(resume=True)
    with pytest.raises(ValueError, match="lease_s"):
        tether.Runtime(lease_s=0)
    with pytest.raises(TypeError, match=r"tether\.RunStore"):
        tether.Runtime(store=object())  # type: ignore[arg-type]
    async with tether.Runtime() as rt:
        with pytest.raises(KeyError, match="no run store"):
            rt.handle("nope")


class AskForBumps:
    """Holds every bump for a person's approval."""

    async def check(self, point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        if point is tether.PolicyPoint.TOOL_CALL and subject.name == "bump":
            return tether.Verdict.ask("bumps need a person")
        return None


def one_bump(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """One bump, then the answer (which says what the bump gave)."""
    results = [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]
    if not results:
        text = request.messages[0].text
        return Reply(tool_calls=[ToolCall(name="bump", arguments={"key": text}, id="b1")])
    return Reply(text=f"done: {results[0].content}")


def asker() -> tether.Agent:
    return tether.Agent(
        name="asker",
        instructions="ask",
        provider=ScriptedProvider(one_bump),
        tools=[bump],
        policies=[AskForBumps()],
    )


async def wait_status(store: tether.RunStore, run_id: str, status: str) -> StoredRun:
    """Wait until the stored run has ``status``."""
    with anyio.fail_after(20):
        while True:
            run = await store.get(run_id)
            if run is not None and run.status == status:
                return run
            await anyio.sleep(0.01)


async def test_an_approval_survives_a_restart(tmp_path: Path) -> None:
    """Parked in one Runtime, approved from another after the first is gone, the run goes on."""
    path = tmp_path / "runs.db"
    async with tether.Runtime(store=tether.SQLiteRunStore(path)) as rt:
        handle = rt.start(asker(), "k")
        parked = await wait_status(rt._keeper.store, handle.run_id, "parked")  # type: ignore[union-attr]
        assert parked.pending == ("b1",)
        [pending] = await rt.pending_approvals(handle.run_id)
        assert (pending.call_id, pending.name, pending.arguments, pending.reason) == (
            "b1",
            "bump",
            {"key": "k"},
            "bumps need a person",
        )
        await anyio.wait_all_tasks_blocked()  # the run's task ends just after the park
        assert rt.running == 0  # no task, no run object kept by the Runtime
    assert effects == {}
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[asker()]) as rt2:
        await rt2.approve(handle.run_id, "b1")
        result = await rt2.handle(handle.run_id).result()
    assert result.output == "done: bumped k"
    assert effects == {"k": 1}
    names = [type(e).__name__ for e in result.events]
    assert names.index("ApprovalRequested") < names.index("RunResumed")
    assert names.index("RunResumed") < names.index("ApprovalAnswered")
    assert [e.seq for e in result.events] == list(range(len(result.events)))
    # The held round goes on from its approval: its call is not started, checked or
    # requested again on the far side of the seam.
    for kind in ("ToolCallStarted", "ApprovalRequested", "ApprovalAnswered", "ToolCallFinished"):
        assert names.count(kind) == 1, kind
    checked = [e for e in result.events if isinstance(e, ev.PolicyChecked)]
    assert [e.call_id for e in checked if e.point == "tool_call"] == ["b1"]
    assert result.summary() == "Model → Tools(1) → Model → answered"
    assert (result.usage.steps, result.usage.tool_calls) == (2, 1)


async def test_a_rejection_reaches_the_model_and_the_local_handle_waits(tmp_path: Path) -> None:
    """Rejected in the same Runtime, the parked run resumes there; its first handle gets the end."""
    async with tether.Runtime(store=tether.SQLiteRunStore(tmp_path / "runs.db")) as rt:
        handle = rt.start(asker(), "k")
        await wait_status(rt._keeper.store, handle.run_id, "parked")  # type: ignore[union-attr]
        with pytest.raises(KeyError, match="b9"):
            await rt.reject(handle.run_id, "b9")
        with pytest.raises(ValueError, match=r"await rt\.approve"):
            handle.approve("b1")
        await rt.reject(handle.run_id, "b1", "not today")
        result = await handle.result()
    assert result.output == "done: rejected by the host: not today"
    assert effects == {}


async def test_resume_one_run_and_its_clear_errors(tmp_path: Path) -> None:
    """rt.resume(run_id) continues a dead owner's run; a live, finished, unknown one is refused."""
    path = tmp_path / "runs.db"
    store = Crashable(tether.SQLiteRunStore(path, poll_s=0.01))
    Hold.release, Hold.started = anyio.Event(), anyio.Event()
    async with tether.Runtime(store=store, lease_s=0.2, shutdown_grace_s=0) as rt:
        handle = rt.start(agent(), "a")
        await Hold.started.wait()
        async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[agent()]) as other:
            with pytest.raises(ValueError, match="holds its lease"):
                await other.resume(handle.run_id)
        store.crashed = True
    Hold.release = None
    await anyio.sleep(0.3)  # the dead owner's lease expires
    second = tether.SQLiteRunStore(path)
    async with tether.Runtime(store=second, agents=[agent()]) as rt2:
        with pytest.raises(KeyError, match="no run 'nope'"):
            await rt2.resume("nope")
        resumed = await rt2.resume(handle.run_id)
        result = await resumed.result()
        assert result.output == "done a"
        await wait_status(second, handle.run_id, "finished")  # written just after the result
        with pytest.raises(ValueError, match="has finished"):
            await rt2.resume(handle.run_id)
    assert_trail(result.events, result)


async def test_a_parked_run_cancelled_through_the_store_ends_cancelled(tmp_path: Path) -> None:
    """A stored handle's cancel of a parked run ends it cancelled, on a Runtime that knows it."""
    path = tmp_path / "runs.db"
    async with tether.Runtime(store=tether.SQLiteRunStore(path)) as rt:
        handle = rt.start(asker(), "k")
        await wait_status(rt._keeper.store, handle.run_id, "parked")  # type: ignore[union-attr]
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[asker()]) as rt2:
        remote = rt2.handle(handle.run_id)
        remote.cancel("no longer needed")
        with anyio.fail_after(10):
            result = await remote.result()
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "no longer needed"
    assert effects == {}


async def test_an_unusable_store_fails_at_the_runtime(tmp_path: Path) -> None:
    """A file of another program is refused when the Runtime is entered, not per run."""
    path = tmp_path / "other.db"
    await anyio.Path(path).write_bytes(b"not a database at all, just some bytes" * 100)
    with pytest.raises(tether.RunStoreError, match="not a usable SQLite database"):
        async with tether.Runtime(store=tether.SQLiteRunStore(path)):
            pass


async def test_a_run_whose_lease_was_lost_goes_on_elsewhere(tmp_path: Path) -> None:
    """An owner too slow to renew loses the run to another Runtime; its handle follows it there."""
    path = tmp_path / "runs.db"
    store = Crashable(tether.SQLiteRunStore(path, poll_s=0.01))
    release, Hold.started = anyio.Event(), anyio.Event()
    Hold.release = release
    async with tether.Runtime(store=store, lease_s=0.3) as rt:
        handle = rt.start(agent(), "a")
        await Hold.started.wait()  # round 2, hang held; bump's result recorded
        await store.round_two.wait()
        store.stalled = True
        Hold.release = None  # the next owner's hang does not wait
        second = tether.SQLiteRunStore(path, poll_s=0.01)
        async with tether.Runtime(store=second, agents=[agent()], lease_s=0.3, resume=True) as rt2:
            other = await rt2.handle(handle.run_id).result()
            release.set()  # the first owner's hang ends now: its writes are refused
            with anyio.fail_after(10):
                mine = await handle.result()
    assert mine.output == other.output == "done a"
    assert mine.events == other.events
    assert effects["a-2a"] == 1  # recorded before the lease was lost: reused
    assert_trail(other.events, other)


async def test_a_run_parked_before_admissions_were_kept_still_resumes(tmp_path: Path) -> None:
    """A parked checkpoint without the round's admission (written by an older tether) is
    answered too: the round decides its calls again, but requests no approval twice."""
    import json
    import sqlite3

    path = tmp_path / "runs.db"
    async with tether.Runtime(store=tether.SQLiteRunStore(path)) as rt:
        handle = rt.start(asker(), "k")
        parked = await wait_status(rt._keeper.store, handle.run_id, "parked")  # type: ignore[union-attr]
    assert parked.checkpoint is not None
    older = {k: v for k, v in parked.checkpoint.items() if k != "admission"}
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE runs SET checkpoint = ? WHERE run_id = ?", (json.dumps(older), handle.run_id)
        )
    conn.close()
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[asker()]) as rt2:
        await rt2.approve(handle.run_id, "b1")
        result = await rt2.handle(handle.run_id).result()
    assert result.output == "done: bumped k"
    assert effects == {"k": 1}
    names = [type(e).__name__ for e in result.events]
    assert names.count("ApprovalRequested") == names.count("ApprovalAnswered") == 1
    assert [e.seq for e in result.events] == list(range(len(result.events)))
