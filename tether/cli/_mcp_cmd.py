"""``tether mcp-serve MODULE:AGENT...``: agents as the tools of an MCP server over stdio.

The process owns its Runtime: it is entered before the first request is read
and closed when stdin closes (runs still in flight are cancelled then). Stdout
is the protocol's; nothing else is written there. Needs the ``mcp`` extra.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from tether.cli._common import UsageError, _open_sink
from tether.cli._run_cmd import load_agent
from tether.runtime import Agent, JsonlSink, Runtime


def _cmd_mcp_serve(args: argparse.Namespace) -> int:
    try:
        from tether.mcp import serve
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    agents = [load_agent(target) for target in args.targets]
    sink = _open_sink(args.trace, "a")
    try:
        anyio.run(_serve, serve, agents, args.name, sink, backend=args.backend)
    finally:
        if sink is not None:
            sink.close()
    return 0


async def _serve(
    serve: Callable[..., Coroutine[Any, Any, None]],
    agents: list[Agent],
    name: str,
    sink: JsonlSink | None,
) -> None:
    async with Runtime(event_sink=sink) as rt:
        await serve(agents, runtime=rt, name=name)
