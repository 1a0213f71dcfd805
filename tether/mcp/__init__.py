"""MCP servers as tools: ``MCPServerStdio`` and ``MCPServerHTTP`` (extra ``mcp``).

Install the extra (``pip install 'tether[mcp]'``, the official ``mcp`` SDK) and
put servers in an agent's tools beside plain ones::

    from tether.mcp import MCPServerHTTP, MCPServerStdio

    files = MCPServerStdio("python", ["files_server.py"], prefix="fs_")
    search = MCPServerHTTP("http://127.0.0.1:8000/mcp", tool_filter=["search"])
    agent = tether.Agent(name="a", provider=..., tools=[add, files, search])

The Runtime owns each server's connection (see :class:`tether.runtime.Toolset`):
opened by the first run that needs it, shared by all runs, reopened within the
server's ``restart`` policy when it dies, closed when the Runtime exits; its
tools are listed once per connection and again on
``notifications/tools/list_changed``.

What a call's result becomes:

- ``isError``: a ``model_error`` with the result's text;
- text content: the result's text (several blocks joined by newlines);
  image content: ``tether.Image`` parts after it (an image tether cannot send,
  such as an SVG, is replaced by a line saying why); other blocks (audio,
  resource links, embedded resources) by their text or their JSON;
- structured content: its JSON is the result's text (the MCP spec has servers
  repeat it as text for older clients: that copy is not sent twice);
- a lost connection: ``transient_error`` (not retried: the call may have run);
- a JSON-RPC error from the server: ``model_error`` with its message;
- past the call's timeout: ``timeout``, as for any tool;
- past the server's ``max_result_bytes`` (8 MiB by default): ``model_error``
  with :class:`MCPResultTooLarge` (over stdio the answer is dropped as it is
  read, never held: see :mod:`tether.mcp._mcp_stdio`).

A stdio server runs under :mod:`tether.mcp._mcp_launch`, which ends it (and its
process group) when the host process dies, even by ``SIGKILL``.

Arguments are passed through (they must be a JSON object): the server checks
them against its own schema, and its complaint reaches the model as a
``model_error``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import attrs

try:
    import httpx2
    import mcp_types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.client.subscriptions import Subscription, ToolsListChanged
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    from tether.mcp._mcp_stdio import RESULT_TOO_LARGE, stdio_transport
except ImportError as exc:  # tests/test_extras.py hides the SDK to check this
    raise ImportError(
        f"tether.mcp needs the MCP SDK, which is not installed ({exc}): pip install 'tether[mcp]'"
    ) from exc

from tether.actors import ToolError, ToolOutput
from tether.mcp._serve import serve
from tether.mcp._trace import tool_call_trace
from tether.providers import Image
from tether.runtime import ConnectionLost, RemoteTool, Signals, Toolset, ToolsetSession

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "MCPResultTooLarge",
    "MCPServerHTTP",
    "MCPServerStdio",
    "serve",
]

#: A tool result's bound by default (``max_result_bytes``): the provider response cap's.
DEFAULT_MAX_RESULT_BYTES = 8 * 1024 * 1024


class MCPResultTooLarge(ToolError):
    """A tool's result was past its server's ``max_result_bytes``: it was dropped, and
    the model gets this error instead (``model_error``), so it can ask for less."""


#: The JSON-RPC code the SDK gives every request a closed connection leaves unanswered.
CONNECTION_CLOSED = mcp_types.CONNECTION_CLOSED


def _str_tuple(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(
            f"args must be a sequence of strings (a list), got {type(value).__name__}: {value!r}"
        )
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"args must hold strings, got {type(item).__name__}: {item!r}")
    return tuple(value)


def _str_map(name: str, value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping of str to str, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"{name} must map str to str, got {key!r}: {item!r}")
    return dict(value)


def _env(value: object) -> dict[str, str] | None:
    return _str_map("env", value)


def _headers(value: object) -> dict[str, str] | None:
    return _str_map("headers", value)


def _check_bound(_self: Any, _attr: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_result_bytes must be a positive int of bytes, got {value!r}")


def _check_command(_self: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"MCPServerStdio needs a command (a non-empty str), got {value!r}")


def _check_url(_self: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"MCPServerHTTP needs a url (a str), got {type(value).__name__}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"MCPServerHTTP's url must be an http:// or https:// URL of the MCP endpoint "
            f"(such as http://127.0.0.1:8000/mcp), got {value!r}"
        )


@attrs.frozen(kw_only=True, eq=False)
class MCPServerStdio(Toolset):
    """An MCP server the Runtime runs as a subprocess, over its stdin and stdout.

    ``env`` is added to a small safe environment (``PATH``, ``HOME``, ...), as
    the SDK does, and kept out of reprs; the server's stderr goes to ``errlog``
    (``sys.stderr`` by default). Its default ``name`` is the program and its
    first operand (``python server.py``). Closing the connection closes the
    server's stdin, then ends the process (and its children) if it lingers;
    the host process dying ends them too (see :mod:`tether.mcp._mcp_launch`).
    ``max_result_bytes`` bounds one answer of the server (see the module).
    """

    command: str = attrs.field(kw_only=False, validator=_check_command)
    args: Sequence[str] = attrs.field(default=(), kw_only=False, converter=_str_tuple)
    env: dict[str, str] | None = attrs.field(
        default=None, kw_only=False, converter=_env, repr=False
    )
    cwd: str | None = None
    errlog: TextIO | None = attrs.field(default=None, repr=False)
    max_result_bytes: int = attrs.field(default=DEFAULT_MAX_RESULT_BYTES, validator=_check_bound)

    def _default_name(self) -> str:
        # The program and its first operand (``python server.py``), not the whole
        # command line: arguments may carry secrets, and the name goes in events.
        words = [os.path.basename(self.command)]
        words += [os.path.basename(a) for a in self.args if not a.startswith("-")][:1]
        return " ".join(words)

    def open(self, signals: Signals) -> contextlib.AbstractAsyncContextManager[ToolsetSession]:
        transport = stdio_transport(
            self.command,
            list(self.args),
            self.env,
            self.cwd,
            self.errlog or sys.stderr,
            self.max_result_bytes,
        )
        return _open(transport, signals, self.label, self.max_result_bytes)


@attrs.frozen(kw_only=True, eq=False)
class MCPServerHTTP(Toolset):
    """An MCP server at a URL, over streamable HTTP.

    ``headers`` go with every request (an ``Authorization`` header, say); they
    are not shown in reprs or events.
    """

    url: str = attrs.field(kw_only=False, validator=_check_url)
    headers: dict[str, str] | None = attrs.field(
        default=None, kw_only=False, converter=_headers, repr=False
    )
    max_result_bytes: int = attrs.field(default=DEFAULT_MAX_RESULT_BYTES, validator=_check_bound)

    def _default_name(self) -> str:
        parts = urlsplit(self.url)  # without any user:password@
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"

    def open(self, signals: Signals) -> contextlib.AbstractAsyncContextManager[ToolsetSession]:
        return _open_http(self.url, self.headers, signals, self.label, self.max_result_bytes)


@contextlib.asynccontextmanager
async def _open_http(
    url: str, headers: Mapping[str, str] | None, signals: Signals, label: str, bound: int
) -> AsyncIterator[ToolsetSession]:
    # The SDK's defaults: 30 s to connect, 300 s to read (a stream may stay open).
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=dict(headers or {}), timeout=timeout) as http,
        _open(streamable_http_client(url, http_client=http), signals, label, bound) as session,
    ):
        yield session


@contextlib.asynccontextmanager
async def _open(
    transport: Any, signals: Signals, label: str, bound: int
) -> AsyncIterator[ToolsetSession]:
    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            signals.tools_changed()
        await anyio.lowlevel.checkpoint()

    client = Client(
        _Watched(transport, signals),
        message_handler=on_message,
        cache=None,  # a list_changed must reach the server, not a cached listing
        client_info=mcp_types.Implementation(name="tether", version="0.1.0"),
    )
    async with client, contextlib.AsyncExitStack() as stack:
        changes: Subscription | None = None
        capabilities = client.server_capabilities.tools
        if (
            client.protocol_version in MODERN_PROTOCOL_VERSIONS
            and capabilities is not None
            and capabilities.list_changed
        ):
            # 2026-07-28 servers send list changes on a subscriptions/listen stream
            # (older ones send them on the session unasked, to on_message).
            with contextlib.suppress(MCPError, TimeoutError, RuntimeError):
                changes = await stack.enter_async_context(client.listen(tools_list_changed=True))
        async with anyio.create_task_group() as tg:
            if changes is not None:
                tg.start_soon(_watch, changes, signals)
            try:
                yield _MCPSession(client, label, bound)
            finally:
                tg.cancel_scope.cancel()


async def _watch(changes: Subscription, signals: Signals) -> None:
    """Follow the listen stream: a list change, or its end, which is the connection's.

    Over streamable HTTP nothing else shows that an idle server went away (the
    next request to a restarted server would just work, but no change would
    ever be heard of again): reconnecting listens again, and re-lists.
    """
    try:
        async for event in changes:
            if isinstance(event, ToolsListChanged):
                signals.tools_changed()
    except Exception as exc:  # SubscriptionLost: the stream broke
        signals.lost(f"the server's change stream broke ({_short(exc)})")
        return
    signals.lost("the server closed its change stream")


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


class _MCPSession:
    """A connected ``mcp.Client`` as a :class:`ToolsetSession`."""

    __slots__ = ("_bound", "_client", "_label")

    def __init__(self, client: Client, label: str, bound: int) -> None:
        self._client = client
        self._label = label
        self._bound = bound

    async def list_tools(self) -> Sequence[RemoteTool]:
        tools: list[RemoteTool] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang the connection
            page = await self._client.list_tools(cursor=cursor)
            tools += [
                RemoteTool(
                    name=t.name,
                    description=t.description or t.title or "",
                    input_schema=t.input_schema or {"type": "object"},
                )
                for t in page.tools
            ]
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            async with tool_call_trace():
                result = await self._client.call_tool(name, arguments)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise ConnectionLost(exc.message) from None
            if exc.code == RESULT_TOO_LARGE:  # tether's stdio transport dropped it
                raise MCPResultTooLarge(f"MCP server {self._label!r}: {exc.message}") from None
            raise ToolError(f"MCP server {self._label!r}: {exc.message}") from None
        except (OSError, httpx2.TransportError, anyio.BrokenResourceError) as exc:
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from None
        return _result(result, self._label, self._bound)


def _result(result: mcp_types.CallToolResult, label: str, bound: int) -> Any:
    """An MCP tool result as a tether tool's return value (see the module), at most
    ``bound`` bytes of text and images (else :class:`MCPResultTooLarge`)."""
    size = _size(result)
    if size > bound:
        raise MCPResultTooLarge(
            f"MCP server {label!r}: the result is {size / 1e6:.1f} MB, past this server's "
            f"max_result_bytes ({bound} bytes): it was dropped; ask for less (a page, a "
            "summary, a filter)"
        )
    texts: list[str] = []
    images: list[Image] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            try:
                data = base64.b64decode(block.data, validate=True)
                images.append(Image.from_bytes(data, block.mime_type))
            except (ValueError, TypeError, binascii.Error) as exc:
                texts.append(f"[an image the server sent ({block.mime_type}) was left out: {exc}]")
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            texts.append(block.resource.text)
        else:
            texts.append(_json(block.model_dump(mode="json", by_alias=True, exclude_none=True)))
    if result.is_error:
        return ToolOutput(content="\n".join(texts) or "the tool failed", is_error=True)
    if result.structured_content is not None:
        texts = [_json(result.structured_content)]
    text = "\n".join(texts)
    if images:
        return [text, *images]
    return text


def _size(result: mcp_types.CallToolResult) -> int:
    """About the bytes a result's content would take in the transcript (its text, its
    images' base64), without building it: a cheap check before the work."""
    size = 0
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            size += len(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            size += len(block.data)
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            size += len(block.resource.text)
        else:
            size += len(block.model_dump_json())
    if result.structured_content is not None:
        size = max(size, len(_json(result.structured_content)))
    return size


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _Watched:
    """A transport whose read stream reports its end: the connection died.

    The SDK answers the requests a closed connection leaves pending, but does
    not say when an idle one closed (a stdio server that exited): this does.
    """

    __slots__ = ("_inner", "_signals")

    def __init__(self, inner: Any, signals: Signals) -> None:
        self._inner = inner
        self._signals = signals

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return _WatchedRead(read, self._signals), write

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc, tb)
        return result


class _WatchedRead:
    __slots__ = ("_inner", "_signals")

    def __init__(self, inner: Any, signals: Signals) -> None:
        self._inner = inner
        self._signals = signals

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._signals.lost("the server closed the connection")
            raise

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
