"""A resumed run goes on where it was: its provider request count, its MCP toolsets."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import tether
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
