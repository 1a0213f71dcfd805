"""Uses of the public API that must type-check under ``mypy --strict`` (see .ci/typecheck.sh).

Not collected by pytest (no ``test_`` prefix); it is only type-checked.
"""

from __future__ import annotations

import tether
from tether import events
from tether.providers import (
    AnthropicProvider,
    Backoff,
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
    return [
        AnthropicProvider("claude-sonnet-4-5", api_key="k", backoff=Backoff(initial=1.0)),
        OpenAIProvider("gpt-4.1-mini", base_url="http://127.0.0.1:1/v1"),
    ]


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
        handle.cancel("done")
        handle.stop()
        photo = tether.Image.from_bytes(b"\x89PNG\r\n\x1a\n", "image/png")
        looked = await rt.run(agent, ["What is this?", photo, tether.Image.from_url("https://x/y")])
        transcript: list[tether.Message] = tether.load_messages(
            tether.dump_messages(looked.messages)
        )
        del ok, cost, line, transcript
    result = tether.run_sync(agent, "q")
    assert isinstance(result.output, str | None)


def mcp_servers() -> tether.Agent:
    """MCP servers go in tools beside plain tools (tether.mcp, extra ``mcp``)."""
    from tether.mcp import MCPServerHTTP, MCPServerStdio

    files = MCPServerStdio("python", ["server.py"], {"ROOT": "/tmp"}, prefix="fs_", timeout_s=5)
    web = MCPServerHTTP("http://127.0.0.1:8000/mcp", {"Authorization": "x"}, tool_filter=["q"])
    picky = MCPServerHTTP("http://127.0.0.1:8001/mcp", tool_filter=lambda name: name != "rm")
    return tether.Agent(name="m", provider=ScriptedProvider([]), tools=[add, files, web, picky])
