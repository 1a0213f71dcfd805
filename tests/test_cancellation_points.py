"""Cancellation wins every race: more await points, and a child that ends first.

The sweep in ``test_cancellation_sweep`` cancels a run at the await points of
a round; these add the provider gate's slot, a policy check, lesson recall and
the middle of an HTTP read, with the same invariants. Then the race itself: a
child that closes its reply channel because the run is being cancelled must
never make the run end ``crashed``.
"""

from __future__ import annotations

import gc
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.actors import ToolSettings, ToolSpec
from tether.providers import (
    AnthropicProvider,
    Backoff,
    Message,
    ModelRequest,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolUseBlock,
)
from tether.runtime._accounting import Accounts
from tether.runtime._limits import Limits, UsageMeter
from tether.runtime._modelcall import ModelClient
from tether.runtime._policy import Policies
from tether.runtime._state import RunState
from tether.runtime._toolround import Approvals, ToolRound
from tether.runtime._trail import Trail

from .helpers import Reached, assert_consistent, of, until_event
from .providers.fakes import Answer, fake_server, sse_answer, sse_body

pytestmark = pytest.mark.anyio


def until(flag: anyio.Event) -> Reached:
    async def wait(handle: tether.RunHandle) -> None:
        await flag.wait()
        await anyio.wait_all_tasks_blocked()

    return wait


async def cancel_at(agent: tether.Agent, reached: Reached, **runtime: Any) -> tether.RunResult:
    """Start ``agent``, wait until it reaches its point, cancel it; check nothing leaked."""
    before = {t.id for t in anyio.get_running_tasks()}
    with anyio.fail_after(20):
        async with tether.Runtime(**runtime) as rt:
            handle = rt.start(agent, "q")
            await reached(handle)
            handle.cancel("swept")
            result = await handle.result()
    assert {t.id for t in anyio.get_running_tasks()} == before, "a task outlived the Runtime"
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "swept"
    assert_consistent(result)
    return result


async def test_cancel_in_a_policy_check() -> None:
    """A run cancelled while an async policy decides ends cancelled."""
    reached = anyio.Event()

    async def slow(point: tether.PolicyPoint, subject: Any) -> None:
        reached.set()
        await anyio.sleep_forever()

    agent = tether.Agent(name="p", provider=ScriptedProvider([Reply(text="x")]), policies=[slow])
    result = await cancel_at(agent, until(reached))
    assert not of(result.events, ev.PolicyChecked)


async def test_cancel_in_lesson_recall() -> None:
    """A run cancelled while its lesson store recalls ends cancelled."""
    reached = anyio.Event()

    class SlowStore(tether.InMemoryLessonStore):
        async def recall(self, scope: str, limit: int) -> list[tether.Lesson]:
            reached.set()
            await anyio.sleep_forever()
            raise AssertionError

    agent = tether.Agent(name="m", provider=ScriptedProvider([Reply(text="x")]), memory=SlowStore())
    await cancel_at(agent, until(reached))


def stalled_stream() -> Answer:
    """An Anthropic stream that starts, sends some text, then stalls for an hour."""
    start = {
        "type": "message_start",
        "message": {"id": "m", "model": "claude-x", "content": [], "usage": {"input_tokens": 9}},
    }
    head = sse_body(
        [
            ("message_start", start),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "Hel"},
                },
            ),
        ]
    )
    tail = sse_body([("message_stop", {"type": "message_stop"})])
    return sse_answer(head + tail, at=[len(head)], part_delay=3600)


