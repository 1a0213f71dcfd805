"""A resumed run goes on where it was: its provider request count, its MCP toolsets."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall

pytestmark = pytest.mark.anyio


@tether.tool
async def send_money(to: str, amount: int) -> str:
    """Send money."""
    return f"sent {amount} to {to}"


def _ask(point: tether.PolicyPoint, subject: object) -> tether.Verdict | None:
    return tether.Verdict.ask("payments need a person's yes") if point == "tool_call" else None


def _agent(provider: ScriptedProvider) -> tether.Agent:
    return tether.Agent(name="payer", provider=provider, tools=[send_money], policies=[_ask])


def _script() -> ScriptedProvider:
    pay = ToolCall(name="send_money", arguments={"to": "bob", "amount": 5}, id="call_1")
    return ScriptedProvider([Reply(tool_calls=[pay]), Reply(text="Done.")], record=True)


async def test_a_run_approved_after_a_restart_asks_the_script_for_its_next_reply(
    tmp_path: Path,
) -> None:
    """Parked in one Runtime, approved in another: the model's second request is
    call_index 1 (not 0 again), so the run answers without repeating its tool call."""
    path = tmp_path / "runs.db"
    first = _agent(_script())
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[first]) as rt:
        rt.start(first, "pay bob 5", run_id="pay-1")
        while not await rt.pending_approvals("pay-1"):  # noqa: ASYNC110 (the store is polled)
            await anyio.sleep(0.01)
    provider = _script()
    second = _agent(provider)
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[second]) as rt:
        await rt.approve("pay-1", "call_1")
        result = await rt.handle("pay-1").result()
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "Done."
    assert result.summary() == "Model → Tools(1) → Model → answered"
    assert [ctx.call_index for ctx, _ in provider.requests] == [1]


async def test_a_resumed_run_reconnects_its_agents_mcp_toolset(tmp_path: Path) -> None:
    """An MCP tool call parked for approval in one Runtime runs, once approved in
    another, on that Runtime's own connection to the server."""
    pytest.importorskip("mcp")
    from .test_mcp import stdio

    def script() -> ScriptedProvider:
        call = ToolCall(name="box_echo", arguments={"text": "hi"}, id="call_1")
        return ScriptedProvider([Reply(tool_calls=[call]), Reply(text="Echoed.")])

    def mcp_agent() -> tether.Agent:
        return tether.Agent(
            name="echoer", provider=script(), tools=[stdio(prefix="box_")], policies=[_ask]
        )

    path = tmp_path / "runs.db"
    first = mcp_agent()
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[first]) as rt:
        rt.start(first, "echo hi", run_id="echo-1")
        while not await rt.pending_approvals("echo-1"):  # noqa: ASYNC110 (the store is polled)
            await anyio.sleep(0.01)
    second = mcp_agent()
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[second]) as rt:
        await rt.approve("echo-1", "call_1")
        result = await rt.handle("echo-1").result()
    assert result.termination is tether.Termination.ANSWERED
    finished = [e for e in result.events if type(e).__name__ == "ToolCallFinished"]
    assert [(e.name, e.outcome, e.content) for e in finished] == [("box_echo", "ok", "hi")]


#: The calls of ``stamp`` that started, by call id (one entry per execution).
stamped: list[str] = []


class HoldFirst:
    """``stamp`` of call ``s1`` waits for ``release`` while a test holds it."""

    release: anyio.Event | None = None


@tether.tool
async def stamp(ctx: tether.RunContext, key: str) -> str:
    """A side effect; the result names the call that made it."""
    stamped.append(ctx.call_id)
    if ctx.call_id == "s1" and HoldFirst.release is not None:
        await HoldFirst.release.wait()
    return f"{key} by {ctx.call_id}"


def _twins() -> ScriptedProvider:
    """Round 1: two calls of one tool with the same arguments; then the answer."""
    twins = [ToolCall(name="stamp", arguments={"key": "x"}, id=i) for i in ("s1", "s2")]
    return ScriptedProvider([Reply(tool_calls=twins), Reply(text="stamped")])


def _stamper() -> tether.Agent:
    return tether.Agent(name="stamper", provider=_twins(), tools=[stamp])


@pytest.fixture(params=["sqlite", "postgres"])
def store_path(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """Where the test's run store is: a SQLite file, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "runs.db")
    return "postgres", str(request.getfixturevalue("pg_schema"))


def _open(where: tuple[str, str]) -> tether.RunStore:
    kind, arg = where
    if kind == "sqlite":
        return tether.SQLiteRunStore(arg, poll_s=0.01)
    from tether.postgres import PostgresRunStore

    from .pg import test_dsn

    return PostgresRunStore(test_dsn(), schema=arg)


async def test_a_crash_mid_round_reuses_each_record_for_its_own_call(
    store_path: tuple[str, str],
) -> None:
    """Killed while one of two identical calls ran and the other's result was recorded,
    the run's redone round answers the recorded call from its record, found by its call
    id (not by name and arguments, which would give it to the other), and runs the other."""
    from .test_durable import Crashable

    stamped.clear()
    store = Crashable(_open(store_path))
    HoldFirst.release = anyio.Event()
    async with tether.Runtime(store=store, lease_s=0.3, shutdown_grace_s=0) as rt:
        handle = rt.start(_stamper(), "stamp twice", run_id="twins")
        with anyio.fail_after(20):
            while not [r for r in await store.tool_records("twins") if r.call_id == "s2"]:  # noqa: ASYNC110 (the store is polled)
                await anyio.sleep(0.01)  # s2 finished and is recorded; s1 is still running
        store.crashed = True
    HoldFirst.release = None
    assert sorted(stamped) == ["s1", "s2"]
    second = _open(store_path)
    with anyio.fail_after(20):
        async with tether.Runtime(
            store=second, agents=[_stamper()], lease_s=0.3, resume=True
        ) as rt2:
            result = await rt2.handle(handle.run_id).result()
    assert result.termination is tether.Termination.ANSWERED
    assert sorted(stamped) == ["s1", "s1", "s2"]  # s1 never finished: it ran again; s2 did not
    finished = {e.call_id: e.content for e in result.events if isinstance(e, ev.ToolCallFinished)}
    assert finished == {"s1": "x by s1", "s2": "x by s2"}
    assert [type(e) for e in result.events].count(ev.RunResumed) == 1
    assert [e.seq for e in result.events] == list(range(len(result.events)))
    await second.aclose()
