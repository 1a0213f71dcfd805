"""Cancellation and deadlines that land in the same instant as a child's reply.

Found by ``python -m benchmarks.soak``: the run had been handed a reply (a
tool_use, or the final answer) when its scope was cancelled, went on without a
checkpoint, and found its children gone (``crashed``), lost the cancel to the
answer (``answered``), or let a tool actor's error on an abandoned reply
channel escape into the Runtime (every run in flight lost). Under trio's
autojump clock the instants coincide exactly, so each case is reproduced every
time; the same tests run on asyncio with a real clock, where they must hold too.
"""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

import tether
from tether.providers import Reply, ScriptedProvider, ToolCall

from .helpers import AUTOJUMP, assert_consistent

pytestmark = pytest.mark.anyio


async def fetch(key: str) -> str:
    """Fetch a record."""
    return key


def compute(key: str) -> str:
    """Compute a record (in a thread)."""
    return key


def _agent(tool: str, n: int, latency_s: float, **limits: float) -> tether.Agent:
    def calls(r: int) -> list[ToolCall]:
        return [ToolCall(name=tool, arguments={"key": f"{r}-{i}"}) for i in range(n)]

    script = [Reply(tool_calls=calls(1)), Reply(tool_calls=calls(2)), Reply(text="hi")]
    return tether.Agent(
        name="racer",
        provider=ScriptedProvider(script, latency_s=latency_s),
        tools=[tether.tool(fetch), tether.tool(compute)],
        limits=tether.Limits(**limits),  # type: ignore[arg-type]
    )


@AUTOJUMP
@pytest.mark.parametrize(("tool", "n"), [("fetch", 1), ("fetch", 2), ("compute", 2)])
async def test_a_cancel_in_the_instant_of_a_tool_use_reply_ends_cancelled(
    tool: str, n: int
) -> None:
    """Cancelled as round 2's tool_use arrives: cancelled every time; nothing escapes."""
    endings: Counter[tether.Termination] = Counter()
    async with tether.Runtime() as rt:
        for _ in range(40):
            handle = rt.start(_agent(tool, n, latency_s=1.0), "q")
            await anyio.sleep(2.0)  # the instant round 2's reply is delivered
            handle.cancel("stop now")
            result = await handle.result()
            assert_consistent(result)
            endings[result.termination] += 1
    assert endings == Counter({tether.Termination.CANCELLED: 40})


@AUTOJUMP
async def test_a_cancel_in_the_instant_of_the_answer_ends_cancelled() -> None:
    """handle.cancel() while the run is not done wins, even over an answer just delivered."""
    agent = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="hi")], latency_s=1.0))
    endings: Counter[tether.Termination] = Counter()
    async with tether.Runtime() as rt:
        for _ in range(40):
            handle = rt.start(agent, "q")
            await anyio.sleep(1.0)  # wakes in the same instant as the provider's reply
            assert not handle.done
            handle.cancel("stop now")
            result = await handle.result()
            assert_consistent(result)
            endings[result.termination] += 1
    assert endings == Counter({tether.Termination.CANCELLED: 40})


@AUTOJUMP
@pytest.mark.parametrize(("tool", "n"), [("fetch", 1), ("compute", 2)])
@pytest.mark.parametrize("nudge", [0.0, 1e-9, -1e-9])
async def test_a_deadline_in_the_instant_of_a_reply_ends_deadline(
    tool: str, n: int, nudge: float
) -> None:
    """A deadline at (or a hair around) a reply's instant ends deadline, never crashed."""
    async with tether.Runtime() as rt:
        for latency in (0.5, 1.0, 1.5):
            agent = _agent(tool, n, latency_s=latency, timeout_s=latency + nudge)
            result = await rt.run(agent, "q")
            assert_consistent(result)
            assert result.termination is tether.Termination.DEADLINE, result.summary()


@pytest.mark.parametrize(("tool", "n"), [("fetch", 2), ("compute", 2)])
async def test_cancels_racing_replies_on_the_real_clock(tool: str, n: int) -> None:
    """Many runs cancelled around their replies' instants all end cancelled, none crashed."""
    endings: Counter[tether.Termination] = Counter()
    async with tether.Runtime() as rt, anyio.create_task_group() as tg:

        async def one(delay: float) -> None:
            handle = rt.start(_agent(tool, n, latency_s=0.004), "q")
            await anyio.sleep(delay)
            handle.cancel("stop now")
            result = await handle.result()
            assert_consistent(result)
            endings[result.termination] += 1

        for i in range(60):
            tg.start_soon(one, 0.002 * (i % 7))
    assert tether.Termination.CRASHED not in endings
    assert set(endings) <= {tether.Termination.CANCELLED}
