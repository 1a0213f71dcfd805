"""Uses of the public API that must type-check under ``mypy --strict`` (see .ci/typecheck.sh).

Not collected by pytest (no ``test_`` prefix); it is only type-checked.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal, assert_type

import attrs
import pydantic

import tether
from tether import events
from tether.providers import (
    AnthropicProvider,
    Backoff,
    FallbackProvider,
    OpenAIProvider,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolUseBlock,
)


@tether.tool
async def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tether.tool(terminal=True, timeout_s=5, sequential=True)
def send(to: str) -> str:
    """Send."""
    return to


def policy(point: tether.PolicyPoint, subject: object) -> tether.Verdict | None:
    if point == tether.PolicyPoint.TOOL_CALL and isinstance(subject, ToolUseBlock):
        return tether.Verdict.ask(f"{subject.name}({subject.arguments})")
    return None


def build() -> tether.Agent:
    judge: tether.Judge = tether.RuleJudge({"ok": lambda c: (c.text != "", "empty")})
    return tether.Agent(
        name="typed",
        instructions="...",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="add")]), Reply(text="3")]),
        tools=[add, send],
        judge=judge,
        policies=[policy],
        memory=tether.InMemoryLessonStore(),
        limits=tether.Limits(max_steps=3, max_total_tokens=1000, max_cost_usd=0.1, timeout_s=5),
    )


def providers() -> list[tether.providers.Provider]:
    claude = AnthropicProvider("claude-sonnet-4-5", api_key="k", cache="auto")
    gpt = OpenAIProvider("gpt-4.1-mini", base_url="http://127.0.0.1:1/v1")
    return [
        AnthropicProvider("claude-sonnet-4-5", api_key="k", backoff=Backoff(initial=1.0)),
        gpt,
        FallbackProvider([claude, gpt]),
    ]


def fallback_agent() -> tether.Agent:
    chain = FallbackProvider([AnthropicProvider("claude-sonnet-4-5"), OpenAIProvider("gpt-4.1")])
    return tether.Agent(name="resilient", provider=chain)


def cache_counts(usage: tether.Usage, event: events.ProviderFallback) -> tuple[int, int, str]:
    return usage.cache_read_tokens, usage.cache_write_tokens, event.to_model


async def use(agent: tether.Agent) -> None:
    async with tether.Runtime(max_concurrent_runs=10, event_sink=print) as rt:
        result: tether.RunResult = await rt.run(agent, "q")
        termination: tether.Termination = result.termination
        ok: bool = termination.ok
        usage: tether.Usage = result.usage
        cost: float | None = usage.cost_usd
        line: str = result.summary()
        boss = tether.Agent(name="boss", provider=agent.provider, tools=[agent.as_tool()])
        handle: tether.RunHandle = rt.start(boss, "q")
        async for event in handle.events():
            data = events.dump(event)
            again: events.Event = events.load(data)
            if isinstance(again, events.ApprovalRequested):
                handle.approve(again.call_id)
        streamed = rt.start(agent, "q")
        text = streamed.stream_text()
        async for live in streamed.events(deltas=True):
            if isinstance(live, events.TextDelta):
                piece: str = live.text
                index: int = live.call_index
                del piece, index
            elif isinstance(live, events.ToolCallDelta):
                arguments: str = live.arguments_delta
                del arguments
            elif isinstance(live, events.ReasoningDelta):
                thought: str = live.text
                del thought
        chunks: list[str] = [chunk async for chunk in text]
        handle.cancel("done")
        handle.stop()
        photo = tether.Image.from_bytes(b"\x89PNG\r\n\x1a\n", "image/png")
        looked = await rt.run(agent, ["What is this?", photo, tether.Image.from_url("https://x/y")])
        transcript: list[tether.Message] = tether.load_messages(
            tether.dump_messages(looked.messages)
        )
        del ok, cost, line, transcript, chunks
        for block in looked.messages[-1].content:
            if isinstance(block, tether.Reasoning):
                signature: str | None = block.signature
                redacted: bool = block.redacted
                del signature, redacted
        history: tuple[tether.Message, ...] = result.messages
        await rt.run(agent, "and then?", history=history)
        await rt.run(agent, "and then?", history=[tether.Message.user("hi")])
    store: tether.ConversationStore = tether.SQLiteConversationStore("chats.db")
    async with tether.Runtime(conversations=store) as rt:
        chat: tether.RunResult = await rt.run(agent, "hello", conversation="user-42")
        rt.start(agent, "again", conversation="user-42")
        del chat
    result = tether.run_sync(agent, "q")
    assert isinstance(result.output, str | None)


# ---------------------------- settings and deps (docs/guides/settings-and-deps.md)


@attrs.frozen
class Db:
    url: str


@tether.tool
async def lookup(ctx: tether.RunContext[Db], key: str) -> str:
    """Look a key up in the run's database."""
    return ctx.deps.url + key


@tether.tool(sequential=True)
def bump(ctx: tether.RunContext[int]) -> int:
    """Wants int deps."""
    return ctx.deps + 1


