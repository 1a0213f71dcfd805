"""Exact token and cost ceilings, the Runtime-wide budget, sub-agents, approval and stop()."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import Price, Reply, ScriptedProvider, TokenUsage, ToolCall

from .helpers import AUTOJUMP, assert_consistent, first, of, transitions

pytestmark = pytest.mark.anyio

LONG = "word " * 200  # 1,000 characters: 250 tokens in the scripted estimate
PRICE = Price(input=2.0, output=10.0)


def streaming(script: list[Any], **kwargs: Any) -> ScriptedProvider:
    kwargs.setdefault("chunk_size", 8)  # 2 tokens a chunk, a usage report after each
    return ScriptedProvider(script, record=True, **kwargs)


async def run(agent: tether.Agent, rt: tether.Runtime | None = None) -> tether.RunResult:
    if rt is not None:
        return await rt.run(agent, "question")
    async with tether.Runtime() as runtime:
        result = await runtime.run(agent, "question")
    assert_consistent(result)
    return result


def input_tokens_of_last_call(result: tether.RunResult) -> int:
    charges = of(result.events, ev.UsageCharged)
    return charges[-1].input_tokens


# ------------------------------------------------------------ token ceilings


async def test_request_max_tokens_is_clamped_to_the_token_budget() -> None:
    """A request's max_tokens is what the token budget has left, as the provider saw it."""
    provider = streaming([Reply(text="short answer")])
    agent = tether.Agent(name="a", provider=provider, limits=tether.Limits(max_total_tokens=70))
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert provider.requests[0][1].max_tokens == 70
    assert of(result.events, ev.ModelCallStarted)[0].max_tokens == 70


