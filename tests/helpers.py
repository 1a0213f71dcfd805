"""Small helpers shared by the tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio
import pytest
import trio.testing

import tether
from tether import events as ev


def kinds(events: Iterable[ev.Event]) -> list[str]:
    """The event class names, in order."""
    return [type(e).__name__ for e in events]


def of(events: Iterable[ev.Event], cls: type[Any]) -> list[Any]:
    """The events of one class, in order."""
    return [e for e in events if isinstance(e, cls)]


def transitions(result: tether.RunResult) -> list[tuple[str, str]]:
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