async def test_cancel_mid_http_read_and_in_the_gate_queue() -> None:
    """One run cancelled mid-HTTP-read, another while queued for the gate's only slot."""
    before = {t.id for t in anyio.get_running_tasks()}
    async with fake_server(stalled_stream(), stalled_stream()) as server:
        provider = AnthropicProvider("claude-x", api_key="k", base_url=server.url)
        agent = tether.Agent(name="h", provider=provider)
        with anyio.fail_after(20):
            async with tether.Runtime(provider_concurrency=1) as rt:
                reading = rt.start(agent, "q")
                async for event in reading.events():
                    if isinstance(event, ev.UsageCharged | ev.ModelCallStarted):
                        break
                while not server.requests:
                    await anyio.wait_all_tasks_blocked()
                queued = rt.start(agent, "q")
                await until_event(ev.ModelCallStarted)(queued)
                assert len(server.requests) == 1, "the second run waits for the gate's slot"
                queued.cancel("swept")
                reading.cancel("swept")
                results = [await queued.result(), await reading.result()]
    assert {t.id for t in anyio.get_running_tasks()} == before, "a task outlived the Runtime"
    for result in results:
        assert result.termination is tether.Termination.CANCELLED
        assert result.error == "swept"
        assert_consistent(result)


# ----------------------------------------------------------- the race itself


class ClosingRef:
    """An actor that closes every request's reply channel unanswered, as a cancelled one does."""

    def __init__(self) -> None:
        self.sent = 0

    async def send(self, request: Any) -> None:
        self.sent += 1
        request.reply.close()

    def close(self) -> None:
        pass


def accounts(trail: Trail) -> Accounts:
    return Accounts(meter=UsageMeter(), limits=Limits(), price=None, trail=trail)


async def test_model_reply_closed_while_cancelling_is_a_cancellation() -> None:
    """The model actor's reply ends unanswered while the run is cancelled: cancelled, no crash."""
    trail = Trail("r")
    ref = ClosingRef()
    client = ModelClient(
        ref,  # type: ignore[arg-type]
        trail=trail,
        accounts=accounts(trail),
        max_attempts=3,
        backoff=Backoff(),
    )
    request = ModelRequest(system="", messages=(Message.user("q"),))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await client.call(request)
        raise AssertionError("the call returned inside a cancelled scope")
    assert scope.cancelled_caught
    assert ref.sent == 1
    assert not of(trail.events, ev.ChildCrashed)


async def test_tool_reply_closed_while_cancelling_is_a_cancellation() -> None:
    """The tool actor's reply ends unanswered while the run is cancelled: no crash recorded."""

    @tether.tool
    async def work() -> str:
        """Work."""
        return "done"

    trail = Trail("r")
    state = RunState(run_id="r", agent="a", input="q", system="")
    ref = ClosingRef()
    tools: dict[str, ToolSpec] = {"work": work}
    round_ = ToolRound(
        [ToolUseBlock(id="c1", name="work", input={})],
        state=state,
        tools=tools,
        catalogue=(),
        limits=Limits(),
        trail=trail,
        accounts=accounts(trail),
        policies=Policies([], trail),
        approvals=Approvals(state.approvals),
        actor=lambda: ref,  # type: ignore[arg-type,return-value]
        run_child=None,
    )
    with anyio.CancelScope() as scope:
        scope.cancel()
        await round_.run()
        raise AssertionError("the round returned inside a cancelled scope")
    assert scope.cancelled_caught
    assert not of(trail.events, ev.ChildCrashed)
    round_.abort("the run ended")
    (finished,) = of(trail.events, ev.ToolCallFinished)
    assert finished.outcome == "cancelled"
    assert [type(b).__name__ for b in state.messages[-1].content] == ["ToolResultBlock"]


# ------------------------------------------------- streaming (see docs/guides/streaming.md)


def streaming_agent() -> tether.Agent:
    """An answer that streams in many small pieces, slowly."""
    provider = ScriptedProvider([Reply(text="a" * 64)], chunk_size=2, chunk_latency_s=0.01)
    return tether.Agent(name="s", provider=provider)


