"""The processes of the kill-point suite: ``python -m tests.killpoint_worker PHASE POINT FACTORY
ARG DIR BACKEND`` (:mod:`tests.test_killpoints` drives them).

``FACTORY`` and ``ARG`` make the store, as for :mod:`tests.crash_worker`. The run
:data:`RUN_ID` has :data:`ROUNDS` rounds of one ``effect`` call each (ids ``call-1``...),
then the answer; for ``POINT`` ``park`` a policy holds ``call-2`` for approval.

* ``kill``: submits the run (``rt.submit``, which returns once the store has it, logged
  ``submitted``) through :class:`Stall`, whose write ``POINT`` never returns (logged
  ``stall POINT``): the parent SIGKILLs the process there;
* ``resume``: a ``resume=True`` Runtime (``create``: one that submits the same run again,
  as a submitter that got nothing back would; ``park``: one that approves ``call-2``
  once the run is parked) that exits once the run has finished.

Every execution of ``effect`` appends ``effect CALL_ID EPOCH``, and every tool result
the store accepted ``recorded CALL_ID``, to ``DIR/log``, each with ``fsync``.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import anyio

import tether
from tether.providers import (
    ModelRequest,
    Price,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)
from tether.runtime import ToolRecord

from . import crash_worker

RUN_ID = "killpoint-1"
ROUNDS = 3
LEASE_S = 1.0
#: Which call of each write the stall takes: a middle round's commit and tool record.
NTH = {"create": 1, "create-after": 1, "commit": 2, "record_tool": 2, "park": 1, "finish": 1}

_dir = Path(".")


def log(line: str) -> None:
    """Append ``line`` to ``DIR/log`` and make it durable before going on."""
    fd = os.open(_dir / "log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@tether.tool
async def effect(ctx: tether.RunContext[None], key: str) -> str:
    """A side effect, logged with the call id and the owner's epoch."""
    log(f"effect {ctx.call_id} {ctx.epoch}")
    return f"did {key}"


def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """``ROUNDS`` rounds of one call each, then the answer."""
    done = [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]
    if len(done) < ROUNDS:
        n = len(done) + 1
        return Reply(
            tool_calls=[ToolCall(name="effect", arguments={"key": f"k{n}"}, id=f"call-{n}")]
        )
    return Reply(text="; ".join(b.content for b in done))


def hold_call_2(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    if point is tether.PolicyPoint.TOOL_CALL and subject.id == "call-2":
        return tether.Verdict.ask("the second call needs a person")
    return None


def agent(point: str) -> tether.Agent:
    return tether.Agent(
        name="killpoint",
        instructions="do three things",
        provider=ScriptedProvider(model, cost_per_mtok=Price(input=1, output=2)),
        tools=[effect],
        policies=[hold_call_2] if point == "park" else [],
    )


class Stall(crash_worker.Logged):
    """The store, logging accepted tool results; with ``point``, that write never returns
    (the ``NTH[point]``-th call of it: before the inner store, or after for ``create-after``)."""

    def __init__(self, inner: tether.RunStore, point: str | None) -> None:
        super().__init__(inner)
        self.point = point
        self.seen: dict[str, int] = {}

    async def _maybe_stall(self, write: str, after: bool = False) -> None:
        point = self.point
        if point is None or point.removesuffix("-after") != write:
            return
        if point.endswith("-after") != after:
            return
        self.seen[write] = self.seen.get(write, 0) + 1
        if self.seen[write] == NTH[point]:
            log(f"stall {point}")
            await anyio.sleep_forever()  # the parent kills the process here

    async def create(self, *a: Any, **kw: Any) -> Any:
        await self._maybe_stall("create")
        await self.inner.create(*a, **kw)
        await self._maybe_stall("create", after=True)

    async def commit(self, *a: Any, **kw: Any) -> Any:
        await self._maybe_stall("commit")
        return await self.inner.commit(*a, **kw)

    async def record_tool(self, run_id: str, *, record: ToolRecord, **kw: Any) -> None:
        await self._maybe_stall("record_tool")
        await self.inner.record_tool(run_id, record=record, **kw)
        log(f"recorded {record.call_id}")

    async def park(self, *a: Any, **kw: Any) -> Any:
        await self._maybe_stall("park")
        return await self.inner.park(*a, **kw)

    async def finish(self, *a: Any, **kw: Any) -> Any:
        await self._maybe_stall("finish")
        return await self.inner.finish(*a, **kw)


async def _status(store: tether.RunStore) -> str | None:
    run = await store.get(RUN_ID)
    return None if run is None else run.status


async def kill(store: tether.RunStore, point: str) -> None:
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        handle = await rt.submit(agent(point), "go", run_id=RUN_ID)
        log("submitted")
        await handle.result()
        log("ended")  # never: the parent kills the process first


async def resume(store: tether.RunStore, point: str) -> None:
    async with tether.Runtime(
        store=store, agents=[agent(point)], lease_s=LEASE_S, resume=True
    ) as rt:
        if point == "create":
            handle = await rt.submit(agent(point), "go", run_id=RUN_ID)
            await handle.result()
        if point == "park":
            while await _status(store) != "parked":  # noqa: ASYNC110 (the store is polled)
                await anyio.sleep(0.02)
            await rt.approve(RUN_ID, "call-2")
        while await _status(store) != "finished":  # noqa: ASYNC110 (the store is polled)
            await anyio.sleep(0.02)


def main(argv: list[str]) -> None:
    global _dir
    phase, point, factory, arg, workdir, backend = argv
    _dir = crash_worker._dir = Path(workdir)
    module, function = factory.split(":")
    inner = getattr(importlib.import_module(module), function)(arg)
    store: Any = Stall(inner, point if phase == "kill" else None)
    job = {"kill": kill, "resume": resume}[phase]
    anyio.run(job, store, point, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
