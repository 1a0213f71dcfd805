"""The SIGSTOP probe's processes: ``python -m tests.fence_worker PHASE FACTORY ARG DIR BACKEND``.

``FACTORY`` is ``module:function``, a function of one string (``ARG``: a path,
a DSN) that returns a :class:`tether.RunStore` (as in :mod:`tests.crash_worker`).

* ``own``: a Runtime with ``lease_s=LEASE_S`` starts :data:`RUNS` runs (ids
  ``fence-0``...), writes ``DIR/ready`` once the store has every run's record,
  and waits for every run's result (its handles follow a run it lost in the
  store, so it ends once the new owner has finished them all);
* ``resume``: a Runtime with ``resume=True`` that claims whatever is claimable,
  writes ``DIR/ready``, and exits once every run has finished.

Every side effect is logged to ``DIR/log`` as it *starts*, one line each,
appended with ``O_APPEND`` and fsynced before the effect goes on:

* ``tool PID MONOTONIC KEY IDEMPOTENCY_KEY`` for each execution of the tool
  ``effect`` (which then takes :data:`TOOL_S`);
* ``model PID MONOTONIC RUN_ID CALL_INDEX`` for each request the provider gets.

``MONOTONIC`` is ``time.monotonic()``: one clock for every process of the
machine (Linux's ``CLOCK_MONOTONIC``), which goes on while a process is stopped.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

import tether
from tether.providers import (
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)

RUNS = 24
#: Rounds with tool calls per run, and calls per round.
ROUNDS, CALLS = 4, 2
LEASE_S = 1.0
#: How long each tool call takes.
TOOL_S = 0.3

_dir = Path(".")


def log(line: str) -> None:
    """Append ``line`` to ``DIR/log``, durably, before the effect goes on."""
    fd = os.open(_dir / "log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@tether.tool
async def effect(ctx: tether.RunContext, key: str) -> str:
    """A side effect that takes a while, logged as it starts."""
    log(f"tool {os.getpid()} {time.monotonic():.6f} {key} {ctx.idempotency_key}")
    await anyio.sleep(TOOL_S)
    return f"did {key}"


def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """``ROUNDS`` rounds of ``CALLS`` effect calls, then the answer; each request logged."""
    log(f"model {os.getpid()} {time.monotonic():.6f} {ctx.run_id} {ctx.call_index}")
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
        name="fenced",
        instructions="act once",
        provider=ScriptedProvider(model, latency_s=0.1),
        tools=[effect],
        limits=tether.Limits(max_steps=20),
    )


async def _all_stored(store: tether.RunStore) -> bool:
    for i in range(RUNS):
        if await store.get(f"fence-{i}") is None:
            return False
    return True


async def _all_finished(store: tether.RunStore) -> bool:
    for i in range(RUNS):
        run = await store.get(f"fence-{i}")
        if run is None or run.status != "finished":
            return False
    return True


def _ready(phase: str) -> None:
    fd = os.open(_dir / "ready", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{phase} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


async def own(store: tether.RunStore) -> None:
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        handles = [rt.start(agent(), f"fence-{i}", run_id=f"fence-{i}") for i in range(RUNS)]
        while not await _all_stored(store):  # noqa: ASYNC110
            await anyio.sleep(0.01)
        _ready("own")
        for handle in handles:
            await handle.result()


async def resume(store: tether.RunStore) -> None:
    async with tether.Runtime(store=store, agents=[agent()], lease_s=LEASE_S, resume=True):
        _ready("resume")
        while not await _all_finished(store):  # noqa: ASYNC110
            await anyio.sleep(0.05)


def main(argv: list[str]) -> None:
    global _dir
    phase, factory, arg, workdir, backend = argv
    _dir = Path(workdir)
    module, function = factory.split(":")
    store: Any = getattr(importlib.import_module(module), function)(arg)

    async def go() -> None:
        try:
            await {"own": own, "resume": resume}[phase](store)
        finally:
            await store.aclose()

    anyio.run(go, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
