"""A host process for tests/test_mcp.py: a Runtime whose run uses the stdio test server.

``python tests/mcp_host.py BACKEND hang MARKER``: the run asks the server for its pid
(printed as ``pid N``), then calls ``stuck``, which blocks the whole server for
ten minutes, deaf to its stdin and to SIGTERM, once it has made the file
MARKER: the test SIGKILLs this process then.
``python tests/mcp_host.py BACKEND close -``: the same pid, then the run ends and
the Runtime closes the connection (``closed``), and the process exits.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

import tether
from tether import events as ev
from tether.mcp import MCPServerStdio
from tether.providers import Reply, ScriptedProvider, ToolCall

SERVER = str(Path(__file__).with_name("mcp_server.py"))


async def main(mode: str, marker: str) -> None:
    box = MCPServerStdio(sys.executable, [SERVER, "stdio", "more"], name="box")
    replies: list[Any] = [Reply(tool_calls=[ToolCall(name="pid", arguments={})])]
    if mode == "hang":
        stuck = ToolCall(name="stuck", arguments={"seconds": 600, "marker": marker})
        replies.append(Reply(tool_calls=[stuck]))
    replies.append(Reply(text="done"))
    agent = tether.Agent(name="host", provider=ScriptedProvider(replies), tools=[box])
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "go")
        async for event in handle.events():
            if isinstance(event, ev.ToolCallFinished) and event.name == "pid":
                print("pid", event.content, flush=True)
        await handle.result()
    print("closed", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[2], sys.argv[3], backend=sys.argv[1])
