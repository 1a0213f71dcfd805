"""Sync tools that outlive their call: the slot is freed at once, the process can still exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall

from .helpers import assert_consistent, of

pytestmark = pytest.mark.anyio

STUCK = threading.Event()  # set by each test when it is done: the stuck threads then end


@tether.tool(timeout_s=0.05)
def stuck() -> str:
    """Block until the test ends."""
    STUCK.wait(120)
    return "late"


@tether.tool(timeout_s=10)  # stuck slots would make it wait until then
def quick(x: int) -> int:
    """Answer at once."""
    return x + 1


def _calls(name: str, arguments: dict[str, int] | None = None) -> tether.Agent:
    script = [Reply(tool_calls=[ToolCall(name=name, arguments=arguments or {})]), Reply(text="ok")]
    return tether.Agent(
        name=name,
        provider=ScriptedProvider(script),
        tools=[stuck, quick],
        limits=tether.Limits(max_tool_retries=0),
    )


async def test_an_abandoned_sync_tool_gives_its_slot_back_at_once() -> None:
    """After every slot's tool timed out while stuck, a quick sync tool in a new run runs."""
    STUCK.clear()
    try:
        async with tether.Runtime(tool_threads=2) as rt:
            timed_out = [await rt.run(_calls("stuck"), "q") for _ in range(4)]
            fresh = await rt.run(_calls("quick", {"x": 1}), "q")
    finally:
        STUCK.set()
    for result in timed_out:
        assert [e.outcome for e in of(result.events, ev.ToolCallFinished)] == ["timeout"]
    finished = of(fresh.events, ev.ToolCallFinished)
    assert [(e.outcome, e.content) for e in finished] == [("ok", "2")]
    assert fresh.termination is tether.Termination.ANSWERED
    assert_consistent(fresh)


async def test_cancelling_a_run_in_a_sync_tool_frees_the_slot() -> None:
    """A run cancelled while its sync tool is stuck frees the slot for the next call."""
    STUCK.clear()
    agent = tether.Agent(
        name="stuck",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="slow")]), Reply(text="x")]),
        tools=[slow],
    )
    try:
        async with tether.Runtime(tool_threads=1) as rt:
            handle = rt.start(agent, "q")
            async for event in handle.events():
                if isinstance(event, ev.ToolCallStarted):
                    assert event.name == "slow"
                    break
            handle.cancel("enough")
            cancelled = await handle.result()
            fresh = await rt.run(_calls("quick", {"x": 2}), "q")
    finally:
        STUCK.set()
    assert cancelled.termination is tether.Termination.CANCELLED
    assert fresh.termination is tether.Termination.ANSWERED
    assert [e.content for e in of(fresh.events, ev.ToolCallFinished)] == ["3"]


@tether.tool(timeout_s=60)
def slow() -> str:
    """Block until the test ends."""
    STUCK.wait(120)
    return "late"


SCRIPT = """
import sys, time
import anyio, tether
from tether.providers import Reply, ScriptedProvider, ToolCall

@tether.tool(timeout_s=0.05)
def forever() -> str:
    \"\"\"Never return.\"\"\"
    time.sleep(3600)
    return "never"

async def main() -> None:
    agent = tether.Agent(
        name="forever",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="forever")]), Reply(text="ok")]),
        tools=[forever],
        limits=tether.Limits(max_tool_retries=0),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    print(result.termination.value)

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_sync_tool_blocked_for_good_does_not_keep_the_process_alive(backend: str) -> None:
    """The process exits when its work is done, though a tool's thread is still blocked."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), backend],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "answered"
