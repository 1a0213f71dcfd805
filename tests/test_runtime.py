"""The Runtime and the Run as supervisors: cancellation, deadlines, crashes, events, queueing."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.actors import ModelActor, ToolActor
from tether.providers import (
    Fault,
    ModelRequest,
    ProviderContext,
    RateLimited,
    Reply,
    ScriptedProvider,
    ToolCall,
)

from .helpers import AUTOJUMP, assert_consistent, cancel_once_blocked, first, of

pytestmark = pytest.mark.anyio


def quick_agent(name: str = "quick") -> tether.Agent:
    return tether.Agent(name=name, provider=ScriptedProvider([Reply(text="hi")], latency_s=0.01))


@pytest.fixture
def blocker() -> Iterator[threading.Event]:
    release = threading.Event()
    yield release
    release.set()


# ---------------------------------------------------------------- cancellation


async def test_cancel_during_model_call() -> None:
    """Cancelling mid model call ends cancelled; the other run and the Runtime are unaffected."""
    before = {t.id for t in anyio.get_running_tasks()}
    slow = tether.Agent(name="slow", provider=ScriptedProvider([Reply(text="late")], latency_s=60))
    async with tether.Runtime() as rt:
        handle = rt.start(slow, "q")
        other = rt.start(quick_agent(), "q")
        await first(handle, ev.ModelCallStarted)
        handle.cancel("user pressed stop")
        result = await handle.result()
        assert (await other.result()).termination is tether.Termination.ANSWERED
        assert rt.running == 0
    assert {t.id for t in anyio.get_running_tasks()} == before, "no task outlives the Runtime"
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "user pressed stop"
    assert result.output is None
    assert result.usage.model_calls == 1
    assert_consistent(result)


async def test_cancel_during_async_tool() -> None:
    """Cancelling mid tool call cancels the tool; its call gets a cancelled result."""
    cancelled = anyio.Event()
    started = anyio.Event()

    @tether.tool
    async def wait_forever() -> str:
        """Never returns."""
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="wait_forever")])]),
        tools=[wait_forever],
    )
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        await started.wait()
        handle.cancel("stop")
        result = await handle.result()
    assert cancelled.is_set()
    assert result.termination is tether.Termination.CANCELLED
    (done,) = of(result.events, ev.ToolCallFinished)
    assert done.outcome == "cancelled"
    assert_consistent(result)


async def test_cancel_during_sync_tool_abandons_the_thread(blocker: threading.Event) -> None:
    """A sync tool's thread is abandoned on cancel and its late result discarded."""
    finished = threading.Event()
    started = threading.Event()

    @tether.tool
    def blocking() -> str:
        """Blocks its thread."""
        started.set()
        blocker.wait(10)
        finished.set()
        return "late result"

    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="blocking")]), Reply(text="x")]),
        tools=[blocking],
    )
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        await anyio.to_thread.run_sync(started.wait, 5)
        handle.cancel("stop")
        result = await handle.result()
    blocker.set()
    await anyio.to_thread.run_sync(finished.wait, 5)
    assert result.termination is tether.Termination.CANCELLED
    assert "late result" not in str(result.messages)
    assert [e.outcome for e in of(result.events, ev.ToolCallFinished)] == ["cancelled"]
    assert_consistent(result)


async def test_cancel_during_backoff() -> None:
    """Cancelling while waiting out a retry-after ends cancelled at once."""
    provider = ScriptedProvider(
        [Fault(error=RateLimited("slow", status=429, retry_after=3600)), Reply(text="x")]
    )
    provider = ScriptedProvider(provider.script, backoff=tether.providers.Backoff(cap=3600))
    agent = tether.Agent(name="a", provider=provider)
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        retry = await first(handle, ev.ProviderRetry)
        assert retry.wait_s == 3600
        with anyio.fail_after(5):
            handle.cancel("stop")
            result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    assert result.usage.provider_attempts == 1
    assert_consistent(result)


async def test_cancel_before_start_and_twice() -> None:
    """cancel() right after start, and twice, still finishes exactly once."""
    async with tether.Runtime() as rt:
        handle = rt.start(quick_agent(), "q")
        handle.cancel("first")
        handle.cancel("second")
        result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "first"
    assert len(of(result.events, ev.RunFinished)) == 1