def until_text(stream: Any) -> Reached:
    """Reached once ``stream`` (a delta stream made before the run began) gave a text delta."""

    async def wait(handle: tether.RunHandle) -> None:
        async for item in stream:
            if isinstance(item, str | ev.TextDelta):
                break
        await anyio.wait_all_tasks_blocked()

    return wait


@pytest.mark.parametrize("deltas", ["stream_text", "events"])
async def test_cancel_a_run_mid_stream_ends_its_delta_readers(deltas: str) -> None:
    """A run cancelled while a delta reader follows it ends cancelled; the reader ends too."""
    before = {t.id for t in anyio.get_running_tasks()}
    with anyio.fail_after(20):
        async with tether.Runtime() as rt:
            handle = rt.start(streaming_agent(), "q")
            stream = handle.stream_text() if deltas == "stream_text" else handle.events(deltas=True)
            await until_text(stream)(handle)
            handle.cancel("swept")
            rest = [item async for item in stream]  # ends with the run, nothing left hanging
            result = await handle.result()
    assert {t.id for t in anyio.get_running_tasks()} == before, "a task outlived the Runtime"
    assert result.termination is tether.Termination.CANCELLED
    assert_consistent(result)
    if deltas == "events":
        assert isinstance(rest[-1], ev.RunFinished)
    assert not result.events[-1].output


@pytest.mark.parametrize("deltas", ["stream_text", "events"])
async def test_cancel_a_delta_reader_parked_in_its_wait(deltas: str) -> None:
    """A reader cancelled while it waits for the next delta leaves the run unharmed and
    subscribed to nothing: the run answers, streaming to no one."""
    before = {t.id for t in anyio.get_running_tasks()}
    with anyio.fail_after(20):
        async with tether.Runtime() as rt:
            handle = rt.start(streaming_agent(), "q")
            trail = handle._run.trail
            first = anyio.Event()

            async def reader() -> None:
                stream = (
                    handle.stream_text() if deltas == "stream_text" else handle.events(deltas=True)
                )
                async for item in stream:
                    if isinstance(item, str | ev.TextDelta):
                        first.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await first.wait()
                await anyio.wait_all_tasks_blocked()  # the reader is parked in its wait
                tg.cancel_scope.cancel()
            # The cancellation's traceback holds the reader's frame in a cycle: once
            # that is collected, the buffer goes and the run streams to no one.
            gc.collect()
            assert not trail.streaming, "the cancelled reader's buffer went with it"
            result = await handle.result()
    assert {t.id for t in anyio.get_running_tasks()} == before, "a task outlived the Runtime"
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "a" * 64
    assert_consistent(result)


@pytest.mark.parametrize("where", ["backoff", "retry"])
async def test_cancel_while_a_cut_call_is_finished(where: str) -> None:
    """A lone call cut at its deadline is finished outside the tool actor's scope (its
    backoff, then its retry): a run cancelled there ends cancelled, nothing leaked."""
    cut, retrying = anyio.Event(), anyio.Event()
    attempts: list[int] = []

    @tether.tool(timeout_s=0.3)  # the retry's deadline is far behind the cancel
    async def hangs() -> str:
        """Never answers."""
        attempts.append(1)
        if len(attempts) > 1:
            retrying.set()
        try:
            await anyio.sleep_forever()
        finally:
            cut.set()
        return "never"

    wait = 0.01 if where == "retry" else 1000.0
    agent = tether.Agent(
        name="c",
        provider=ScriptedProvider(
            [Reply(tool_calls=(ToolCall(name="hangs", arguments={}),)), Reply(text="x")]
        ),
        tools=[hangs],
        tool_settings=ToolSettings(backoff=Backoff(initial=wait, cap=wait, jitter=False)),
        limits=tether.Limits(max_tool_retries=1),
    )
    result = await cancel_at(agent, until(cut if where == "backoff" else retrying))
    (done,) = of(result.events, ev.ToolCallFinished)
    assert done.outcome == "cancelled"
    assert len(attempts) == (1 if where == "backoff" else 2)
