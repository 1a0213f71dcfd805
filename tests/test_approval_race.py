"""``rt.approve`` racing a durable run that is still parking (issue 26).

A durable run held by ``Verdict.ask`` publishes ``ApprovalRequested`` (live,
to its handle's followers), then writes its park, then leaves the Runtime. An
approval that arrives in between, through the same Runtime, must not be
lost: it waits for the park and then resumes the run. A :class:`ParkGate`
store holds the park where the test says, *before* the write reaches the store
(the run's events say ``ApprovalRequested``, the store says ``running``) or
*after* it (the store says ``parked``, the run has not left the Runtime yet),
until the approval is on its way. Before the fix, the first refused the
approval (``KeyError``: not parked) and the second lost it (recorded in the
store, the resume refused because the run was still in flight here, the
refusal swallowed): the run stayed ``ready`` and its caller waited forever.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import tether
from tether import events as ev

from .test_durable import asker, effects

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _reset() -> None:
    effects.clear()


class ParkGate:
    """A run store whose first park waits for :attr:`release`, ``where`` says: before the
    write reaches the store it wraps, or after it; everything else goes through."""

    def __init__(self, inner: tether.RunStore, where: str) -> None:
        self.inner, self.where = inner, where
        self.parking = anyio.Event()  # the run is in park(), held
        self.release = anyio.Event()
        self.answers = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def park(self, run_id: str, **kw: Any) -> None:
        if self.where == "after":
            await self.inner.park(run_id, **kw)
        if not self.parking.is_set():
            self.parking.set()
            await self.release.wait()
        if self.where == "before":
            await self.inner.park(run_id, **kw)

    async def answer(self, run_id: str, answer: Any) -> bool:
        self.answers += 1
        return bool(await self.inner.answer(run_id, answer))

    # The rest of the protocol, spelled out for isinstance(store, RunStore).
    async def create(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.create(*a, **kw)

    async def get(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.get(*a, **kw)

    async def commit(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.commit(*a, **kw)

    async def record_tool(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.record_tool(*a, **kw)

    async def finish(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.finish(*a, **kw)

    async def claim(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.claim(*a, **kw)


def sqlite(tmp_path: Path) -> tether.RunStore:
    return tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01)


async def approve_while_parking(store: tether.RunStore, where: str, verb: str) -> None:
    gate = ParkGate(store, where)
    async with tether.Runtime(store=gate) as rt:  # type: ignore[arg-type]
        try:
            handle = rt.start(asker(), "k")
            await answer_while_parking(rt, gate, store, handle.run_id, where, verb)
            with anyio.fail_after(20):
                result = await handle.result()
        finally:
            gate.release.set()  # a failed test must not leave the Runtime's exit waiting on it
    assert gate.answers == 1
    if verb == "approve":
        assert result.output == "done: bumped k"
        assert effects == {"k": 1}  # the approved call ran, once
    else:
        assert result.output == "done: rejected by the host: not today"
        assert effects == {}
    names = [type(e).__name__ for e in result.events]
    for kind in ("ApprovalRequested", "ApprovalAnswered", "RunResumed", "RunFinished"):
        assert names.count(kind) == 1, (kind, names)
    assert [e.seq for e in result.events] == list(range(len(result.events)))
    stored_events = await store.events(handle.run_id)
    assert [e["type"] for e in stored_events].count("ApprovalRequested") == 1
    assert await store.claimable() == []


async def answer_while_parking(
    rt: tether.Runtime, gate: ParkGate, store: tether.RunStore, run_id: str, where: str, verb: str
) -> None:
    """Approve (or reject) ``b1`` while the run is held in its park, then let the park go."""
    with anyio.fail_after(20):  # a guard against a hang, not a measure
        async for event in rt.handle(run_id).events():
            if isinstance(event, ev.ApprovalRequested):
                break
        await gate.parking.wait()
    stored = await store.get(run_id)
    assert stored is not None
    assert stored.status == ("parked" if where == "after" else "running")
    answered = anyio.Event()

    async def answer() -> None:
        if verb == "approve":
            await rt.approve(run_id, "b1")
        else:
            await rt.reject(run_id, "b1", "not today")
        answered.set()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer)
            for _ in range(5):  # its first steps, up to where it waits
                await anyio.lowlevel.checkpoint()
            # The answer is on its way and waits for the park: it has not gone to the
            # store yet (a run still in flight here is not answered there).
            assert not answered.is_set()
            assert gate.answers == 0
            gate.release.set()
    assert answered.is_set()


@pytest.mark.parametrize("where", ["before", "after"])
async def test_an_approval_while_the_run_parks_waits_for_the_park(
    tmp_path: Path, where: str
) -> None:
    """Approved between ApprovalRequested and the run leaving: resumed here, the call runs once."""
    await approve_while_parking(sqlite(tmp_path), where, "approve")


async def test_a_rejection_while_the_run_parks_reaches_the_model(tmp_path: Path) -> None:
    """Rejected after the park was written, before the run left: the model gets the rejection."""
    await approve_while_parking(sqlite(tmp_path), "after", "reject")
