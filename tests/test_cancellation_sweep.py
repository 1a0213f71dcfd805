"""Cancel a run at every await point of a round; nothing leaks, nothing is lost.

Each point below is a place where a round waits: the model's stream, the
provider's backoff sleep, an async tool, a sync tool in its thread, the judge,
a lesson write, an approval wait, and a reader waiting on the event stream.
At each one the run is cancelled from its handle while a second run goes on,
and the same invariants are checked.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import pytest

import tether
from tether import events as ev
from tether.providers import (
    Backoff,
    Fault,
    ModelRequest,
    ProviderContext,
    RateLimited,
    Reply,
    ScriptedProvider,
    ToolCall,
)

from .helpers import assert_consistent, of, until_event

pytestmark = pytest.mark.anyio


@attrs.define
class Point:
    """A scenario: an agent that blocks at one await point, and how to know it got there."""

    agent: tether.Agent
    reached: Callable[[tether.RunHandle], Awaitable[None]]
    #: Checked after the run ended.
    after: Callable[[tether.RunResult], None] = lambda result: None


def _until(flag: anyio.Event) -> Callable[[tether.RunHandle], Awaitable[None]]:
    async def wait(handle: tether.RunHandle) -> None:
        await flag.wait()
        await anyio.wait_all_tasks_blocked()

    return wait


def model_streaming() -> Point:
    reached = anyio.Event()

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        reached.set()
        return Reply(text="a long streamed answer " * 20)

    provider = ScriptedProvider(script, chunk_size=10, chunk_latency_s=3600)

    def after(result: tether.RunResult) -> None:
        # The partial stream's usage was charged and recorded.
        assert result.usage.output_tokens > 0
        assert of(result.events, ev.UsageCharged)

    return Point(tether.Agent(name="stream", provider=provider), _until(reached), after)


def backoff_sleep() -> Point:
    provider = ScriptedProvider(
        [Fault(error=RateLimited("slow", status=429, retry_after=3600)), Reply(text="x")],
        backoff=Backoff(cap=3600),
    )
    return Point(tether.Agent(name="backoff", provider=provider), until_event(ev.ProviderRetry))


def tool_agent(tool: tether.ToolSpec, **kwargs: Any) -> tether.Agent:
    return tether.Agent(
        name=tool.name,
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name=tool.name)]), Reply(text="x")]),
        tools=[tool],
        **kwargs,
    )


def async_tool() -> Point:
    reached = anyio.Event()

    @tether.tool
    async def hang() -> str:
        """Hangs."""
        reached.set()
        await anyio.sleep_forever()
        return "never"

    return Point(tool_agent(hang), _until(reached))


class SyncToolPoint:
    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

        @tether.tool
        def block() -> str:
            """Blocks its thread."""
            self.started.set()
            self.release.wait(30)
            self.returned.set()
            return "late result"

        self.tool = block

    async def reached(self, handle: tether.RunHandle) -> None:
        await anyio.to_thread.run_sync(self.started.wait, 10)

    def after(self, result: tether.RunResult) -> None:
        self.release.set()
        assert self.returned.wait(10)
        assert "late result" not in repr(result.messages)
        assert "late result" not in repr(result.events)


def sync_tool() -> Point:
    point = SyncToolPoint()
    return Point(tool_agent(point.tool), point.reached, point.after)


def judge() -> Point:
    reached = anyio.Event()

    class Slow:
        async def judge(self, candidate: tether.Candidate) -> tether.Judgement:
            reached.set()
            await anyio.sleep_forever()
            raise AssertionError

    agent = tether.Agent(name="judged", provider=ScriptedProvider([Reply(text="x")]), judge=Slow())
    return Point(agent, _until(reached))


def lesson_write() -> Point:
    reached = anyio.Event()

    class SlowStore(tether.InMemoryLessonStore):
        async def add(self, **kwargs: Any) -> tether.Lesson:
            reached.set()
            await anyio.sleep_forever()
            raise AssertionError

    agent = tether.Agent(
        name="learner",
        provider=ScriptedProvider([Reply(text="x"), Reply(text="y")]),
        judge=tether.RuleJudge({"never": lambda c: False}),
        memory=SlowStore(),
    )
    return Point(agent, _until(reached))


def approval_wait() -> Point:
    @tether.tool
    async def risky() -> str:
        """Needs approval."""
        return "ok"

    agent = tool_agent(
        risky,
        policies=[lambda point, s: tether.Verdict.ask("check") if point == "tool_call" else None],
    )
    return Point(agent, until_event(ev.ApprovalRequested))


def event_reader() -> Point:
    agent = tether.Agent(name="read", provider=ScriptedProvider([Reply(text="x")], latency_s=3600))
    return Point(agent, until_event(ev.ModelCallStarted))


POINTS: dict[str, Callable[[], Point]] = {
    "model_streaming": model_streaming,
    "backoff_sleep": backoff_sleep,
    "async_tool": async_tool,
    "sync_tool": sync_tool,
    "judge": judge,
    "lesson_write": lesson_write,
    "approval_wait": approval_wait,
    "event_reader": event_reader,
}


@pytest.mark.parametrize("name", list(POINTS))
async def test_cancel_at_every_await_point(name: str) -> None:
    """Cancel at this point: one RunFinished cancelled, nothing leaked, usage = charges."""
    point = POINTS[name]()
    bystander = tether.Agent(
        name="bystander",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="echo", arguments={"x": 1})]), Reply(text="fine")],
            latency_s=0.01,
        ),
        tools=[echo],
    )
    before = {t.id for t in anyio.get_running_tasks()}
    reader_saw: list[ev.Event] = []
    with anyio.fail_after(20):
        async with tether.Runtime() as rt:
            other = rt.start(bystander, "q")
            handle = rt.start(point.agent, "q")

            async def read() -> None:
                async for event in handle.events():
                    reader_saw.append(event)

            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await point.reached(handle)
                handle.cancel("swept")
                result = await handle.result()
            other_result = await other.result()
    assert {t.id for t in anyio.get_running_tasks()} == before, "a task outlived the Runtime"
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "swept"
    finished = of(result.events, ev.RunFinished)
    assert len(finished) == 1
    assert reader_saw == list(result.events), "the reader saw every event, RunFinished last"
    assert_consistent(result)
    point.after(result)
    assert other_result.termination is tether.Termination.ANSWERED


@tether.tool
async def echo(x: int) -> int:
    """Echo."""
    return x
