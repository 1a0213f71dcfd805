"""Agents that tests/test_mcp_serve.py serves over MCP (``tether mcp-serve FILE:echo``).

``echo`` answers ``echo: TASK`` in pieces of four characters (text deltas:
progress); ``waiter`` calls its tool ``hang``, which never returns (a call to
cancel); ``failing`` ends ``provider_failed``.
"""

from __future__ import annotations

from typing import Any

import anyio

import tether
from tether.providers import Reply, ScriptedProvider, ToolCall


def _echo(request: Any, _ctx: Any) -> Reply:
    return Reply(text=f"echo: {request.messages[-1].text}")


async def hang() -> str:
    """Never answers."""
    await anyio.sleep_forever()
    return "never"


def _waiter(request: Any, _ctx: Any) -> Reply:
    if len(request.messages) == 1:
        return Reply(tool_calls=[ToolCall(name="hang", arguments={})])
    return Reply(text="done")


def echo() -> tether.Agent:
    """A fresh echo agent."""
    return tether.Agent(
        name="echo", provider=ScriptedProvider(_echo, chunk_size=4), instructions="Echo."
    )


def waiter() -> tether.Agent:
    """A fresh agent whose one tool call never ends."""
    return tether.Agent(
        name="waiter", provider=ScriptedProvider(_waiter), tools=[tether.tool(hang)]
    )


def failing() -> tether.Agent:
    """A fresh agent whose provider has nothing to say."""
    return tether.Agent(name="failing", provider=ScriptedProvider([]))
