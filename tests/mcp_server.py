"""A small MCP server for the tests, written with the SDK's own server API.

``python tests/mcp_server.py stdio [more] [legacy]`` serves it over stdin and stdout
(``more``: with the tools ``stuck`` and ``big`` too);
``python tests/mcp_server.py http [PORT] [legacy]`` over streamable HTTP on 127.0.0.1
(port 0: an ephemeral one), printing the port on the first line of stdout.
``legacy``: the server speaks only the handshake revisions (2025-11-25 and before):
its ``server/discover`` names none of the 2026-07-28 ones, so clients fall back
to ``initialize``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
    b"\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84"
    b"\x00\x00\x00\x00IEND\xaeB`\x82"
)

server = MCPServer("testbox", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool(structured_output=False)
def pid() -> str:
    """The server process's id."""
    return str(os.getpid())


@server.tool()
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(message)


@server.tool(structured_output=False)
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "slept"


async def stuck(seconds: float, marker: str) -> str:
    """Block the whole server (its event loop, not only this call), deaf to its stdin
    and to SIGTERM, once the file ``marker`` is made."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(marker, "w"):  # noqa: ASYNC230 (blocking on purpose)
        pass
    time.sleep(seconds)  # noqa: ASYNC251 (blocking on purpose)
    return "unstuck"


def big(megabytes: float) -> str:
    """A text result of ``megabytes`` million characters."""
    return "x" * int(megabytes * 1_000_000)


@server.tool(structured_output=False)
def revision(ctx: Context) -> str:
    """The protocol revision of the connection this call came on."""
    return str(ctx.request_context.protocol_version)


@server.tool(structured_output=False)
def traceparent(ctx: Context) -> str:
    """The ``traceparent`` of this call's ``_meta`` ("" when it has none)."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("traceparent", ""))


@server.tool(structured_output=False)
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header ("" over stdio, or when absent)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return "" if headers is None else str(headers.get(name, ""))


@server.tool()
def crash() -> str:
    """The server process exits in the middle of this call."""
    os._exit(3)


@server.tool(structured_output=False)
def picture() -> list[object]:
    """A one-pixel PNG with a caption."""
    return ["a red pixel", Image(data=PNG, format="png")]


@server.tool(structured_output=False)
async def grow(ctx: Context) -> str:
    """Add the tool ``late`` and tell the client the list changed."""

    def late(word: str) -> str:
        """A tool added while the server runs."""
        return word.upper()

    server.add_tool(late, structured_output=False)
    await ctx.notify_tools_changed()  # 2026-07-28 clients: their listen stream
    with contextlib.suppress(Exception):  # older clients: a notification on the session
        await ctx.request_context.session.send_tool_list_changed()
    return "grown"


async def _serve_http(port: int, legacy: bool) -> None:
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()  # connections wait in the backlog until uvicorn takes them
    print(sock.getsockname()[1], flush=True)
    app = server.streamable_http_app()
    config = uvicorn.Config(_legacy_http(app) if legacy else app, log_level="warning")
    await uvicorn.Server(config).serve(sockets=[sock])


def _legacy_http(app: Any) -> Any:
    """``app`` refusing 2026-07-28 requests as a server of 2025-11-25 would (HTTP 400)."""

    async def legacy(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"mcp-protocol-version", b"") in MODERN:
                await send({"type": "http.response.start", "status": 400, "headers": []})
                await send({"type": "http.response.body", "body": b"unsupported version"})
                return
        await app(scope, receive, send)

    return legacy


MODERN = {v.encode() for v in MODERN_PROTOCOL_VERSIONS}


async def _serve_legacy_stdio() -> None:
    """The handshake-only loop: a server/discover before initialize is refused."""
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read, write), lowlevel.lifespan(lowlevel) as state:
        await serve_loop(
            lowlevel,
            read,
            write,
            lifespan_state=state,
            init_options=lowlevel.create_initialization_options(),
        )


if __name__ == "__main__":
    legacy = "legacy" in sys.argv[2:]
    if legacy:
        sys.argv.remove("legacy")
    if "more" in sys.argv[2:]:  # tools some tests add (more would change discovery for all)
        server.add_tool(stuck, structured_output=False)
        server.add_tool(big, structured_output=False)
    if sys.argv[1:2] == ["http"]:
        anyio.run(_serve_http, int(sys.argv[2]) if len(sys.argv) > 2 else 0, legacy)
    elif legacy:
        anyio.run(_serve_legacy_stdio)
    else:
        server.run()
