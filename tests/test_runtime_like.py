"""One behaviour suite for every runtime of the ``tether.RuntimeLike`` interface.

Each test runs against ``tether.Runtime`` and ``tether.ray.RayRuntime`` (one
host, on the session's local Ray cluster), from asyncio and trio callers, and
asserts through events and results only. The Ray half is marked ``ray`` (the
slow tier: ``pytest -m "not ray"`` leaves it out).

A host process takes seconds to start, so the Ray half shares one entered
RayRuntime per backend over the module (``anyio_backend`` is module-scoped
here for that); each test uses its own run ids. A plain Runtime is made per test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both backends, as everywhere; module-scoped so one RayRuntime serves the module."""
    return str(request.param)


@pytest.fixture(scope="module")
async def ray_runtime(ray_cluster: None, anyio_backend: str) -> AsyncIterator[tether.RuntimeLike]:
    """One RayRuntime with one host, entered for the module's tests on one backend."""
    from tether.ray import RayRuntime

    async with RayRuntime(hosts=1) as rt:
        yield rt


@pytest.fixture(params=["runtime", pytest.param("ray", marks=[pytest.mark.ray, pytest.mark.slow])])
def shared(request: pytest.FixtureRequest) -> tether.RuntimeLike | None:
    """The RayRuntime for the Ray half; ``None``: a Runtime made per test."""
    if request.param == "ray":
        found: tether.RuntimeLike = request.getfixturevalue("ray_runtime")
        return found
    return None


@pytest.fixture
async def rt(shared: tether.RuntimeLike | None) -> AsyncIterator[tether.RuntimeLike]:
    """The runtime under test, entered."""
    if shared is not None:
        yield shared
        return
    async with tether.Runtime() as runtime:
        yield runtime


# Module-level agents, tools and policies: a RayRuntime ships them to its hosts.


@tether.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tether.tool
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def ask_for_emails(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    if point == "tool_call":
        return tether.Verdict.ask("emails need a human")
    return None


@tether.tool
def whose(ctx: tether.RunContext[str]) -> str:
    """Whose run this is (the run's deps)."""
    return f"the run of {ctx.deps}"


def ask_whose(request: Any, ctx: Any) -> Reply:
    if ctx.call_index == 0:
        return Reply(tool_calls=[ToolCall(name="whose", id="w1")])
    return Reply(text=request.messages[-1].content[0].content)


def add_then_answer(request: Any, ctx: Any) -> Reply:
    """Per run (the script follows ``call_index``): a tool round, then the answer."""
    if ctx.call_index == 0:
        return Reply(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3}, id="c1")])
    return Reply(text="The sum is 5.")


def mail_then_answer(request: Any, ctx: Any) -> Reply:
    if ctx.call_index == 0:
        return Reply(tool_calls=[ToolCall(name="send_email", arguments={"to": "bob"}, id="c1")])
    return Reply(text="done")


def add_forever(request: Any, ctx: Any) -> Reply:
    """Tool rounds without end (the step ceiling ends the run)."""
    return Reply(tool_calls=[ToolCall(name="add", arguments={"a": ctx.call_index, "b": 1})])


# One object per agent name: a RayRuntime finds agents by name.
ADDER = tether.Agent(name="adder", provider=ScriptedProvider(add_then_answer), tools=[add])
#: A tool call that its policy holds for approval, then the answer.
MAILER = tether.Agent(
    name="mailer",
    provider=ScriptedProvider(mail_then_answer),
    tools=[send_email],
    policies=[ask_for_emails],
)
#: Answers with what its tool read from the run's deps.
OWNED = tether.Agent[str](name="owned", provider=ScriptedProvider(ask_whose), tools=[whose])
#: Each model call takes a minute: a run to cancel while it waits.
STUCK = tether.Agent(
    name="stuck", provider=ScriptedProvider(add_forever, latency_s=60.0), tools=[add]
)
#: Each model call takes a second: a run to stop between rounds (a stop that took
#: longer than its ten steps, 10 s, to arrive would fail the test on a slow machine).
WALKER = tether.Agent(
    name="walker", provider=ScriptedProvider(add_forever, latency_s=1.0), tools=[add]
)


