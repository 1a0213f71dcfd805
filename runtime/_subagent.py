"""Sub-agents: ``agent.as_tool()`` turns an agent into a tool another agent can call.

The tool reaches the Runtime only through the one capability every tool call
has, ``ToolContext.run_child``: the child run runs inside the parent's tool
call, so it lives in the parent's task tree: cancelling the parent (or its
deadline) cancels the child, and the child never outlives it. The child's
token and cost ceilings are the tighter of its own and what the parent has
left; its usage is charged to the parent when it ends. Its events carry its
own run_id and the parent's (``RunStarted`` ``parent_run_id``); the parent's
trail has a ``ChildRunFinished``.
"""

from __future__ import annotations

import re

from tether.actors import FatalToolError, ToolOutput, ToolSpec, current_tool_context, tool


def agent_tool(
    agent: object,
    *,
    agent_name: str,
    instructions: str,
    timeout_s: float | None,
    name: str | None = None,
    description: str | None = None,
) -> ToolSpec:
    """A tool taking ``task: str`` that runs ``agent`` on it as a child run."""
    tool_name = name or re.sub(r"[^a-zA-Z0-9_-]", "_", agent_name)[:64]
    about = description or (
        f"Delegate a task to the agent {agent_name!r} and get its answer."
        + (f" It is instructed: {instructions[:300]}" if instructions else "")
    )

    async def delegate(task: str) -> ToolOutput:
        ctx = current_tool_context()
        if ctx is None or ctx.run_child is None:
            raise FatalToolError(f"the sub-agent tool {tool_name!r} runs only inside a tether run")
        return await ctx.run_child(agent, task)

    # The child's own ceilings bound it; the tool timeout only guards a stuck child.
    timeout = timeout_s or 3600.0
    return tool(delegate, name=tool_name, description=about, timeout_s=timeout)
