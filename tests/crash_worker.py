"""The process the crash test kills: ``python -m tests.crash_worker PHASE FACTORY ARG DIR BACKEND``.

``FACTORY`` is ``module:function``, a function of one string (``ARG``: a path,
a DSN) that returns a :class:`tether.RunStore`; so the same worker serves the
SQLite and the PostgreSQL crash tests (:mod:`tests.crash_durable`).

* ``start``: starts :data:`RUNS` runs (ids ``crash-0``...), writes
  ``DIR/ready`` once the store has every run's record, and waits for them;
* ``resume``: a Runtime with ``resume=True`` that claims whatever is
  claimable, writes ``DIR/ready``, and exits once every run has finished.

The tool ``effect`` appends ``effect KEY`` to ``DIR/log`` (one line per
execution); the store is wrapped so that each tool result the store accepted
appends ``recorded KEY``: once recorded, a call has finished, and must not
run again. (Appends with ``O_APPEND`` keep the order across processes.)
"""

from __future__ import annotations

import importlib
import json
import os
import random
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

RUNS = 200
#: Rounds with tool calls per run, and calls per round.
ROUNDS, CALLS = 3, 2
LEASE_S = 1.0

_dir = Path(".")


def _append(name: str, line: str) -> None:
    fd = os.open(_dir / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@tether.tool
async def effect(key: str) -> str:
    """A side effect, counted in a file."""
    await anyio.sleep(random.random() * 0.1)
    _append("log", f"effect {key}")
    return f"did {key}"


def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """``ROUNDS`` rounds of ``CALLS`` effect calls, then the answer."""
    text = request.messages[0].text
    done = sum(isinstance(b, ToolResultBlock) for m in request.messages for b in m.content)
    if done < ROUNDS * CALLS:
        round = done // CALLS + 1
        return Reply(
            tool_calls=[
                ToolCall(name="effect", arguments={"key": f"{text}/{round}/{j}"})
                for j in range(CALLS)
            ]
        )
    return Reply(text=f"done {text}")


def agent() -> tether.Agent:
    return tether.Agent(
        name="crasher",
        instructions="crash me",
        provider=ScriptedProvider(model, latency_s=0.05, cost_per_mtok=Price(input=1, output=2)),
        tools=[effect],
        limits=tether.Limits(max_steps=20),
    )


class Logged:
    """The store, with every accepted tool result's key logged to ``recorded``.

    Written out method by method: a runtime-checkable protocol looks methods up
    statically, so ``__getattr__`` delegation would not make it a RunStore.
    """

    def __init__(self, inner: tether.RunStore) -> None:
        self.inner = inner
        self.created = 0

    async def record_tool(self, run_id: str, *, record: ToolRecord, **kw: Any) -> None:
        await self.inner.record_tool(run_id, record=record, **kw)
        _append("log", f"recorded {json.loads(record.arguments)['key']}")

    async def create(self, *a: Any, **kw: Any) -> Any:
        await self.inner.create(*a, **kw)
        self.created += 1
        if self.created == RUNS:  # every run is in the store: the crash may come
            _append("ready", "start")

    async def get(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.get(*a, **kw)

    async def commit(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.commit(*a, **kw)

    async def tool_records(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.tool_records(*a, **kw)

    async def park(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.park(*a, **kw)

    async def answer(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.answer(*a, **kw)

    async def finish(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.finish(*a, **kw)

    async def renew(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.renew(*a, **kw)

    async def release(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.release(*a, **kw)

    async def claimable(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.claimable(*a, **kw)

    async def claim(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.claim(*a, **kw)

    async def request(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.request(*a, **kw)

    async def events(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.events(*a, **kw)

    async def wait(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.wait(*a, **kw)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _all_finished(store: tether.RunStore) -> bool:
    for i in range(RUNS):
        run = await store.get(f"crash-{i}")
        if run is None or run.status != "finished":
            return False
    return True


async def start(store: tether.RunStore) -> None:
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        handles = [rt.start(agent(), f"crash-{i}", run_id=f"crash-{i}") for i in range(RUNS)]
        for handle in handles:
            await handle.result()


async def resume(store: tether.RunStore) -> None:
    async with tether.Runtime(store=store, agents=[agent()], lease_s=LEASE_S, resume=True):
        _append("ready", "resume")
        while not await _all_finished(store):  # noqa: ASYNC110
            await anyio.sleep(0.05)


def main(argv: list[str]) -> None:
    global _dir
    phase, factory, arg, workdir, backend = argv
    _dir = Path(workdir)
    module, function = factory.split(":")
    store = getattr(importlib.import_module(module), function)(arg)
    logged: Any = Logged(store)
    anyio.run({"start": start, "resume": resume}[phase], logged, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
