"""tether's stdio transport for MCP servers: bounded messages, servers that die with us.

The SDK's ``stdio_client`` reads a server's stdout whole, line by line, in the
event loop: one 20 MB answer takes seconds of the loop (every call to that
server, and the whole process, wait behind it) and all of it reaches the
transcript. It also has no hook to tie the server's life to ours. This
transport is the same protocol (newline-delimited JSON-RPC on the server's
stdin and stdout, the SDK's message types and shutdown sequence), with two
differences:

* **A bound on each message.** A line past ``max_bytes`` is never held: its
  bytes are dropped as they arrive (keeping its first and last few hundred),
  and the request it answers gets a JSON-RPC error of code
  :data:`RESULT_TOO_LARGE` instead, found by the answer's ``"id"`` (the SDK's
  servers write it first, the TypeScript SDK's last; a line whose id cannot be
  found is dropped, and its call ends at its timeout). Other calls on the same
  server go on meanwhile.
* **The server dies with its host.** On POSIX the server runs under
  ``tether/mcp/_mcp_launch.py`` (see it): in a process group of its own, ended
  when the host process dies, even by ``SIGKILL``, within
  ``_mcp_launch.GRACE_S`` seconds. On Windows the SDK's transport is used
  (its Job Object ties the server to the host).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

#: The JSON-RPC error code of an answer past the bound (an implementation-defined
#: server error code, in the range JSON-RPC reserves for them).
RESULT_TOO_LARGE = -32090

#: The launcher a POSIX server runs under.
LAUNCHER = str(Path(__file__).with_name("_mcp_launch.py"))

#: How long a server has to exit after its stdin closes, then after SIGTERM (the SDK's).
EXIT_GRACE_S = 2.0

#: How much of an oversized line is kept to find its id, at each end.
_KEEP = 512

_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_HEAD = re.compile(rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def too_large_answer(head: bytes, tail: bytes, size: int, limit: int) -> SessionMessage | None:
    """The error that replaces an answer of ``size`` bytes past ``limit``, for the
    request whose id its ``head`` or ``tail`` holds; ``None`` if neither shows one."""
    found = _HEAD.match(head)
    if found is None:
        ids = _ID.findall(tail)
        if not ids:
            return None
        raw = ids[-1]
    else:
        raw = found.group(1)
    try:
        request_id = mcp_types.jsonrpc_message_adapter.validate_json(
            b'{"jsonrpc":"2.0","id":' + raw + b',"result":{}}'
        ).id  # type: ignore[union-attr]
    except ValueError:
        return None
    message = (
        f"the server's answer is {size / 1e6:.1f} MB, past this server's max_result_bytes "
        f"({limit} bytes): it was dropped; ask for less (a page, a summary, a filter)"
    )
    return SessionMessage(
        mcp_types.JSONRPCError(
            jsonrpc="2.0",
            id=request_id,
            error=mcp_types.ErrorData(code=RESULT_TOO_LARGE, message=message),
        )
    )


class _Lines:
    """Splits the server's stdout into lines of at most ``limit`` bytes; what a longer
    line becomes is :func:`too_large_answer`'s."""

    __slots__ = ("_buffer", "_head", "_limit", "_size", "_tail")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._head: bytes | None = None  # set while dropping an oversized line
        self._tail = bytearray()
        self._size = 0

    def feed(self, chunk: bytes) -> list[SessionMessage | Exception]:
        out: list[SessionMessage | Exception] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if self._head is not None:
                self._size += len(piece)
                self._tail += piece
                del self._tail[:-_KEEP]
            elif len(self._buffer) + len(piece) > self._limit:  # drop it from here on
                line = self._buffer + piece
                self._head, self._tail[:], self._size = (
                    bytes(line[:_KEEP]),
                    line[-_KEEP:],
                    len(line),
                )
                self._buffer.clear()
            else:
                self._buffer += piece
            if end < 0:
                return out
            if self._head is not None:
                error = too_large_answer(self._head, bytes(self._tail), self._size, self._limit)
                if error is not None:
                    out.append(error)
                self._head = None
                self._tail.clear()
            elif self._buffer.strip():
                out.append(_parse(bytes(self._buffer)))
            self._buffer.clear()
            start = end + 1


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line))
    except ValueError as exc:  # the session surfaces it, as the SDK's transport does
        return exc


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str,
    args: list[str],
    env: Mapping[str, str] | None,
    cwd: str | None,
    errlog: TextIO,
    max_bytes: int,
) -> AsyncIterator[Any]:
    """The server's (read, write) streams, for ``mcp.Client`` (see the module)."""
    if sys.platform == "win32":  # pragma: no cover
        params = StdioServerParameters(command=command, args=args, env=dict(env or {}), cwd=cwd)
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams
        return
    environment = get_default_environment() | dict(env or {})
    where = command if os.sep in command else shutil.which(command, path=environment.get("PATH"))
    if where is None or not os.access(os.path.join(cwd or "", where), os.X_OK):
        # As the SDK's spawn would say: the launcher could only say it on stderr.
        raise FileNotFoundError(errno.ENOENT, "no such program to run", command)
    process = await anyio.open_process(
        [sys.executable, "-I", "-S", LAUNCHER, str(os.getpid()), command, *args],
        env=environment,
        stderr=errlog,
        cwd=cwd,
        start_new_session=True,
    )
    # No await until the task group is entered: a cancellation there would leak it.
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert process.stdout is not None
        lines: _Lines | None = _Lines(max_bytes)
        async with to_session:
            with contextlib.suppress(
                anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream
            ):
                async for chunk in process.stdout:
                    for message in lines.feed(chunk) if lines is not None else ():
                        try:
                            await to_session.send(message)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            # Closing: keep reading (and dropping), so that a server
                            # writing to a full pipe can still see its stdin close.
                            lines = None
                            break

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the end, not a hang

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read, write
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, read, write)
            tg.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process, *streams: Any) -> None:
    """The SDK's sequence: close stdin, wait, end the group (SIGTERM, then SIGKILL)."""
    for stream in streams:
        stream.close()
    assert process.stdin is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _exited(process, EXIT_GRACE_S):
        await terminate_posix_process_tree(process, EXIT_GRACE_S)
        await _exited(process, EXIT_GRACE_S)
    assert process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()
    # Reaps it; bounded, as a child that inherited the pipes would hold the wait.
    with (
        anyio.move_on_after(EXIT_GRACE_S),
        contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError),
    ):
        await process.aclose()


async def _exited(process: anyio.abc.Process, within_s: float) -> bool:
    """Whether the process exited within ``within_s`` (its returncode, polled: waiting
    for it would also wait for the pipes, which a child that inherited them holds)."""
    for _ in range(math.ceil(within_s / 0.01)):
        if process.returncode is not None:
            return True
        await anyio.sleep(0.01)
    return process.returncode is not None


__all__ = ["LAUNCHER", "RESULT_TOO_LARGE", "stdio_transport", "too_large_answer"]
