"""The processes of the approval-crash probe: ``python -m tests.approval_worker PHASE FACTORY ARG
DIR BACKEND`` (:mod:`tests.approval_crash` drives them).

``FACTORY`` and ``ARG`` make the store, as for :mod:`tests.crash_worker`.

* ``park``: starts run :data:`RUN_ID`, whose first round calls ``pay`` (held by
  ``Verdict.ask``) and ``note`` (allowed), and exits once the store has it parked;
* ``approve``: approves ``pay`` from a Runtime that knows the agent, which resumes
  the run; its first round commit blocks (logged ``commit``): the parent SIGKILLs it
  there, after both calls have finished and been recorded;
* ``stall``: a ``resume=True`` Runtime that claims the run and blocks at its first
  commit in the same way (a second crash at the same point);
* ``finish``: a ``resume=True`` Runtime that exits once the run has finished.

Every execution of a tool appends ``effect KEY`` to ``DIR/log``, and every tool
result the store accepted appends ``recorded KEY``, each with ``fsync``.
"""

from __future__ import annotations

import importlib
import json
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

RUN_ID = "approval-1"
LEASE_S = 1.0

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
async def pay(key: str) -> str:
    """Pay: a side effect that must happen once."""
    log(f"effect {key}")
    return f"paid {key}"


@tether.tool
async def note(key: str) -> str:
    """Write a note: a side effect of an allowed call beside the held one."""
    log(f"effect {key}")
    return f"noted {key}"


def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """Round 1: pay and note; then the answer."""
    results = [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]
    if not results:
        return Reply(
            tool_calls=[
                ToolCall(name="pay", arguments={"key": "pay"}, id="pay-1"),
                ToolCall(name="note", arguments={"key": "note"}, id="note-1"),
            ]
        )
    return Reply(text="; ".join(r.content for r in results))


def ask_to_pay(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    if point is tether.PolicyPoint.TOOL_CALL and subject.name == "pay":
        return tether.Verdict.ask("payments need a person")
    return None


def agent() -> tether.Agent:
    return tether.Agent(
        name="approver",
        instructions="pay when allowed",
        provider=ScriptedProvider(model, cost_per_mtok=Price(input=1, output=2)),
        tools=[pay, note],
        policies=[ask_to_pay],
    )


class Probe(crash_worker.Logged):
    """The store, logging accepted tool results; ``stall``: the first commit never returns."""

    def __init__(self, inner: tether.RunStore, stall: bool) -> None:
        super().__init__(inner)
        self.stall = stall

    async def record_tool(self, run_id: str, *, owner: str, record: ToolRecord, **kw: Any) -> None:
        await self.inner.record_tool(run_id, owner=owner, record=record, **kw)
        log(f"recorded {json.loads(record.arguments)['key']}")

    async def commit(self, *a: Any, **kw: Any) -> Any:
        if self.stall:
            log("commit")
            await anyio.sleep_forever()  # the parent kills the process here
        return await self.inner.commit(*a, **kw)


async def _status(store: tether.RunStore) -> str | None:
    run = await store.get(RUN_ID)
    return None if run is None else run.status


async def park(store: tether.RunStore) -> None:
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        rt.start(agent(), "pay once", run_id=RUN_ID)
        while await _status(store) != "parked":  # noqa: ASYNC110 (the store is polled)
            await anyio.sleep(0.01)


async def approve(store: tether.RunStore) -> None:
    async with tether.Runtime(store=store, agents=[agent()], lease_s=LEASE_S) as rt:
        await rt.approve(RUN_ID, "pay-1")
        await anyio.sleep_forever()


async def resume(store: tether.RunStore) -> None:
    async with tether.Runtime(store=store, agents=[agent()], lease_s=LEASE_S, resume=True):
        while await _status(store) != "finished":  # noqa: ASYNC110 (the store is polled)
            await anyio.sleep(0.02)


def main(argv: list[str]) -> None:
    global _dir
    phase, factory, arg, workdir, backend = argv
    _dir = crash_worker._dir = Path(workdir)
    module, function = factory.split(":")
    inner = getattr(importlib.import_module(module), function)(arg)
    store: Any = Probe(inner, stall=phase in ("approve", "stall"))
    job = {"park": park, "approve": approve, "stall": resume, "finish": resume}[phase]
    anyio.run(job, store, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
