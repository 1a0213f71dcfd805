"""Agents whose runs fill the viewer's tests' stores: real runs on the scripted provider."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

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

#: The gates ``wait_for`` waits on, by key; a test opens one to let its run go on.
GATES: dict[str, threading.Event] = {}


def _results(request: ModelRequest) -> list[ToolResultBlock]:
    return [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tether.tool
async def bump(key: str) -> str:
    """A side effect that needs a person's approval."""
    return f"bumped {key}"


@tether.tool
async def wait_for(key: str) -> str:
    """Wait until the test opens the gate ``key``."""
    gate = GATES.setdefault(key, threading.Event())
    await anyio.to_thread.run_sync(gate.wait, abandon_on_cancel=True)
    return f"gate {key} opened"


def _sum(request: ModelRequest, ctx: ProviderContext) -> Reply:
    results = _results(request)
    if not results:
        return Reply(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3}, id="t-add")])
    thought = tether.Reasoning(text="The tool says 5; say so.")
    return Reply(text=f"The sum is {results[-1].content}.", reasoning=[thought])


def _loop(request: ModelRequest, ctx: ProviderContext) -> Reply:
    n = len(_results(request))
    return Reply(tool_calls=[ToolCall(name="add", arguments={"a": n, "b": 1}, id=f"t-{n}")])


def _ask(request: ModelRequest, ctx: ProviderContext) -> Reply:
    if not _results(request):
        return Reply(tool_calls=[ToolCall(name="bump", arguments={"key": "k"}, id="b1")])
    return Reply(text="bumped, done")


def _gated(request: ModelRequest, ctx: ProviderContext) -> Reply:
    if not _results(request):
        key = request.messages[0].text
        return Reply(tool_calls=[ToolCall(name="wait_for", arguments={"key": key}, id="g1")])
    return Reply(text="through the gate")


class AskForBumps:
    """Holds every bump for a person's approval."""

    async def check(self, point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        if point is tether.PolicyPoint.TOOL_CALL and subject.name == "bump":
            return tether.Verdict.ask("bumps need a person")
        return None


PRICE = Price(input=3.0, output=15.0)


def calc() -> tether.Agent:
    return tether.Agent(
        name="calc",
        instructions="add",
        provider=ScriptedProvider(_sum, cost_per_mtok=PRICE),
        tools=[add],
        judge=tether.RuleJudge(
            {"mentions_sum": lambda c: (1.0 if "5" in c.text else 0.0, "says the sum")}
        ),
    )


def looper() -> tether.Agent:
    return tether.Agent(
        name="looper",
        instructions="loop",
        provider=ScriptedProvider(_loop),
        tools=[add],
        limits=tether.Limits(max_steps=2),
    )


def asker() -> tether.Agent:
    return tether.Agent(
        name="asker",
        instructions="ask",
        provider=ScriptedProvider(_ask),
        tools=[bump],
        policies=[AskForBumps()],
    )


def gated() -> tether.Agent:
    return tether.Agent(
        name="gated", instructions="wait", provider=ScriptedProvider(_gated), tools=[wait_for]
    )


async def wait_status(store: tether.RunStore, run_id: str, status: str) -> None:
    with anyio.fail_after(20):
        while True:
            run = await store.get(run_id)
            if run is not None and run.status == status:
                return
            await anyio.sleep(0.02)


async def fill(path: Path | tether.RunStore) -> None:
    """Three calc runs (answered, judged), one looper (max_steps), one parked asker.

    Given a path, the store is closed at the end (its WAL folded into the file, which
    can then be copied alone)."""
    store = tether.SQLiteRunStore(path) if isinstance(path, Path) else path
    try:
        async with tether.Runtime(store=store, agents=[calc(), looper(), asker()]) as rt:
            for i in range(3):
                await rt.run(calc(), f"add 2 and 3 (#{i})", run_id=f"calc-{i}")
            await rt.run(looper(), "loop", run_id="loop-0")
            rt.start(asker(), "bump k", run_id="ask-0")
            await wait_status(store, "ask-0", "parked")
    finally:
        if isinstance(path, Path):
            await store.aclose()


__all__ = ["GATES", "asker", "calc", "fill", "gated", "looper", "wait_status"]