def deps_policy(
    point: tether.PolicyPoint, subject: object, ctx: tether.RunContext[Db]
) -> tether.Verdict | None:
    return tether.Verdict.deny(ctx.deps.url) if point == "tool_call" else None


async def use_deps(provider: tether.providers.Provider) -> None:
    settings = tether.ModelSettings(temperature=0.2, stop_sequences=["END"], tool_choice="auto")
    thinking = tether.ModelSettings(reasoning_effort="high", thinking_budget=2048)
    del thinking
    agent: tether.Agent[Db] = tether.Agent(
        name="db",
        provider=provider,
        tools=[lookup, add],
        policies=[deps_policy],
        settings=settings,
    )
    # A tool that expects other deps than the agent's runs carry is a type error.
    wrong: tether.Agent[Db] = tether.Agent(name="wrong", provider=provider, tools=[bump])  # type: ignore[list-item]
    async with tether.Runtime() as rt:
        result: tether.RunResult = await rt.run(
            agent, "q", deps=Db("sqlite://"), settings=tether.ModelSettings(seed=7)
        )
        handle: tether.RunHandle = rt.start(agent, "q", deps=Db("sqlite://"))
        # Deps of the wrong type for the agent are a type error too.
        rt.start(agent, "q", deps=42)  # type: ignore[misc]
        await handle.result()
    del result, wrong


def greeting(ctx: tether.RunContext[Db]) -> str:
    return f"You serve {ctx.deps.url}."


async def async_greeting(ctx: tether.RunContext[Db]) -> str:
    return f"You serve {ctx.deps.url}."


def model_strings_and_instructions() -> list[tether.Agent[Db]]:
    """A model string is a provider; instructions may be a function of the run's context."""
    made: tether.providers.Provider = tether.providers.infer_provider("openai:gpt-4.1-mini")
    version: str = tether.__version__
    del made, version
    return [
        tether.Agent(name="s", provider="anthropic:claude-sonnet-4-5", instructions=greeting),
        tether.Agent(name="a", provider="scripted:hi", instructions=async_greeting),
        tether.Agent(name="l", provider="openai:gpt-4.1", instructions=lambda ctx: ctx.deps.url),
        tether.Agent(name="t", provider="scripted:hi", instructions="static", tools=[lookup]),
    ]


def wrong_instructions() -> None:
    tether.Agent(name="n", provider="scripted:x", instructions=42)  # type: ignore[arg-type]
    # A function of other deps than the agent's runs carry is a type error.
    agent: tether.Agent[int] = tether.Agent(name="d", provider="scripted:x", instructions=greeting)  # type: ignore[arg-type]
    del agent


@attrs.frozen
class Trip:
    city: str
    days: int


@dataclasses.dataclass
class Hotel:
    name: str


async def typed_output(provider: tether.providers.Provider) -> None:
    planner = tether.Agent(name="planner", provider=provider, output_type=Trip)
    assert_type(planner, tether.Agent[Any, Trip])
    plain = tether.Agent(name="plain", provider=provider)
    assert_type(plain, tether.Agent[Any, str])
    async with tether.Runtime() as rt:
        trip = await rt.run(planner, "Plan a weekend in Lisbon")
        assert_type(trip, tether.RunResult[Trip])
        assert_type(trip.output, Trip | None)
        text = await rt.run(plain, "q")
        assert_type(text.output, str | None)
        handle = rt.start(planner, "q")
        assert_type(await handle.result(), tether.RunResult[Trip])
        stays = tether.Agent(name="s", provider=provider, output_type=list[Hotel])
        assert_type((await rt.run(stays, "q")).output, list[Hotel] | None)
        either = tether.Agent(name="e", provider=provider, output_type=Trip | Hotel)
        assert_type((await rt.run(either, "q")).output, Trip | Hotel | None)
        vote = tether.Agent(name="v", provider=provider, output_type=Literal["yes", "no"])
        assert_type((await rt.run(vote, "q")).output, Literal["yes", "no"] | None)
    assert_type(tether.run_sync(planner, "q").output, Trip | None)


def judge_sees_output(candidate: tether.Candidate) -> float:
    return 1.0 if candidate.output is not None else 0.0


def reload(data: dict[str, object]) -> None:
    assert_type(tether.RunResult.load(data, Trip).output, Trip | None)
    assert_type(tether.RunResult.load(data).output, str | None)


def mcp_servers() -> tether.Agent:
    """MCP servers go in tools beside plain tools (tether.mcp, extra ``mcp``)."""
    from tether.mcp import MCPServerHTTP, MCPServerStdio

    files = MCPServerStdio("python", ["server.py"], {"ROOT": "/tmp"}, prefix="fs_", timeout_s=5)
    web = MCPServerHTTP("http://127.0.0.1:8000/mcp", {"Authorization": "x"}, tool_filter=["q"])
    picky = MCPServerHTTP("http://127.0.0.1:8001/mcp", tool_filter=lambda name: name != "rm")
    return tether.Agent(name="m", provider=ScriptedProvider([]), tools=[add, files, web, picky])


# ---------------------------------------------------------- DESIGN §28: one runtime interface