async def test_clamped_call_never_overshoots_by_more_than_its_input() -> None:
    """Continuing a long text under a token ceiling stops within the README's guarantee."""
    provider = streaming([Reply(text=LONG)] * 10)
    limit = 120
    agent = tether.Agent(
        name="a",
        provider=provider,
        limits=tether.Limits(max_total_tokens=limit, max_continues=10),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.TOKEN_CEILING
    overshoot = result.usage.total_tokens - limit
    assert overshoot <= input_tokens_of_last_call(result)
    caps = [r.max_tokens for _, r in provider.requests]
    assert caps[0] == limit
    assert all(cap is not None and cap < limit for cap in caps[1:])


async def test_stream_crossing_the_ceiling_is_cut_mid_stream() -> None:
    """A provider that ignores max_tokens is cut mid-stream; the partial usage counts."""
    provider = streaming([Reply(text=LONG)], honor_max_tokens=False, chunk_latency_s=0.001)
    limit = 60
    agent = tether.Agent(name="a", provider=provider, limits=tether.Limits(max_total_tokens=limit))
    result = await run(agent)
    assert result.termination is tether.Termination.TOKEN_CEILING
    (hit,) = of(result.events, ev.CeilingHit)
    assert hit.ceiling == "max_total_tokens"
    assert hit.limit == limit
    assert not of(result.events, ev.ModelCallFinished), "the call was cut, not finished"
    # Cut at the first usage report past the ceiling: at most one chunk (2 tokens) over.
    assert limit < result.usage.total_tokens <= limit + 2
    assert result.usage.output_tokens < 250
    assert result.output is None


async def test_budget_that_cannot_buy_a_call_ends_before_sending() -> None:
    """A cost budget too small for one output token ends the run with no request sent."""
    provider = streaming([Reply(text="x")], cost_per_mtok=PRICE)
    agent = tether.Agent(name="a", provider=provider, limits=tether.Limits(max_cost_usd=1e-9))
    result = await run(agent)
    assert result.termination is tether.Termination.COST_CEILING
    assert provider.requests == []
    assert result.usage.model_calls == 0


# ------------------------------------------------------------- cost ceilings


async def test_request_max_tokens_is_clamped_to_the_cost_budget() -> None:
    """max_tokens is what the cost budget buys at the model's output price."""
    provider = streaming([Reply(text="ok")], cost_per_mtok=PRICE)
    agent = tether.Agent(name="a", provider=provider, limits=tether.Limits(max_cost_usd=0.001))
    result = await run(agent)
    assert provider.requests[0][1].max_tokens == 100  # $0.001 / ($10 / 1M tokens)
    assert result.termination is tether.Termination.ANSWERED
    assert result.usage.cost_usd is not None
    assert result.usage.cost_usd <= 0.001


async def test_cost_ceiling_crossed_mid_stream() -> None:
    """A stream crossing the cost ceiling ends cost_ceiling with a bounded overshoot."""
    provider = streaming(
        [Reply(text=LONG)], cost_per_mtok=PRICE, honor_max_tokens=False, chunk_latency_s=0.001
    )
    limit = 0.0005
    agent = tether.Agent(name="a", provider=provider, limits=tether.Limits(max_cost_usd=limit))
    result = await run(agent)
    assert result.termination is tether.Termination.COST_CEILING
    assert result.usage.cost_usd is not None
    one_chunk = 2 * PRICE.output / 1_000_000
    assert limit < result.usage.cost_usd <= limit + one_chunk + 1e-12
    (hit,) = of(result.events, ev.CeilingHit)
    assert hit.ceiling == "max_cost_usd"


async def test_cost_is_none_when_unpriced() -> None:
    """An unpriced model gives cost None, never zero."""
    agent = tether.Agent(name="a", provider=streaming([Reply(text="ok")]))
    result = await run(agent)
    assert result.usage.cost_usd is None


async def test_a_cancelled_unpriced_run_costs_none_too() -> None:
    """Cancelled mid-call, an unpriced model's run still costs None, not 0.0."""
    agent = tether.Agent(name="a", provider=streaming([Reply(text="ok")], latency_s=60))
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        await first(handle, ev.ModelCallStarted)
        handle.cancel("enough")
        result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    assert result.usage.cost_usd is None


# --------------------------------------------------------- runtime budget


async def test_runtime_budget_stops_every_run_that_shares_it() -> None:
    """Crossing the Runtime-wide budget ends all runs in flight with its ceiling."""
    provider = streaming([Reply(text=LONG)], honor_max_tokens=False, chunk_latency_s=0.002)
    agent = tether.Agent(name="a", provider=provider)
    async with tether.Runtime(limits=tether.Limits(max_total_tokens=200)) as rt:
        handles = [rt.start(agent, "q") for _ in range(5)]
        results = [await h.result() for h in handles]
        assert rt.budget is not None
        spent = rt.budget.tokens
        with pytest.raises(tether.runtime.BudgetExhausted, match="reset_budget"):
            rt.start(agent, "q")
        rt.reset_budget(tether.Limits(max_total_tokens=10_000))
        again = await rt.run(tether.Agent(name="b", provider=streaming([Reply(text="hi")])), "q")
    assert {r.termination for r in results} == {tether.Termination.TOKEN_CEILING}
    assert sum(r.usage.total_tokens for r in results) == spent
    # Each run in flight can add at most one chunk past the budget once it is crossed.
    assert spent <= 200 + 5 * 2 + 5 * results[0].usage.input_tokens
    for result in results:
        (hit,) = of(result.events, ev.CeilingHit)
        assert hit.ceiling == "runtime.max_total_tokens"
        assert_consistent(result)
    assert again.termination is tether.Termination.ANSWERED


async def test_runtime_budget_clamps_requests() -> None:
    """A run's request is clamped to the Runtime budget when it is the tighter one."""
    provider = streaming([Reply(text="ok")])
    agent = tether.Agent(name="a", provider=provider, limits=tether.Limits(max_total_tokens=500))
    async with tether.Runtime(limits=tether.Limits(max_total_tokens=80)) as rt:
        await rt.run(agent, "q")
    assert provider.requests[0][1].max_tokens == 80


async def test_runtime_budget_holds_every_call_in_flight() -> None:
    """Calls in flight at once hold their output: together they never exceed the shared budget."""
    # One delta and one usage report per call (as from a server that reports at
    # the end): before reservations, each of the 20 calls was promised the same
    # remainder, and all 20 spent it.
    provider = streaming([Reply(text=LONG)], chunk_size=None, latency_s=0.01)
    agent = tether.Agent(name="a", provider=provider)
    limit = 1_000
    async with tether.Runtime(limits=tether.Limits(max_total_tokens=limit)) as rt:
        results = await gather(rt, agent, 20)
        assert rt.budget is not None
        assert (rt.budget.tokens, rt.budget.reserved_tokens) == (
            sum(r.usage.total_tokens for r in results),
            0,
        )
    assert sum(r.usage.output_tokens for r in results) <= limit
    crossed = [r for r in results if r.termination is not tether.Termination.ANSWERED]
    assert crossed, "the budget should run out for some runs"
    # Overshoot is at most the input of the calls that crossed it.
    assert sum(r.usage.total_tokens for r in results) <= limit + sum(
        r.usage.input_tokens for r in results
    )
    for result in results:
        assert_consistent(result)
    waits = [w for r in results for w in of(r.events, ev.ProviderWait)]
    assert waits
    assert all("held by other calls" in w.reason for w in waits)


async def test_a_call_waiting_for_the_shared_budget_can_be_cancelled() -> None:
    """A run waiting for room in the Runtime's budget ends cancelled, having sent nothing."""
    provider = streaming([Reply(text=LONG)], chunk_size=None, latency_s=60)
    agent = tether.Agent(name="a", provider=provider)
    async with tether.Runtime(limits=tether.Limits(max_total_tokens=1_000)) as rt:
        first = rt.start(agent, "q")
        # The first call holds the whole budget (the scripted provider sets no
        # max_tokens of its own), so the second waits for room.
        await anyio.wait_all_tasks_blocked()
        assert rt.budget is not None
        assert rt.budget.reserved_tokens == 1_000
        second = rt.start(agent, "q")
        await anyio.wait_all_tasks_blocked()  # the second is parked, waiting for room
        second.cancel("enough")
        waiting = await second.result()
        assert rt.budget.reserved_tokens == 1_000  # the first still holds its own
        first.cancel("enough")
        await first.result()
        assert rt.budget.reserved_tokens == 0
    assert waiting.termination is tether.Termination.CANCELLED
    assert not of(waiting.events, ev.ModelCallStarted)
    assert len(provider.requests) == 1


async def gather(rt: tether.Runtime, agent: tether.Agent, n: int) -> list[tether.RunResult]:
    handles = [rt.start(agent, "q") for _ in range(n)]
    return [await h.result() for h in handles]


# ---------------------------------------------------------------- sub-agents


def researcher(script: list[Any], **kwargs: Any) -> tether.Agent:
    return tether.Agent(
        name="researcher",
        instructions="Find facts.",
        provider=ScriptedProvider(script, record=True, **kwargs),
    )


async def test_sub_agent_usage_counts_against_the_parent() -> None:
    """A sub-agent's run is a child in the parent's events and its usage is the parent's."""
    child = researcher([Reply(text="the fact", usage=TokenUsage(input_tokens=40, output_tokens=7))])
    parent = tether.Agent(
        name="boss",
        provider=ScriptedProvider(
            [
                Reply(
                    tool_calls=[ToolCall(name="researcher", arguments={"task": "find it"})],
                    usage=TokenUsage(input_tokens=10, output_tokens=5),
                ),
                Reply(text="done", usage=TokenUsage(input_tokens=20, output_tokens=3)),
            ]
        ),
        tools=[child.as_tool()],
    )
    seen: list[ev.Event] = []
    async with tether.Runtime(event_sink=seen.append) as rt:
        result = await rt.run(parent, "q")
    assert result.termination is tether.Termination.ANSWERED
    assert (result.usage.input_tokens, result.usage.output_tokens) == (70, 15)
    (finished,) = of(result.events, ev.ChildRunFinished)
    assert finished.termination == "answered"
    child_events = [e for e in seen if e.run_id == finished.child_run_id]
    started = child_events[0]
    assert isinstance(started, ev.RunStarted)
    assert started.parent_run_id == result.run_id
    assert started.input == "find it"
    assert isinstance(child_events[-1], ev.RunFinished)
    (tool_done,) = of(result.events, ev.ToolCallFinished)
    assert tool_done.content == "the fact"
    assert_consistent(result)


async def test_sub_agent_draws_on_the_parents_remaining_budget() -> None:
    """The child's token ceiling is what the parent has left."""
    child = researcher([Reply(text="fact")])
    parent = tether.Agent(
        name="boss",
        provider=ScriptedProvider(
            [
                Reply(
                    tool_calls=[ToolCall(name="researcher", arguments={"task": "t"})],
                    usage=TokenUsage(input_tokens=30, output_tokens=10),
                ),
                Reply(text="done", usage=TokenUsage(input_tokens=1, output_tokens=1)),
            ]
        ),
        tools=[child.as_tool()],
        limits=tether.Limits(max_total_tokens=100),
    )
    async with tether.Runtime() as rt:
        await rt.run(parent, "q")
    assert isinstance(child.provider, ScriptedProvider)
    assert child.provider.requests[0][1].max_tokens == 60


async def test_cancelling_the_parent_cancels_the_sub_agent() -> None:
    """Cancelling the parent mid sub-run ends both, the child cancelled with its events."""
    child = researcher([Reply(text="slow fact")], latency_s=60)
    parent = tether.Agent(
        name="boss",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="researcher", arguments={"task": "t"})])]
        ),
        tools=[child.as_tool()],
    )
    seen: list[ev.Event] = []
    child_calling = threading.Event()  # the sink runs in the Runtime's sink thread

    def sink(event: ev.Event) -> None:
        seen.append(event)
        if isinstance(event, ev.ModelCallStarted) and event.run_id != handle.run_id:
            child_calling.set()

    before = {t.id for t in anyio.get_running_tasks()}
    async with tether.Runtime(event_sink=sink) as rt:
        handle = rt.start(parent, "q")
        assert await anyio.to_thread.run_sync(child_calling.wait, 5)
        handle.cancel("stop")
        result = await handle.result()
    assert {t.id for t in anyio.get_running_tasks()} == before
    assert result.termination is tether.Termination.CANCELLED
    child_finished = [
        e for e in seen if isinstance(e, ev.RunFinished) and e.run_id != result.run_id
    ]
    assert [e.termination for e in child_finished] == [tether.Termination.CANCELLED]
    assert_consistent(result)


