"""tether agents as the tools of an MCP server: :func:`serve` (see docs/guides/mcp.md).

What maps to what:

- an agent is a tool named after it (``Agent.name``, made a valid tool name),
  described as ``Agent.as_tool`` describes it, taking one argument ``task``
  (a string): the run's input;
- a ``tools/call`` is one run, started on the serving Runtime (its limits,
  sinks, run store and budget apply), with the run's own id;
- the run's answer is the result's text (a typed output as its JSON text); a
  run that does not end ``answered`` or ``terminal_tool`` is a result with
  ``isError`` whose text says how it ended and why;
- when the caller asked for progress (a ``progressToken``), each text delta of
  the run's model calls is a ``notifications/progress`` whose ``message`` is the
  text, and so is the start of each of its tool calls (``calling NAME``);
  ``progress`` counts the notifications (the total is unknown);
- a client that cancels the call (``notifications/cancelled``, or the end of
  its HTTP request on a 2026-07-28 connection) cancels the run, which ends
  ``cancelled``; the call then gets no answer, as the spec wants;
- the caller's trace context (``params._meta.traceparent``) is current while
  the run starts, so with :class:`tether.otel.OtelSink` the run's span
  continues the caller's trace (the SDK extracts it).

Both protocol revisions the SDK serves are served: the ``initialize`` handshake
(2025-11-25 and before) and the 2026-07-28 per-request envelope.
"""

from __future__ import annotations

import re
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Literal, overload

import anyio
import mcp_types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette

from tether import events as ev
from tether.runtime import Agent, RunHandleLike, RuntimeLike

#: How long a cancelled call waits for its run to end before it lets go of it.
CANCEL_GRACE_S = 10.0

_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "The task for the agent."}},
    "required": ["task"],
}


def _tool_name(agent: Agent[Any, Any]) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "_", agent.name)[:64]


def _description(agent: Agent[Any, Any]) -> str:
    instructions = agent.instructions if isinstance(agent.instructions, str) else ""
    return f"Ask the agent {agent.name!r} to do a task and get its answer." + (
        f" It is instructed: {instructions[:300]}" if instructions else ""
    )


def _agents(agents: object) -> dict[str, Agent[Any, Any]]:
    if isinstance(agents, Agent):
        agents = [agents]
    if isinstance(agents, str | bytes | Mapping) or not isinstance(agents, Sequence):
        raise TypeError(
            f"serve takes a tether.Agent or a sequence of them (a list), got "
            f"{type(agents).__name__}"
        )
    named: dict[str, Agent[Any, Any]] = {}
    for agent in agents:
        if not isinstance(agent, Agent):
            raise TypeError(f"serve takes tether.Agent objects, got {type(agent).__name__}")
        name = _tool_name(agent)
        if name in named:
            raise ValueError(
                f"two agents would be served as the tool {name!r}: give them different names"
            )
        named[name] = agent
    if not named:
        raise ValueError("serve needs at least one agent")
    return named


def _error(text: str) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], is_error=True
    )