async def test_caller_cancellation_of_run_cancels_the_run() -> None:
    """Cancelling the caller of rt.run() cancels the run, which still finishes."""
    slow = tether.Agent(name="slow", provider=ScriptedProvider([Reply(text="x")], latency_s=60))
    async with tether.Runtime() as rt:
        with anyio.CancelScope() as caller:
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_once_blocked, caller)
                await rt.run(slow, "q")
        assert caller.cancelled_caught
        (run,) = rt._runs.values()
        await run.wait_finished()
        assert run.result is not None
        assert run.result.termination is tether.Termination.CANCELLED
        assert run.result.error == "the caller of Runtime.run() was cancelled"
    assert rt.running == 0


@AUTOJUMP
async def test_runtime_exit_cancels_runs_after_grace(anyio_backend: Any) -> None:
    """Runs in flight at exit get the grace period, then end cancelled (trio: virtual time)."""
    slow = tether.Agent(name="slow", provider=ScriptedProvider([Reply(text="x")], latency_s=60))
    async with tether.Runtime(shutdown_grace_s=1) as rt:
        handles = [rt.start(slow, "q") for _ in range(5)]
        quick = rt.start(quick_agent(), "q")
        start = anyio.current_time()
    assert anyio.current_time() - start == pytest.approx(1)
    results = [h._run.result for h in handles]
    assert all(r is not None and r.termination is tether.Termination.CANCELLED for r in results)
    assert all(r is not None and r.error == "runtime shutdown" for r in results)
    quick_result = await quick.result()
    assert quick_result.termination is tether.Termination.ANSWERED
    assert quick_result.output == "hi"


async def test_runtime_exit_waits_for_runs_within_grace() -> None:
    """A run that finishes within the grace period is not cancelled."""
    async with tether.Runtime(shutdown_grace_s=5) as rt:
        handle = rt.start(quick_agent(), "q")
    assert (await handle.result()).termination is tether.Termination.ANSWERED


async def test_start_outside_runtime_is_a_clear_error() -> None:
    """Using a Runtime that is not entered raises RuntimeClosed."""
    rt = tether.Runtime()
    with pytest.raises(tether.runtime.RuntimeClosed, match="async with"):
        rt.start(quick_agent(), "q")


# ------------------------------------------------------------------ deadlines


@AUTOJUMP
async def test_deadline_on_autojump_clock(anyio_backend: Any) -> None:
    """timeout_s is enforced by the run's cancel scope, exactly, on virtual time."""
    agent = tether.Agent(
        name="slow",
        provider=ScriptedProvider([Reply(text="x")], latency_s=100),
        limits=tether.Limits(timeout_s=30),
    )
    async with tether.Runtime() as rt:
        start = anyio.current_time()
        result = await rt.run(agent, "q")
        elapsed = anyio.current_time() - start
    assert result.termination is tether.Termination.DEADLINE
    assert elapsed == pytest.approx(30)
    (hit,) = of(result.events, ev.CeilingHit)
    assert (hit.ceiling, hit.limit) == ("timeout_s", 30)
    assert hit.used == pytest.approx(30)
    assert_consistent(result)


@AUTOJUMP
async def test_deadline_short(anyio_backend: Any) -> None:
    """A sub-second timeout_s ends the run deadline at that instant (trio: virtual time)."""
    agent = tether.Agent(
        name="slow",
        provider=ScriptedProvider([Reply(text="x")], latency_s=10),
        limits=tether.Limits(timeout_s=0.05),
    )
    async with tether.Runtime() as rt:
        start = anyio.current_time()
        result = await rt.run(agent, "q")
        elapsed = anyio.current_time() - start
    assert result.termination is tether.Termination.DEADLINE
    assert elapsed == pytest.approx(0.05)


# ------------------------------------------------------------------- crashes


