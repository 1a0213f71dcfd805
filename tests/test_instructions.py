"""Dynamic instructions: ``Agent(instructions=fn)``, called once per run with its RunContext,
recorded in ``RunStarted`` and in a durable run's checkpoint; a faulty function is blamed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest

import tether
from tether import events as ev
from tether.providers import (
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)

from .helpers import assert_consistent, of

pytestmark = pytest.mark.anyio


@attrs.define
class User:
    name: str


class Calls:
    """How many times an instructions function ran, and with what."""

    def __init__(self) -> None:
        self.seen: list[tether.RunContext[Any]] = []

    def sync(self, ctx: tether.RunContext[User]) -> str:
        self.seen.append(ctx)
        return f"You help {ctx.deps.name} (call {len(self.seen)})."

    async def async_(self, ctx: tether.RunContext[User]) -> str:
        await anyio.lowlevel.checkpoint()
        self.seen.append(ctx)
        return f"You help {ctx.deps.name} (call {len(self.seen)})."


def scripted(*replies: Reply) -> ScriptedProvider:
    return ScriptedProvider(list(replies) or [Reply(text="ok")], record=True)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_function_gives_each_run_its_system_prompt(kind: str) -> None:
    """Called once per run with its deps; the text is sent as the system prompt and recorded."""
    calls = Calls()
    function = calls.sync if kind == "sync" else calls.async_
    provider = scripted(Reply(text="one"), Reply(text="two"))
    agent = tether.Agent(name="helper", provider=provider, instructions=function)
    async with tether.Runtime() as rt:
        first = await rt.run(agent, "hi", deps=User("Ada"))
        second = await rt.run(agent, "hi", deps=User("Bob"))
    for result in (first, second):
        assert_consistent(result)
        assert result.termination is tether.Termination.ANSWERED
    assert [ctx.run_id for ctx in calls.seen] == [first.run_id, second.run_id]
    systems = [request.system for _ctx, request in provider.requests]
    assert systems == ["You help Ada (call 1).", "You help Bob (call 2)."]
    assert of(first.events, ev.RunStarted)[0].instructions == "You help Ada (call 1)."
    assert of(second.events, ev.RunStarted)[0].instructions == "You help Bob (call 2)."


async def test_a_static_string_is_sent_and_not_recorded_again() -> None:
    """A str is the system prompt as before; RunStarted.instructions stays None."""
    provider = scripted()
    async with tether.Runtime() as rt:
        result = await rt.run(
            tether.Agent(name="a", provider=provider, instructions="Be kind."), "q"
        )
    assert provider.requests[0][1].system == "Be kind."
    assert of(result.events, ev.RunStarted)[0].instructions is None


async def test_lessons_recalled_at_the_memory_stage_extend_the_function_text() -> None:
    """The memory stage adds recalled lessons to the function's text, as to a static one."""
    memory = tether.InMemoryLessonStore()
    await memory.add(scope="a", question="q", feedback="Cite sources.")
    provider = scripted()
    agent = tether.Agent(
        name="a", provider=provider, memory=memory, instructions=lambda ctx: "Dynamic."
    )
    async with tether.Runtime() as rt:
        await rt.run(agent, "q")
    system = provider.requests[0][1].system
    assert system.startswith("Dynamic.")
    assert "Cite sources." in system


