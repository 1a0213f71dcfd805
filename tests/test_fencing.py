"""Fencing (docs/guides/durable.md): an owner whose lease may have lapsed starts no model
call and no tool call, by its own clock; every owner writes, and its tools see, its lease epoch.

The store here is :class:`tests.memory_runstore.MemoryRunStore`: its leases are on the
event loop's clock and its replies can come late, so each case is exact under trio's
autojump clock (and runs in real time on asyncio, where every margin is a whole lease).
In each case a second Runtime (``resume=True``) takes the run over once its lease has
expired in the store, and the first one's handle gets the run's one result from the
store: the run ends once, by its new owner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio.testing

import tether
from tether import events as ev
from tether.providers import (
    Backoff,
    Fault,
    ModelRequest,
    Overloaded,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)

from .memory_runstore import MemoryRunStore

pytestmark = pytest.mark.anyio

#: Under the autojump clock or in real time (asyncio): the same cases, the same margins.
BACKENDS = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(
            ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio-autojump"
        ),
        pytest.param("asyncio", id="asyncio"),
    ],
)

LEASE_S = 1.0

#: Every tool execution: (tool, ctx.idempotency_key), in the order they started.
started: list[tuple[str, str]] = []
#: The request numbers (``ProviderContext.call_index``) the provider got, in order.
requested: list[int] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    started.clear()
    requested.clear()
    finished.clear()


@tether.tool(sequential=True)
async def effect(ctx: tether.RunContext, key: str) -> str:
    """A side effect, logged with its idempotency key."""
    started.append(("effect", ctx.idempotency_key))
    return f"did {key}"


@tether.tool(sequential=True)
async def slow(ctx: tether.RunContext, key: str) -> str:
    """A side effect that takes two leases."""
    started.append(("slow", ctx.idempotency_key))
    await anyio.sleep(2 * LEASE_S)
    return f"slowly did {key}"


#: The keys of the ``long`` calls that ran to their end.
finished: list[str] = []


@tether.tool(sequential=True)
async def long(ctx: tether.RunContext, key: str) -> str:
    """A side effect that takes five leases, noted when it is through."""
    started.append(("long", ctx.idempotency_key))
    await anyio.sleep(5 * LEASE_S)
    finished.append(ctx.idempotency_key)
    return f"did {key} at length"


def results_in(request: ModelRequest) -> int:
    return sum(isinstance(b, ToolResultBlock) for m in request.messages for b in m.content)


def agent(*calls: str, fault_first: bool = False) -> tether.Agent:
    """Round 1 calls the tools ``calls`` (in order); then the answer.

    ``fault_first``: the run's first request fails as overloaded, and the provider
    waits two leases before it tries again."""

    def model(request: ModelRequest, ctx: ProviderContext) -> Reply | Fault:
        first = not requested
        requested.append(ctx.call_index)
        if fault_first and first:
            return Fault(error=Overloaded("busy"))
        if results_in(request) == 0:
            return Reply(
                tool_calls=[ToolCall(name=name, arguments={"key": name}) for name in calls]
            )
        return Reply(text="done")

    backoff = Backoff(initial=2 * LEASE_S, jitter=False)
    return tether.Agent(
        name="fenced",
        instructions="act once",
        provider=ScriptedProvider(model, backoff=backoff),
        tools=[effect, slow, long],
    )


@asynccontextmanager
async def two_runtimes(
    store: MemoryRunStore, worker: tether.Agent
) -> AsyncIterator[tuple[tether.Runtime, tether.Runtime]]:
    """The first owner, and a Runtime that takes over the runs whose lease expired."""
    async with (
        tether.Runtime(store=store, lease_s=LEASE_S) as first,
        tether.Runtime(store=store, agents=[worker], lease_s=LEASE_S, resume=True) as second,
    ):
        yield first, second


async def owners(store: MemoryRunStore, run_id: str) -> list[str | None]:
    """The previous owners named by the run's seams (one per take-over)."""
    stored = await store.events(run_id)
    return [e.previous_owner for e in map(ev.load, stored) if isinstance(e, ev.RunResumed)]


@BACKENDS
async def test_a_commit_answered_late_starts_no_model_call(anyio_backend: Any) -> None:
    """The round's commit is applied at once but answered after a lease: the lease by the
    owner's clock ran from when it was sent, so the next model call is not made."""
    store = MemoryRunStore()
    store.late["commit"] = [0.0, 2 * LEASE_S]  # the checkpoint of round 0 on time, round 1 late
    store.hang.add("renew")  # and no renewal comes back
    worker = agent("effect")
    async with two_runtimes(store, worker) as (first, _):
        result = await first.start(worker, "go", run_id="r").result()
    assert result.termination is tether.Termination.ANSWERED
    # Round 1 by the first owner; round 2 once, by the second (the first never asked).
    assert len(requested) == 2
    assert started == [("effect", "r:call_0_0:1")]
    assert len(await owners(store, "r")) == 1
    # The first owner's writes all carried epoch 1, the second's epoch 2.
    epochs = {(owner, epoch) for method, _, owner, epoch in store.writes if method != "claim"}
    assert {epoch for _, epoch in epochs} == {1, 2}
    assert len({owner for owner, _ in epochs}) == 2


@BACKENDS
async def test_a_tool_waiting_behind_a_long_one_is_not_started(anyio_backend: Any) -> None:
    """Two sequential calls; the first outlasts the lease while no renewal comes back: the
    second is never started by this owner. The new owner runs the round again (the first
    call had not finished, so it runs again, with the new epoch in its key)."""
    store = MemoryRunStore()
    store.hang.add("renew")
    worker = agent("slow", "effect")
    async with two_runtimes(store, worker) as (first, _):
        result = await first.start(worker, "go", run_id="t").result()
    assert result.termination is tether.Termination.ANSWERED
    assert started.count(("effect", "t:call_0_1:1")) == 0  # never by the stale owner
    assert started.count(("effect", "t:call_0_1:2")) == 1
    assert sorted(key for tool, key in started if tool == "slow") == [
        "t:call_0_0:1",
        "t:call_0_0:2",
    ]
    assert len(requested) == 3  # round 1 by each owner, round 2 by the new one