async def test_actor_bug_ends_only_that_run_crashed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model actor bug past the restart intensity ends that run crashed, traceback kept."""

    async def broken(self: ModelActor, call: Any) -> None:
        raise ZeroDivisionError("bug in the actor")

    victim = tether.Agent(
        name="victim",
        provider=ScriptedProvider([Reply(text="x")]),
        restart=tether.actors.RestartPolicy(max_restarts=0),
    )
    async with tether.Runtime() as rt:
        monkeypatch.setattr(ModelActor, "handle", broken)
        result = await rt.run(victim, "q")
        monkeypatch.undo()
        after = await rt.run(quick_agent(), "q")
    assert result.termination is tether.Termination.CRASHED
    assert result.error is not None
    assert "ZeroDivisionError: bug in the actor" in result.error
    (finished,) = of(result.events, ev.RunFinished)
    assert "Traceback" in (finished.error or "")
    assert [c.actor for c in of(result.events, ev.ChildCrashed)] == ["model"]
    assert after.termination is tether.Termination.ANSWERED
    assert_consistent(result)


@pytest.mark.parametrize("timeout_s", [None, 300.0])
async def test_a_bug_in_the_run_loop_ends_it_crashed(
    timeout_s: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception out of the run's own loop (its actors alive) ends it crashed, not deadline."""
    from tether.runtime import _run
    from tether.runtime._run import Run

    async def broken(run: Run, decision: Any) -> Any:
        raise ZeroDivisionError("bug in the loop")

    agent = tether.Agent(
        name="buggy",
        provider=ScriptedProvider([Reply(text="x")]),
        limits=tether.Limits(timeout_s=timeout_s),
    )
    async with tether.Runtime() as rt:
        monkeypatch.setattr(_run, "_decide", broken)  # the round boundary's decision
        result = await rt.run(agent, "q")
        monkeypatch.undo()
        after = await rt.run(quick_agent(), "q")
    assert result.termination is tether.Termination.CRASHED
    assert "ZeroDivisionError: bug in the loop" in (result.error or "")
    assert after.termination is tether.Termination.ANSWERED
    assert_consistent(result)


async def test_tool_actor_crash_fails_the_call_and_restarts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool actor crash fails the calls in flight (never replayed); a restart serves the next."""
    original = ToolActor.handle
    crashes = 0

    async def flaky(self: ToolActor, request: Any) -> None:
        nonlocal crashes
        if crashes == 0:
            crashes += 1
            raise RuntimeError("actor bug")
        await original(self, request)

    monkeypatch.setattr(ToolActor, "handle", flaky)
    ran: list[int] = []

    @tether.tool
    async def work(n: int) -> int:
        """Do work."""
        ran.append(n)
        return n

    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider(
            [
                Reply(tool_calls=[ToolCall(name="work", arguments={"n": 1})]),
                Reply(tool_calls=[ToolCall(name="work", arguments={"n": 2})]),
                Reply(text="done"),
            ]
        ),
        tools=[work],
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert result.termination is tether.Termination.ANSWERED
    assert ran == [2], "the crashed request is not replayed"
    outcomes = [e.outcome for e in of(result.events, ev.ToolCallFinished)]
    assert outcomes == ["transient_error", "ok"]
    assert [c.actor for c in of(result.events, ev.ChildCrashed)] == ["tools"]
    assert_consistent(result)


async def test_restart_intensity_exceeded_ends_crashed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the restart intensity the actor stays down and the run ends crashed."""

    async def always(self: ToolActor, request: Any) -> None:
        raise RuntimeError("actor bug")

    monkeypatch.setattr(ToolActor, "handle", always)

    @tether.tool
    async def work(n: int) -> int:
        """Do work."""
        return n

    script = [Reply(tool_calls=[ToolCall(name="work", arguments={"n": i})]) for i in range(6)]
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider(script),
        tools=[work],
        restart=tether.actors.RestartPolicy(max_restarts=2, period_s=60),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert result.termination is tether.Termination.CRASHED
    assert len(of(result.events, ev.ChildCrashed)) == 3
    assert result.error is not None
    assert "gave up" in result.error
    assert_consistent(result)


async def test_judge_that_raises_fails_closed() -> None:
    """A raising judge is a failed judgement with its error; the run ends with a reason."""

    class Broken:
        async def judge(self, candidate: tether.Candidate) -> tether.Judgement:
            raise ValueError("judge bug")

    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text="one"), Reply(text="two")]),
        judge=Broken(),
        limits=tether.Limits(max_quality_retries=1),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert result.termination is tether.Termination.QUALITY_EXHAUSTED
    judged = of(result.events, ev.Judged)
    assert all(not j.passed for j in judged)
    assert all("ValueError: judge bug" in (j.error or "") for j in judged)
    assert_consistent(result)


async def test_provider_parser_bug_is_a_message() -> None:
    """A provider raising a non-ProviderError ends provider_failed, not an unwind."""

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        raise KeyError("parser bug")

    agent = tether.Agent(name="a", provider=ScriptedProvider(script))
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert "parser bug" in result.error


# -------------------------------------------------------------------- events