async def anywhere(rt: tether.RuntimeLike, planner: tether.Agent[Any, Trip]) -> None:
    """Code written against the interface, whichever runtime runs it."""
    async with rt as entered:
        handle = entered.start(planner, "q")
        assert_type(handle, tether.RunHandleLike[Trip])
        async for event in handle.events():
            if isinstance(event, events.ApprovalRequested):
                handle.approve(event.call_id)
        for pending in await handle.pending_approvals():
            handle.reject(pending.call_id, "no")
        chunks: list[str] = [chunk async for chunk in handle.stream_text()]
        assert_type(await handle.result(), tether.RunResult[Trip])
        assert_type((await entered.run(planner, "q")).output, Trip | None)
        again: tether.RunHandleLike[Any] = entered.handle(handle.run_id)
        await entered.approve(again.run_id, "c1")
        del chunks


def conforming(store: tether.RunStore) -> list[tether.RuntimeLike]:
    """Runtime and RayRuntime are RuntimeLike; their handles (the stored one too) RunHandleLike."""
    from tether.ray import RayRunHandle, RayRuntime
    from tether.runtime import StoredRunHandle

    plain: tether.RuntimeLike = tether.Runtime()
    ray: tether.RuntimeLike = RayRuntime(hosts=2, store=store)
    handles: list[type[tether.RunHandleLike[Any]]] = [
        tether.RunHandle,
        RayRunHandle,
        StoredRunHandle,
    ]
    del handles
    return [plain, ray]


# ------------------------------------- Pydantic types (docs/guides/typed-output.md)


class PTrip(pydantic.BaseModel):
    city: str
    days: Annotated[int, pydantic.Field(gt=0)]


class PUser(pydantic.BaseModel):
    name: str


@tether.tool
async def plan(ctx: tether.RunContext[PUser], trip: PTrip) -> PTrip:
    """Plan a trip for the run's user."""
    return trip.model_copy(update={"city": ctx.deps.name})


async def pydantic_types(provider: tether.providers.Provider) -> None:
    agent: tether.Agent[PUser, PTrip] = tether.Agent(
        name="planner", provider=provider, tools=[plan], output_type=PTrip
    )
    assert_type(
        tether.Agent(name="p", provider=provider, output_type=PTrip), tether.Agent[Any, PTrip]
    )
    many = tether.Agent(name="m", provider=provider, output_type=list[PTrip])
    # A tool whose deps are not the agent's is a type error, Pydantic deps as any.
    wrong: tether.Agent[Db, PTrip] = tether.Agent(
        name="w",
        provider=provider,
        tools=[plan],  # type: ignore[list-item]
        output_type=PTrip,
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q", deps=PUser(name="Ada"))
        assert_type(result, tether.RunResult[PTrip])
        assert_type(result.output, PTrip | None)
        assert_type((await rt.run(many, "q")).output, list[PTrip] | None)
        rt.start(agent, "q", deps=Db("sqlite://"))  # type: ignore[misc]
    assert_type(tether.RunResult.load({}, PTrip).output, PTrip | None)
    del wrong


async def evals(provider: tether.providers.Provider) -> None:
    from tether.evals import (
        Case,
        Comparison,
        Contains,
        Dataset,
        EvalControl,
        EvalReport,
        ExactMatch,
        LLMRubric,
        evaluate,
        render_html,
    )

    agent = tether.Agent(name="a", provider=provider)
    dataset = Dataset([Case("q", expected="a"), Case("r", metadata={"k": 1}, id="r")])
    rubric = LLMRubric(provider=provider, rubric={"correct": "agrees with the reference"})
    report = await evaluate(
        agent,
        dataset,
        judges=[ExactMatch(), Contains(), rubric, tether.RuleJudge({"ok": lambda c: True})],
        concurrency=4,
        repeat=2,
        limits=tether.Limits(max_cost_usd=1.0),
        control=EvalControl(),
        on_result=lambda result: None,
    )
    assert_type(report, EvalReport)
    assert_type(report.aggregates().pass_rate, float | None)
    assert_type(report.compare(EvalReport.load("old.json")), Comparison)
    assert_type(render_html(report), str)
    await evaluate(agent, "cases.jsonl", judges={"exact": ExactMatch()})


async def replay_and_fork(agent: tether.Agent, store: tether.SQLiteRunStore) -> None:
    found = await tether.replay("runs.jsonl", agent, run_id="run-1", live_tools=False)
    assert_type(found, tether.Replay)
    assert_type(found.identical, bool)
    divergence = found.divergence
    if divergence is not None:
        assert_type(divergence, tether.Divergence)
        assert_type(divergence.round, int)
        assert_type(divergence.stage, str | None)
    from_store = await tether.replay(store, agent, run_id="run-1")
    assert_type(from_store.result, tether.RunResult[Any])
    async with tether.Runtime(store=store) as rt:
        handle = await rt.fork("run-1", at_round=2, agent=agent)
        assert_type(handle, tether.RunHandle[Any])
    provider = tether.ReplayProvider("runs.jsonl", then=ScriptedProvider([]))
    assert isinstance(provider, tether.providers.Provider)
