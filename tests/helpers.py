"""Small helpers shared by the tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
import pytest
import trio.testing

import tether
from tether import events as ev

#: Calls per tool name, counted by the counting tools below and by some modules'
#: own tools; conftest.py empties it before every test.
calls: Counter[str] = Counter()


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    calls["add"] += 1
    return a + b


async def run(agent: tether.Agent, question: str = "q") -> tether.RunResult:
    """Run ``agent`` once in a fresh Runtime and check the result's invariants."""
    async with tether.Runtime() as rt:
        result = await rt.run(agent, question)
    assert_consistent(result)
    return result


async def first(handle: tether.RunHandle, cls: type[Any]) -> Any:
    """Follow a run's events until one of ``cls`` arrives, and return it."""
    async for event in handle.events():
        if isinstance(event, cls):
            return event
    raise AssertionError(f"the run finished without a {cls.__name__}")


#: Waits until a started run has reached the point a test wants it at.
Reached = Callable[[tether.RunHandle], Awaitable[None]]


def until_event(cls: type[ev.Event]) -> Reached:
    """Reached once the run emitted a ``cls`` event and every task is blocked again."""

    async def wait(handle: tether.RunHandle) -> None:
        await first(handle, cls)
        await anyio.wait_all_tasks_blocked()

    return wait


def kinds(events: Iterable[ev.Event]) -> list[str]:
    """The event class names, in order."""
    return [type(e).__name__ for e in events]


def of(events: Iterable[ev.Event], cls: type[Any]) -> list[Any]:
    """The events of one class, in order."""
    return [e for e in events if isinstance(e, cls)]


def transitions(result: tether.RunResult) -> list[tuple[str, str]]:
    """The (kind, reason) of each Transition event, in order."""
    return [(t.kind, t.reason) for t in of(result.events, ev.Transition)]


def stages(result: tether.RunResult, round: int) -> list[str]:
    """The stages entered in one round, in order."""
    return [e.stage for e in of(result.events, ev.StageEntered) if e.round == round]


def charged(result: tether.RunResult) -> tuple[int, int]:
    """Input and output tokens summed over the UsageCharged events."""
    charges = of(result.events, ev.UsageCharged)
    return sum(c.input_tokens for c in charges), sum(c.output_tokens for c in charges)


def assert_consistent(result: tether.RunResult) -> None:
    """Invariants every finished run keeps, whatever its ending."""
    seqs = [e.seq for e in result.events]
    assert seqs == list(range(len(seqs))), "seq must be gap-free"
    finished = of(result.events, ev.RunFinished)
    assert len(finished) == 1
    assert result.events[-1] is finished[0]
    assert finished[0].termination == result.termination
    assert charged(result) == (result.usage.input_tokens, result.usage.output_tokens)
    charges = of(result.events, ev.UsageCharged)
    cached = (sum(c.cache_read_tokens for c in charges), sum(c.cache_write_tokens for c in charges))
    assert cached == (result.usage.cache_read_tokens, result.usage.cache_write_tokens)
    assert sum(cached) <= result.usage.input_tokens, "cache tokens are part of the input"
    started = [e.call_id for e in of(result.events, ev.ToolCallStarted)]
    ended = [e.call_id for e in of(result.events, ev.ToolCallFinished)]
    assert sorted(started) == sorted(ended), "every tool call gets exactly one result"
    uses = [
        b.id
        for m in result.messages
        for b in m.content
        if isinstance(b, tether.providers.ToolUseBlock)
    ]
    results = [
        b.tool_use_id
        for m in result.messages
        for b in m.content
        if isinstance(b, tether.providers.ToolResultBlock)
    ]
    assert sorted(uses) == sorted(results), "pairing rule: one tool_result per tool_use"


async def cancel_once_blocked(scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` as soon as every other task is blocked: no clock involved."""
    await anyio.wait_all_tasks_blocked()
    scope.cancel()


def task_names() -> set[str]:
    """The names of the tasks running now."""
    return {t.name for t in anyio.get_running_tasks()}


#: Runs a test on trio only, under a MockClock that jumps to the next deadline
#: whenever every task is blocked: timing semantics become exact and instant.
AUTOJUMP = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(
            ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio-autojump"
        )
    ],
)
