"""Per-run deps: RunContext in tools, policies and judges; contextvars reaching tools."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import attrs
import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall

from .helpers import assert_consistent, of

pytestmark = pytest.mark.anyio


@attrs.frozen
class Deps:
    user: str
    seen: list[Any] = attrs.field(factory=list, eq=False)


def tools_then_text(*calls: ToolCall, text: str = "done") -> ScriptedProvider:
    return ScriptedProvider([Reply(tool_calls=list(calls)), Reply(text=text)])


@tether.tool
async def whoami(ctx: tether.RunContext[Deps], greeting: str) -> str:
    """Greet the run's user."""
    ctx.deps.seen.append(ctx)
    return f"{greeting}, {ctx.deps.user}"


@tether.tool
def whoami_sync(ctx: tether.RunContext[Deps], n: int = 1) -> str:
    """Greet the run's user from a worker thread."""
    ctx.deps.seen.append((ctx, threading.current_thread().name))
    return ctx.deps.user * n


def test_the_context_parameter_stays_out_of_the_schema() -> None:
    """A first parameter annotated RunContext[...] is neither in the schema nor validated."""
    assert whoami.context_parameter == "ctx"
    assert whoami.input_schema == {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
        "additionalProperties": False,
    }
    assert whoami.validate({"greeting": "hi"}) == {"greeting": "hi"}
    assert list(whoami_sync.input_schema["properties"]) == ["n"]

    @tether.tool
    def bare(ctx: tether.RunContext, x: int) -> int:  # type: ignore[type-arg]
        """Unparameterized RunContext works too."""
        return x

    assert bare.context_parameter == "ctx"
    assert bare.validate({"x": 1}) == {"x": 1}


def test_a_context_parameter_must_come_first() -> None:
    """A RunContext anywhere but first (or positional-only) is refused at decoration."""

    def late(x: int, ctx: tether.RunContext[Deps]) -> int:
        return x

    def positional(ctx: tether.RunContext[Deps], /, x: int) -> int:
        return x

    with pytest.raises(TypeError, match="must be the first parameter"):
        tether.tool(late)
    with pytest.raises(TypeError, match="must not be positional-only"):
        tether.tool(positional)


async def test_tools_receive_the_runs_deps_and_call() -> None:
    """Async and sync tools get ctx with the run's deps, run_id, call_id and budget left."""
    deps = Deps(user="ada")
    agent = tether.Agent(
        name="deps",
        provider=tools_then_text(
            ToolCall(name="whoami", arguments={"greeting": "hi"}, id="c1"),
            ToolCall(name="whoami_sync", arguments={"n": 2}, id="c2"),
        ),
        tools=[whoami, whoami_sync],
        limits=tether.Limits(max_total_tokens=5_000),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "who am I?", deps=deps)
    assert_consistent(result)
    done = {e.call_id: e for e in of(result.events, ev.ToolCallFinished)}
    assert (done["c1"].outcome, done["c1"].content) == ("ok", "hi, ada")
    assert (done["c2"].outcome, done["c2"].content) == ("ok", "adaada")
    async_ctx = next(s for s in deps.seen if isinstance(s, tether.RunContext))
    sync_ctx, thread = next(s for s in deps.seen if isinstance(s, tuple))
    assert thread == "tether-tool"
    for ctx, call_id in ((async_ctx, "c1"), (sync_ctx, "c2")):
        assert ctx.deps is deps
        assert (ctx.run_id, ctx.call_id) == (result.run_id, call_id)
        assert ctx.remaining_tokens is not None
        assert 0 < ctx.remaining_tokens <= 5_000
        assert ctx.run_child is not None
    assert tether.actors.ToolContext is tether.RunContext  # one class, two names


async def test_without_deps_the_context_carries_none() -> None:
    """A run started without deps gives its tools ctx.deps None."""
    seen: list[Any] = []

    @tether.tool
    async def peek(ctx: tether.RunContext[None]) -> str:
        """Look."""
        seen.append(ctx.deps)
        return "ok"

    agent = tether.Agent(name="a", provider=tools_then_text(ToolCall(name="peek")), tools=[peek])
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert result.termination == "answered"
    assert seen == [None]