def build_server(
    agents: Agent[Any, Any] | Sequence[Agent[Any, Any]],
    *,
    runtime: RuntimeLike,
    name: str = "tether",
) -> Server[Any]:
    """The SDK's low-level ``Server`` serving ``agents`` (see the module); :func:`serve`
    runs it over stdio or wraps it in an ASGI app."""
    named = _agents(agents)
    tools = [
        mcp_types.Tool(name=key, description=_description(agent), input_schema=_TASK_SCHEMA)
        for key, agent in named.items()
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        agent = named.get(params.name)
        if agent is None:
            raise MCPError(
                code=mcp_types.INVALID_PARAMS,
                message=f"no tool named {params.name!r}; this server has {sorted(named)}",
            )
        task = (params.arguments or {}).get("task")
        if not isinstance(task, str):
            return _error(
                f"the tool {params.name!r} takes one argument, 'task' (a string), got "
                f"{params.arguments!r}"
            )
        try:
            handle = runtime.start(agent, task)
        except Exception as exc:  # a closed Runtime, a provider without its key
            return _error(f"the agent {agent.name!r} could not start: {type(exc).__name__}: {exc}")
        return await _answer(ctx, handle)

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


async def _answer(
    ctx: ServerRequestContext[Any], handle: RunHandleLike[Any]
) -> mcp_types.CallToolResult:
    """The run's answer as a tool result, its deltas as progress meanwhile; the run
    cancelled if this call is."""
    try:
        if _wants_progress(ctx):
            await _report(ctx, handle)
        result = await handle.result()
    finally:
        if not handle.done:  # the client cancelled (or the connection went away)
            handle.cancel("the MCP client cancelled the call")
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
                await handle.result()
    finished = next((e for e in reversed(result.events) if isinstance(e, ev.RunFinished)), None)
    text = finished.output if finished is not None else None
    if text is None and result.output is not None:
        text = str(result.output)
    if result.termination.ok:
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=text or "")]
        )
    why = f"the agent's run ended {result.termination.value}"
    if result.error:
        why += f": {result.error}"
    if text:
        why += f"\n{text}"
    return _error(why)


def _wants_progress(ctx: ServerRequestContext[Any]) -> bool:
    meta: Mapping[str, Any] = ctx.meta or {}
    # The SDK parses ``_meta`` into snake_case keys; the wire's name is a fallback.
    return meta.get("progress_token", meta.get("progressToken")) is not None


async def _report(ctx: ServerRequestContext[Any], handle: RunHandleLike[Any]) -> None:
    sent = 0
    async for event in handle.events(deltas=True):
        if isinstance(event, ev.TextDelta):
            message = event.text
        elif isinstance(event, ev.ToolCallStarted):
            message = f"calling {event.name}"
        else:
            continue
        sent += 1
        await ctx.session.report_progress(sent, None, message)


@overload
def serve(
    agents: Agent[Any, Any] | Sequence[Agent[Any, Any]],
    *,
    runtime: RuntimeLike,
    transport: Literal["stdio"] = ...,
    name: str = ...,
    path: str = ...,
) -> Coroutine[Any, Any, None]: ...


@overload
def serve(
    agents: Agent[Any, Any] | Sequence[Agent[Any, Any]],
    *,
    runtime: RuntimeLike,
    transport: Literal["http"],
    name: str = ...,
    path: str = ...,
) -> Starlette: ...


def serve(
    agents: Agent[Any, Any] | Sequence[Agent[Any, Any]],
    *,
    runtime: RuntimeLike,
    transport: Literal["stdio", "http"] = "stdio",
    name: str = "tether",
    path: str = "/mcp",
) -> Coroutine[Any, Any, None] | Starlette:
    """Serve ``agents`` as the tools of an MCP server named ``name`` (see the module).

    ``transport="stdio"`` returns a coroutine that serves the process's stdin and
    stdout until stdin closes (``await tether.mcp.serve([agent], runtime=rt)``);
    ``"http"`` returns an ASGI app (a Starlette app) serving streamable HTTP at
    ``path``; its lifespan runs the SDK's session manager, so it must run: uvicorn
    and hypercorn run it, and an app that mounts this one runs it in its own
    (``app.router.lifespan_context(app)``). ``runtime`` is a Runtime the caller
    has entered, in the same event loop, and keeps open while serving.
    """
    if transport not in ("stdio", "http"):
        raise ValueError(f"transport must be 'stdio' or 'http', got {transport!r}")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"path must start with '/', got {path!r}")
    server = build_server(agents, runtime=runtime, name=name)
    if transport == "http":
        return server.streamable_http_app(streamable_http_path=path)
    return _serve_stdio(server)


async def _serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


__all__ = ["CANCEL_GRACE_S", "build_server", "serve"]