async def test_events_replay_then_follow_live() -> None:
    """handle.events() replays from the start, then follows live to RunFinished."""
    agent = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="x")], latency_s=0.05))
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        await first(handle, ev.ModelCallStarted)
        late = [e async for e in handle.events()]
        result = await handle.result()
    assert late == list(result.events)


async def test_slow_reader_never_stalls_the_run_nor_misses_events() -> None:
    """A reader stalled on its first event sees every event; the run finishes without it."""
    agent = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="x")]))
    seen: list[ev.Event] = []
    run_done = anyio.Event()
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")

        async def slow_reader() -> None:
            async for event in handle.events():
                seen.append(event)
                await run_done.wait()  # stalls until the run has finished

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_reader)
            result = await handle.result()
            assert len(seen) < len(result.events), "the run finished ahead of its reader"
            run_done.set()
    assert seen == list(result.events)


async def test_max_concurrent_runs_queues() -> None:
    """With max_concurrent_runs=2 at most two runs are in flight; all finish."""
    in_flight = 0
    peak = 0

    class Counting(ScriptedProvider):
        async def stream(self, request: ModelRequest, ctx: ProviderContext) -> Any:  # type: ignore[override]
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                await anyio.wait_all_tasks_blocked()  # every run that may start has started
                async with contextlib.aclosing(super().stream(request, ctx)) as inner:
                    async for item in inner:
                        yield item
            finally:
                in_flight -= 1

    agent = tether.Agent(name="a", provider=Counting([Reply(text="x")]))
    async with tether.Runtime(max_concurrent_runs=2) as rt:
        handles = [rt.start(agent, "q") for _ in range(6)]
        results = [await h.result() for h in handles]
    assert peak == 2
    assert all(r.termination is tether.Termination.ANSWERED for r in results)


async def test_many_concurrent_runs_have_their_own_script_position() -> None:
    """Concurrent runs sharing one ScriptedProvider each play the script from the start."""
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="echo", arguments={"x": 1})]), Reply(text="done")],
            latency_s=0.001,
        ),
        tools=[echo],
    )
    async with tether.Runtime() as rt:
        handles = [rt.start(agent, f"q{i}") for i in range(200)]
        results = [await h.result() for h in handles]
    assert {r.termination for r in results} == {tether.Termination.ANSWERED}
    assert len({r.run_id for r in results}) == 200


@tether.tool
async def echo(x: int) -> int:
    """Echo x."""
    return x


async def test_cancelling_a_queued_run_finishes_it_at_once() -> None:
    """A run waiting for a max_concurrent_runs slot ends cancelled without ever starting."""
    slow = tether.Agent(name="slow", provider=ScriptedProvider([Reply(text="x")], latency_s=60))
    async with tether.Runtime(max_concurrent_runs=1) as rt:
        one, two = rt.start(slow, "one"), rt.start(slow, "two")
        # Which of the two gets the slot is the scheduler's choice (trio shuffles).
        started: list[tether.RunHandle] = []

        async def watch(handle: tether.RunHandle) -> None:
            await first(handle, ev.ModelCallStarted)
            started.append(handle)
            tg.cancel_scope.cancel()

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch, one)
                tg.start_soon(watch, two)
        running, queued = (one, two) if started == [one] else (two, one)
        queued.cancel("not needed")
        with anyio.fail_after(5):
            result = await queued.result()
        running.cancel("done")
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "not needed"
    # Assembly (the finalize stage) brackets every run, also one that never started.
    assert [type(e).__name__ for e in result.events] == [
        "StageEntered",
        "StageExited",
        "RunFinished",
    ]
    assert result.usage.model_calls == 0


async def test_a_finished_run_leaves_no_cyclic_garbage() -> None:
    """Runs with tool rounds free themselves by reference counting: the GC has nothing to do."""

    @tether.tool
    async def double(x: int) -> int:
        """Double x."""
        return 2 * x

    script = [Reply(tool_calls=[ToolCall(name="double", arguments={"x": 2})]), Reply(text="4")]
    agent = tether.Agent(name="tidy", provider=ScriptedProvider(script), tools=[double])
    async with tether.Runtime() as rt:
        await rt.run(agent, "q")  # warm: first-use caches are not garbage
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                result = await rt.run(agent, "q")
            garbage = gc.collect()
        finally:
            gc.enable()
    assert result.termination is tether.Termination.ANSWERED
    assert garbage == 0