@BACKENDS
async def test_a_model_retry_after_the_deadline_is_not_sent(anyio_backend: Any) -> None:
    """The first attempt fails; the retry comes two leases later, with no renewal back in
    between: it is not sent. The new owner makes the call."""
    store = MemoryRunStore()
    store.hang.add("renew")
    worker = agent("effect", fault_first=True)
    async with two_runtimes(store, worker) as (first, _):
        result = await first.start(worker, "go", run_id="m").result()
    assert result.termination is tether.Termination.ANSWERED
    # The fault (first owner), then the new owner's two rounds: no retry by the first.
    assert len(requested) == 3
    assert started == [("effect", "m:call_0_0:2")]


@BACKENDS
async def test_a_call_in_flight_is_stopped_soon_after_the_deadline(anyio_backend: Any) -> None:
    """No renewal comes back while a call takes five leases: the owner's own check (every
    third of a lease, no store involved) stops the run within a third of a lease of its
    deadline, the call with it. The new owner runs the call to its end."""
    store = MemoryRunStore()
    store.hang.add("renew")
    worker = agent("long")
    async with two_runtimes(store, worker) as (first, _):
        result = await first.start(worker, "go", run_id="l").result()
    assert result.termination is tether.Termination.ANSWERED
    assert started == [("long", "l:call_0_0:1"), ("long", "l:call_0_0:2")]
    assert finished == ["l:call_0_0:2"]  # the stale owner's call was cut short


@BACKENDS
async def test_renewed_leases_let_a_long_run_act(anyio_backend: Any) -> None:
    """No false alarm: while renewals come back, a tool that takes many leases runs, and
    the calls after it too, all under the first owner (epoch 1)."""
    store = MemoryRunStore()
    worker = agent("slow", "effect", "slow")
    async with tether.Runtime(store=store, lease_s=LEASE_S) as rt:
        result = await rt.run(worker, "go", run_id="ok")
    assert result.termination is tether.Termination.ANSWERED
    assert started == [
        ("slow", "ok:call_0_0:1"),
        ("effect", "ok:call_0_1:1"),
        ("slow", "ok:call_0_2:1"),
    ]
    assert {epoch for *_, epoch in store.writes} == {1}


async def test_the_idempotency_key_of_a_run_without_a_store(anyio_backend: str) -> None:
    """Without a store there is no epoch: the key is the run and the call."""
    async with tether.Runtime() as rt:
        result = await rt.run(agent("effect"), "go", run_id="plain")
    assert result.termination is tether.Termination.ANSWERED
    assert started == [("effect", "plain:call_0_0")]


#: Per model request of the sub-agent: whether the first owner's lease of its parent had
#: lapsed by that owner's clock when it was sent.
child_requests: list[bool] = []
#: The first owner of the parent run (set by the test).
owner: list[tether.Runtime] = []


@tether.tool(sequential=True)
async def until_lapsed(key: str) -> str:
    """The sub-agent's tool: the first time, it returns just after the parent's deadline
    (by the owner's clock), well before the keeper's next check."""
    if owner:  # the first owner's child, the first time
        rt = owner.pop()
        deadline = rt._keeper.owned["p"][1].deadline  # type: ignore[union-attr]
        lapsed_at.append(deadline)
        await anyio.sleep_until(deadline)
    return f"waited {key}"


def sub_agent() -> tether.Agent:
    """Round 1 calls ``until_lapsed``; round 2 answers."""

    def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
        child_requests.append(bool(lapsed_at) and anyio.current_time() >= lapsed_at[0])
        if results_in(request) == 0:
            return Reply(tool_calls=[ToolCall(name="until_lapsed", arguments={"key": "k"})])
        return Reply(text="child done")

    return tether.Agent(
        name="sub",
        instructions="wait",
        provider=ScriptedProvider(model),
        tools=[until_lapsed],
    )


lapsed_at: list[float] = []


def parent_agent() -> tether.Agent:
    def model(request: ModelRequest, ctx: ProviderContext) -> Reply:
        if results_in(request) == 0:
            return Reply(tool_calls=[ToolCall(name="sub", arguments={"task": "go"})])
        return Reply(text="parent done")

    return tether.Agent(
        name="parent",
        instructions="delegate",
        provider=ScriptedProvider(model),
        tools=[sub_agent().as_tool()],
    )


@BACKENDS
async def test_a_sub_agent_stops_with_its_parents_lease(anyio_backend: Any) -> None:
    """A durable run's sub-agent asks its parent's fence before each model and tool call:
    once the parent's lease may have lapsed (no renewal comes back), the child sends no
    request, even before the keeper's next check would cut the parent. The new owner
    runs the parent's round, and its child, again."""
    child_requests.clear()
    lapsed_at.clear()
    store = MemoryRunStore()
    store.hang.add("renew")
    worker = parent_agent()
    async with two_runtimes(store, worker) as (first, _):
        # Off the keeper's beat (a check every third of a lease from the Runtime's
        # start): the parent's deadline falls a sixth of a lease before the next check.
        await anyio.sleep(LEASE_S / 6)
        owner.append(first)
        result = await first.start(worker, "go", run_id="p").result()
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "parent done"
    # The first owner's child: its first request only (the second would have come after
    # the deadline); the new owner's child: both of its requests.
    assert child_requests == [False, True, True]
