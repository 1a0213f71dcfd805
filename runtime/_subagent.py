"""Sub-agents: ``agent.as_tool()`` turns an agent into a tool another agent can call.

The child run runs inside the parent's tool call, so it lives in the parent's
task tree: cancelling the parent (or its deadline) cancels the child, and the
child never outlives it. The child's token and cost ceilings are the tighter of
its own and what the parent has left; its usage is charged to the parent when
it ends. Its events carry its own run_id and the parent's (``RunStarted``
``parent_run_id``); the parent's trail has a ``ChildRunFinished``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import attrs

from tether.actors import FatalToolError, ToolOutput, ToolSpec, current_tool_context, tool

from ._budget import least

if TYPE_CHECKING:
    from ._agent import Agent


def agent_tool(
    agent: Agent, *, name: str | None = None, description: str | None = None
) -> ToolSpec:
    """A tool taking ``task: str`` that runs ``agent`` on it as a child run."""
    tool_name = name or re.sub(r"[^a-zA-Z0-9_-]", "_", agent.name)[:64]
    about = description or (
        f"Delegate a task to the agent {agent.name!r} and get its answer."
        + (f" It is instructed: {agent.instructions[:300]}" if agent.instructions else "")
    )

    async def delegate(task: str) -> ToolOutput:
        from ._run import Run  # the run module imports this one's users

        ctx = current_tool_context()
        if ctx is None or ctx.services is None:
            raise FatalToolError(f"the sub-agent tool {tool_name!r} runs only inside a tether run")
        limits = attrs.evolve(
            agent.limits,
            max_total_tokens=least((agent.limits.max_total_tokens, ctx.remaining_tokens)),
            max_cost_usd=least((agent.limits.max_cost_usd, ctx.remaining_cost_usd)),
        )
        services = ctx.services
        child = Run(
            services,
            attrs.evolve(agent, limits=limits),
            task,
            services.new_run_id(),
            parent_run_id=ctx.run_id,
        )
        await child.main(admit=False)
        result = child.result
        assert result is not None
        content = result.output
        if not result.termination.ok or content is None:
            content = (
                f"the sub-agent {agent.name!r} ended {result.termination.value} "
                f"without an accepted answer" + (f": {content}" if content else "")
            )
        return ToolOutput(
            content=content,
            is_error=not result.termination.ok,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            cost_usd=result.usage.cost_usd,
            child_run_id=result.run_id,
            child_termination=result.termination.value,
        )

    # The child's own ceilings bound it; the tool timeout only guards a stuck child.
    timeout = agent.limits.timeout_s or 3600.0
    return tool(delegate, name=tool_name, description=about, timeout_s=timeout)