async def test_as_tool_outside_a_run_is_a_clear_error() -> None:
    """Calling a sub-agent tool's function directly fails with a clear message."""
    spec = researcher([Reply(text="x")]).as_tool()
    with pytest.raises(tether.FatalToolError, match="only inside a tether run"):
        await spec.fn(task="t")


# ------------------------------------------------------------------ approval


def approval_agent(*, timeout_s: float | None = None) -> tether.Agent:
    @tether.tool
    async def send_email(to: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    def ask(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        if point == "tool_call":
            return tether.Verdict.ask("emails need a human")
        return None

    return tether.Agent(
        name="mailer",
        provider=ScriptedProvider(
            [
                Reply(tool_calls=[ToolCall(name="send_email", arguments={"to": "bob"}, id="c1")]),
                Reply(text="done"),
            ]
        ),
        tools=[send_email],
        policies=[ask],
        limits=tether.Limits(timeout_s=timeout_s),
    )


@pytest.mark.parametrize("approve", [True, False])
async def test_approval_approve_and_reject(approve: bool) -> None:
    """An asked call waits for the host; approve runs it, reject gives an is_error result."""
    async with tether.Runtime() as rt:
        handle = rt.start(approval_agent(), "q")
        requested = await first(handle, ev.ApprovalRequested)
        assert requested.call_id == "c1"
        assert requested.reason == "emails need a human"
        pending = await handle.pending_approvals()
        assert [(p.call_id, p.name, p.arguments) for p in pending] == [
            ("c1", "send_email", {"to": "bob"})
        ]
        if approve:
            handle.approve("c1")
        else:
            handle.reject("c1", "not today")
        result = await handle.result()
        with pytest.raises(KeyError, match="no approval is pending"):
            handle.approve("c1")
    (answered,) = of(result.events, ev.ApprovalAnswered)
    assert answered.approved is approve
    (done,) = of(result.events, ev.ToolCallFinished)
    if approve:
        assert (done.outcome, done.content) == ("ok", "sent to bob")
        assert result.usage.tool_calls == 1
    else:
        assert done.outcome == "denied"
        assert "not today" in done.content
        assert done.is_error
        assert result.usage.tool_calls == 0
    assert result.termination is tether.Termination.ANSWERED
    assert_consistent(result)


@AUTOJUMP
async def test_approval_wait_is_bounded_by_the_deadline() -> None:
    """With no answer, the run ends deadline at its timeout; the call gets a cancelled result."""
    async with tether.Runtime() as rt:
        start = anyio.current_time()
        result = await rt.run(approval_agent(timeout_s=300), "q")
        assert anyio.current_time() - start == pytest.approx(300)
    assert result.termination is tether.Termination.DEADLINE
    (done,) = of(result.events, ev.ToolCallFinished)
    assert done.outcome == "cancelled"
    assert of(result.events, ev.ApprovalRequested)
    assert not of(result.events, ev.ApprovalAnswered)
    assert_consistent(result)


# ---------------------------------------------------------------------- stop


async def test_stop_finishes_the_round_then_ends_cancelled() -> None:
    """handle.stop() lets the current round finish, then ends cancelled with reason stopped."""
    gate = anyio.Event()

    @tether.tool
    async def work(n: int) -> int:
        """Work."""
        await gate.wait()
        return n

    script = [Reply(tool_calls=[ToolCall(name="work", arguments={"n": i})]) for i in range(5)]
    agent = tether.Agent(name="a", provider=ScriptedProvider(script), tools=[work])
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        await first(handle, ev.ToolCallStarted)
        handle.stop()
        gate.set()
        result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "stopped"
    assert [e.outcome for e in of(result.events, ev.ToolCallFinished)] == ["ok"]
    assert transitions(result) == [("complete", "stopped")]
    assert result.usage.steps == 1