async def first(handle: tether.RunHandleLike[Any], cls: type[Any]) -> Any:
    """Follow a run's events until one of ``cls`` arrives."""
    async for event in handle.events():
        if isinstance(event, cls):
            return event
    raise AssertionError(f"the run finished without a {cls.__name__}")


def _whole(events: Any) -> None:
    """One RunStarted first, one RunFinished last, seqs without a gap."""
    assert isinstance(events[0], ev.RunStarted)
    assert isinstance(events[-1], ev.RunFinished)
    assert [e.seq for e in events] == list(range(len(events)))
    assert sum(isinstance(e, ev.RunFinished) for e in events) == 1


# ---------------------------------------------------------------------- runs


async def test_run_answers_with_a_whole_trail(rt: tether.RuntimeLike) -> None:
    """run() returns the answer, its usage and a whole trail; the run id is the one given."""
    result = await rt.run(ADDER, "2 + 3?", run_id="sum-1")
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    assert result.run_id == "sum-1"
    assert result.summary() == "Model → Tools(1) → Model → answered"
    assert (result.usage.steps, result.usage.tool_calls, result.usage.model_calls) == (2, 1, 2)
    _whole(result.events)


async def test_a_handle_streams_events_text_and_deltas(rt: tether.RuntimeLike) -> None:
    """start() returns at once; events(), events(deltas=True) and stream_text() opened
    right after it see the whole run, and agree with the result."""
    handle = rt.start(ADDER, "2 + 3?")
    events = handle.events()
    live = handle.events(deltas=True)
    text = handle.stream_text()
    kept = [e async for e in events]
    with_deltas = [e async for e in live]
    chunks = [c async for c in text]
    result = await handle.result()
    assert handle.done
    assert [ev.dump(e) for e in kept] == [ev.dump(e) for e in result.events]
    assert [e for e in with_deltas if not isinstance(e, ev.TextDelta | ev.ToolCallDelta)] == kept
    assert "".join(d.text for d in with_deltas if isinstance(d, ev.TextDelta)) == result.output
    assert "".join(chunks) == result.output


async def test_history_and_deps_reach_the_run(rt: tether.RuntimeLike) -> None:
    """A run continues the history it is given, and its tools read the deps it is given."""
    first = await rt.run(ADDER, "2 + 3?")
    again = await rt.run(ADDER, "and again?", history=first.messages)
    assert again.messages[: len(first.messages)] == first.messages
    assert "and again?" in [m.text for m in again.messages[len(first.messages) :]]
    owned = await rt.run(OWNED, "whose?", deps="ada")
    assert owned.output == "the run of ada"


async def test_handle_by_id_is_the_same_run(rt: tether.RuntimeLike) -> None:
    """rt.handle(run_id) of a started run gives its result and its events."""
    started = rt.start(ADDER, "2 + 3?", run_id="by-id")
    again = rt.handle("by-id")
    assert again.run_id == "by-id"
    result = await again.result()
    assert (await started.result()).output == result.output == "The sum is 5."
    _whole([e async for e in again.events()])


async def test_an_unknown_run_id_is_a_key_error(rt: tether.RuntimeLike) -> None:
    """A run id nobody started is a KeyError, for its handle and for an approval."""
    with pytest.raises(KeyError):
        await rt.handle("no-such-run").result()
    with pytest.raises(KeyError):
        await rt.pending_approvals("no-such-run")
    with pytest.raises(KeyError):
        await rt.approve("no-such-run", "c1")


# ---------------------------------------------------------------------- control