async def test_policies_with_a_third_parameter_read_the_context() -> None:
    """A policy taking (point, subject, ctx) sees ctx.deps, and the call id at tool_call."""
    seen: list[tuple[str, str, str]] = []

    def by_user(point: tether.PolicyPoint, subject: Any, ctx: tether.RunContext[Deps]) -> Any:
        seen.append((point.value, ctx.deps.user, ctx.call_id))
        if point == "tool_call" and ctx.deps.user != "root":
            return tether.Verdict.deny(f"{ctx.deps.user} may not")
        return None

    class Legacy:
        """The two-argument form still works beside it."""

        async def check(self, point: tether.PolicyPoint, subject: Any) -> None:
            seen.append((point.value, "-", "-"))

    agent = tether.Agent(
        name="a",
        provider=tools_then_text(ToolCall(name="whoami", arguments={"greeting": "hi"}, id="c7")),
        tools=[whoami],
        policies=[Legacy(), by_user],
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q", deps=Deps(user="eve"))
    assert result.termination == "answered"
    (done,) = of(result.events, ev.ToolCallFinished)
    assert (done.outcome, done.content) == ("denied", "denied by policy: eve may not")
    assert ("tool_call", "eve", "c7") in seen
    assert ("input", "eve", "") in seen
    assert ("input", "-", "-") in seen


async def test_judges_read_the_context_from_the_candidate() -> None:
    """A judge (and a RuleJudge criterion) sees the run's deps as candidate.ctx.deps."""
    seen: list[Any] = []

    def addressed(candidate: tether.Candidate) -> tuple[bool, str]:
        assert candidate.ctx is not None
        seen.append(candidate.ctx)
        return candidate.ctx.deps.user in candidate.text, "address the user by name"

    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text="hello"), Reply(text="hello, ada")]),
        judge=tether.RuleJudge({"addressed": addressed}),
    )
    deps = Deps(user="ada")
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q", deps=deps)
    assert result.termination == "answered"
    assert result.usage.quality_retries == 1
    assert [ctx.deps for ctx in seen] == [deps, deps]
    assert {ctx.run_id for ctx in seen} == {result.run_id}


async def test_a_sub_agent_inherits_the_callers_deps() -> None:
    """A child run (agent.as_tool()) carries its parent's deps to its own tools."""
    child = tether.Agent(
        name="child",
        provider=tools_then_text(ToolCall(name="whoami", arguments={"greeting": "yo"})),
        tools=[whoami],
    )
    parent = tether.Agent(
        name="parent",
        provider=tools_then_text(ToolCall(name="child", arguments={"task": "greet"})),
        tools=[child.as_tool()],
    )
    deps = Deps(user="bob")
    async with tether.Runtime() as rt:
        result = await rt.run(parent, "q", deps=deps)
    assert result.termination == "answered"
    (ctx,) = deps.seen
    assert ctx.deps is deps
    assert ctx.run_id != result.run_id


REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


async def test_the_callers_contextvars_reach_async_and_sync_tools() -> None:
    """A contextvar the caller set before rt.start is seen by tools, in threads too."""
    seen: list[str] = []

    @tether.tool
    async def read_async() -> str:
        """Read the request id."""
        seen.append(REQUEST_ID.get())
        return "ok"

    @tether.tool
    def read_sync() -> str:
        """Read the request id in a worker thread."""
        seen.append(REQUEST_ID.get())
        return "ok"

    agent = tether.Agent(
        name="a",
        provider=tools_then_text(ToolCall(name="read_async"), ToolCall(name="read_sync")),
        tools=[read_async, read_sync],
    )
    async with tether.Runtime() as rt:
        token = REQUEST_ID.set("req-1")
        try:
            handle = rt.start(agent, "q")
        finally:
            REQUEST_ID.reset(token)
        result = await handle.result()
        # A run started without it set sees the default, not the other run's value.
        again = await rt.run(
            tether.Agent(
                name="b", provider=tools_then_text(ToolCall(name="read_sync")), tools=[read_sync]
            ),
            "q",
        )
    assert result.termination == again.termination == "answered"
    assert seen == ["req-1", "req-1", "unset"]
