"""``tether mcp-serve MODULE:AGENT...``: agents as the tools of an MCP server.

Over stdio by default; with ``--http PORT``, streamable HTTP on ``--host``
(127.0.0.1) at ``/mcp``, with uvicorn on asyncio and hypercorn on trio (port
0: a free one; the URL is the first line on stderr). The process owns its
Runtime: it is entered before the first request is read and closed when stdin
closes (or the HTTP server stops: SIGINT, SIGTERM); runs still in flight are
cancelled then. Over stdio, stdout is the protocol's; nothing else is written
there. Needs the ``mcp`` extra.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from typing import Any

import anyio
import sniffio

from tether.cli._common import UsageError, _open_sink
from tether.cli._run_cmd import load_agent
from tether.runtime import Agent, JsonlSink, Runtime


def _cmd_mcp_serve(args: argparse.Namespace) -> int:
    try:
        import tether.mcp  # noqa: F401
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if args.http is not None and args.backend == "trio":
        try:
            import hypercorn  # noqa: F401
        except ImportError:
            raise UsageError(
                "--http on trio serves with hypercorn, which is not installed: "
                "pip install hypercorn (or use --backend asyncio, served by uvicorn)"
            ) from None
    agents = [load_agent(target) for target in args.targets]
    sock = None if args.http is None else _listen(args.host, args.http)
    sink = _open_sink(args.trace, "a")
    try:
        anyio.run(_serve, agents, args.name, sink, sock, backend=args.backend)
    finally:
        if sink is not None:
            sink.close()
        if sock is not None:
            sock.close()
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that port 0 can be told (and errors are clear)."""
    try:
        sock = socket.create_server((host, port), backlog=128)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


async def _serve(
    agents: list[Agent], name: str, sink: JsonlSink | None, sock: socket.socket | None
) -> None:
    from tether.mcp import serve

    async with Runtime(event_sink=sink) as rt:
        if sock is None:
            await serve(agents, runtime=rt, name=name)
            return
        app = serve(agents, runtime=rt, name=name, transport="http")
        await _serve_http(app, sock)


def _say_where(sock: socket.socket) -> None:
    host, port = sock.getsockname()[:2]
    print(f"tether mcp-serve: http://{host}:{port}/mcp", file=sys.stderr, flush=True)


async def _serve_http(app: Any, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until SIGINT or SIGTERM: uvicorn on asyncio (its own
    signal handling), hypercorn on trio (stopped by this function's)."""
    if sniffio.current_async_library() == "trio":
        from hypercorn.config import Config
        from hypercorn.trio import serve

        config = Config()
        config.bind = [f"fd://{os.dup(sock.fileno())}"]  # hypercorn closes the one it gets
        config.loglevel = "WARNING"
        # Caught before the URL is told: a signal from then on stops the server gently.
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

            async def stopped() -> None:
                async for _ in signals:
                    return

            _say_where(sock)
            await serve(app, config, shutdown_trigger=stopped)
        return
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    _say_where(sock)
    await server.serve(sockets=[sock])