async def test_cancel_ends_the_run_cancelled(rt: tether.RuntimeLike) -> None:
    """cancel() during a model call ends the run cancelled, with the reason, once."""
    handle = rt.start(STUCK, "q")
    await first(handle, ev.ModelCallStarted)
    handle.cancel("user pressed stop")
    result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "user pressed stop"
    _whole(result.events)


async def test_stop_ends_the_run_after_its_round(rt: tether.RuntimeLike) -> None:
    """stop() lets the round in flight finish, then the run ends cancelled, "stopped"."""
    handle = rt.start(WALKER, "q")
    await first(handle, ev.ToolCallStarted)
    handle.stop()
    result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "stopped"
    # Every round begun was finished: each model call's tool calls ran.
    assert result.usage.tool_calls == result.usage.model_calls
    _whole(result.events)


async def test_run_cancelled_by_its_caller_ends_cancelled(rt: tether.RuntimeLike) -> None:
    """Cancelling the caller of run() cancels the run; its handle reads the ending."""
    with anyio.move_on_after(0):  # cancelled at its first checkpoint
        await rt.run(STUCK, "q", run_id="abandoned")
    result = await rt.handle("abandoned").result()
    assert result.termination is tether.Termination.CANCELLED


# ---------------------------------------------------------------------- approvals


@pytest.mark.parametrize("approve", [True, False])
async def test_approve_or_reject_through_the_handle(rt: tether.RuntimeLike, approve: bool) -> None:
    """A held call is listed by pending_approvals(); approve runs it, reject gives the
    model an error result with the reason; the run then answers."""
    handle = rt.start(MAILER, "mail bob")
    requested = await first(handle, ev.ApprovalRequested)
    assert (requested.call_id, requested.reason) == ("c1", "emails need a human")
    pending = await handle.pending_approvals()
    assert [(p.call_id, p.name, p.arguments) for p in pending] == [
        ("c1", "send_email", {"to": "bob"})
    ]
    assert await rt.pending_approvals(handle.run_id) == pending
    if approve:
        handle.approve("c1")
    else:
        handle.reject("c1", "not today")
    result = await handle.result()
    assert await handle.pending_approvals() == []
    assert result.termination is tether.Termination.ANSWERED
    (answered,) = [e for e in result.events if isinstance(e, ev.ApprovalAnswered)]
    assert answered.approved is approve
    (finished,) = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    assert finished.outcome == ("ok" if approve else "denied")


async def test_approve_through_the_runtime(rt: tether.RuntimeLike) -> None:
    """rt.approve(run_id, call_id) answers a held call of a run in flight."""
    handle = rt.start(MAILER, "mail bob")
    await first(handle, ev.ApprovalRequested)
    await rt.approve(handle.run_id, "c1")
    result = await handle.result()
    assert result.termination is tether.Termination.ANSWERED
    assert [e.outcome for e in result.events if isinstance(e, ev.ToolCallFinished)] == ["ok"]


# ---------------------------------------------------------------------- start-time checks


async def test_bad_start_arguments_fail_alike(rt: tether.RuntimeLike) -> None:
    """Both runtimes refuse bad arguments at start(), with the same errors (check_start)."""
    agent = ADDER
    with pytest.raises(TypeError, match="wants a tether"):
        rt.start("adder", "q")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a run's input must be a str"):
        rt.start(agent, 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no content"):
        rt.start(agent, [""])
    with pytest.raises(ValueError, match="needs a conversation store"):
        rt.start(agent, "q", conversation="c")
    with pytest.raises(ValueError, match="tool_choice"):
        rt.start(agent, "q", settings=tether.ModelSettings(tool_choice="no_such_tool"))


async def test_start_outside_the_block_is_refused(rt: tether.RuntimeLike) -> None:
    """start() on a runtime not entered raises RuntimeClosed."""
    with pytest.raises(tether.runtime.RuntimeClosed):
        type(rt)().start(ADDER, "q")