def test_a_wrong_instructions_type_is_a_type_error_when_the_agent_is_made() -> None:
    """Neither str nor callable, or a callable that cannot take the context: TypeError now."""
    provider = scripted()
    with pytest.raises(TypeError, match=r"must be a str or a function .* got int"):
        tether.Agent(name="a", provider=provider, instructions=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be a str or a function .* got list"):
        tether.Agent(name="a", provider=provider, instructions=["a"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must take one argument"):
        tether.Agent(name="a", provider=provider, instructions=lambda: "x")  # type: ignore[arg-type]


def _boom(ctx: tether.RunContext[Any]) -> str:
    raise KeyError("user")


async def _not_text(ctx: tether.RunContext[Any]) -> str:
    return 42  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("function", "words"),
    [(_boom, "raised KeyError: 'user'"), (_not_text, "returned int, not a str")],
    ids=["raises", "not-a-str"],
)
async def test_a_faulty_function_is_blamed_not_the_provider(function: Any, words: str) -> None:
    """The run ends crashed naming the user's function; no model call is made."""
    provider = scripted()
    agent = tether.Agent(name="a", provider=provider, instructions=function)
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert_consistent(result)
    assert result.termination is tether.Termination.CRASHED
    assert result.error is not None
    assert result.error.startswith("Agent.instructions: the function")
    assert function.__name__ in result.error
    assert words in result.error
    assert "ProviderBug" not in result.error
    assert provider.requests == []
    assert not of(result.events, ev.ModelCallStarted)
    assert [e.stage for e in of(result.events, ev.StageEntered)] == ["finalize"]
    assert of(result.events, ev.RunStarted)[0].instructions is None


async def test_cancelled_inside_the_function_the_run_ends_cancelled_with_nothing_left() -> None:
    """A cancel while an async function waits: cancelled, its trail complete, no task left."""
    entered = anyio.Event()

    async def slow(ctx: tether.RunContext[Any]) -> str:
        entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    provider = scripted()
    async with tether.Runtime() as rt:
        handle = rt.start(tether.Agent(name="a", provider=provider, instructions=slow), "q")
        await entered.wait()
        handle.cancel("user pressed stop")
        result = await handle.result()
        await anyio.wait_all_tasks_blocked()
        assert rt.running == 0
    assert_consistent(result)
    assert result.termination is tether.Termination.CANCELLED
    assert [e.stage for e in of(result.events, ev.StageEntered)] == ["finalize"]
    assert provider.requests == []


async def test_a_deadline_passing_inside_the_function_ends_the_run_deadline() -> None:
    """timeout_s bounds the function too (the run's clock starts before it is called)."""

    async def slow(ctx: tether.RunContext[Any]) -> str:
        await anyio.sleep(60)
        return "late"

    agent = tether.Agent(
        name="a",
        provider=scripted(),
        instructions=slow,
        limits=tether.Limits(timeout_s=0.05),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert_consistent(result)
    assert result.termination is tether.Termination.DEADLINE


def test_run_started_with_instructions_round_trips_and_old_json_still_loads() -> None:
    """The new field dumps and loads; an event written before it existed loads as None."""
    event = ev.RunStarted(
        run_id="r", seq=0, round=0, at=1.0, agent="a", input="q", instructions="You help Ada."
    )
    data = ev.dump(event)
    assert ev.load(json.loads(json.dumps(data))) == event
    del data["instructions"]
    assert ev.load(data).instructions is None


# -------------------------------------------------------------------- durable runs


def bump_once(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """One tool call (held for approval), then an answer quoting the system prompt."""
    if not any(isinstance(b, ToolResultBlock) for m in request.messages for b in m.content):
        return Reply(tool_calls=[ToolCall(name="bump", arguments={}, id="b1")])
    return Reply(text=f"done under: {request.system}")


@tether.tool
async def bump() -> str:
    """Bump."""
    return "bumped"


class AskForBumps:
    async def check(self, point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        if point is tether.PolicyPoint.TOOL_CALL:
            return tether.Verdict.ask("a person decides")
        return None


async def test_a_resumed_durable_run_does_not_call_the_function_again(tmp_path: Path) -> None:
    """Parked in one Runtime, resumed in another: the checkpoint's text is used, no new call."""
    calls = Calls()

    def agent() -> tether.Agent:
        return tether.Agent(
            name="durable",
            provider=ScriptedProvider(bump_once),
            instructions=calls.sync,
            tools=[bump],
            policies=[AskForBumps()],
        )

    path = tmp_path / "runs.db"
    async with tether.Runtime(store=tether.SQLiteRunStore(path)) as rt:
        handle = rt.start(agent(), "q", deps=User("Ada"))
        with anyio.fail_after(20):
            while True:
                if await rt.pending_approvals(handle.run_id):
                    break
                await anyio.sleep(0.01)
    assert len(calls.seen) == 1
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[agent()]) as rt2:
        await rt2.approve(handle.run_id, "b1")
        result = await rt2.handle(handle.run_id).result()
    assert result.termination is tether.Termination.ANSWERED
    assert len(calls.seen) == 1  # not called again on resume
    assert result.output == "done under: You help Ada (call 1)."
    [started] = of(result.events, ev.RunStarted)
    assert started.instructions == "You help Ada (call 1)."
