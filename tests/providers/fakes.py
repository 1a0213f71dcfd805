"""Fake model servers for the provider tests: real sockets on 127.0.0.1.

The server speaks just enough HTTP/1.1 by hand to control every byte: it
records each request (method, path, headers, raw body) and plays one scripted
:class:`Answer` per request, in order. An answer's body is a sequence of
parts, each sent in its own TCP write (with ``part_delay`` between), so a
test decides where the client's reads are split. Faults: a slow first byte, a
connection closed before the answer or in the middle of the body, malformed
bodies, error statuses with headers.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import httpx
from anyio.abc import SocketAttribute, SocketStream

from tether.providers import Message, ModelRequest, ModelResponse


@attrs.frozen(kw_only=True)
class Recorded:
    """A request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    #: Which TCP connection (0, 1, ...) carried the request.
    connection: int = 0

    def json(self) -> Any:
        return json.loads(self.body)


@attrs.frozen(kw_only=True)
class Answer:
    """One scripted HTTP answer."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    parts: tuple[bytes, ...] = ()
    #: ``Transfer-Encoding: chunked`` (each part one chunk), else ``Content-Length``.
    chunked: bool = False
    first_byte_delay: float = 0.0
    part_delay: float = 0.0
    #: Close the connection after the parts without finishing the body.
    drop: bool = False
    #: Close the connection without answering at all.
    no_answer: bool = False
    #: Declared Content-Length (default: the parts' total); lets a test lie.
    content_length: int | None = None


def json_answer(
    obj: Any, status: int = 200, headers: Sequence[tuple[str, str]] = (), **kw: Any
) -> Answer:
    body = json.dumps(obj).encode()
    return Answer(
        status=status,
        headers=(("content-type", "application/json"), *headers),
        parts=(body,),
        **kw,
    )


def raw_answer(
    body: bytes, status: int = 200, content_type: str = "application/json", **kw: Any
) -> Answer:
    return Answer(status=status, headers=(("content-type", content_type),), parts=(body,), **kw)


def sse_body(events: Iterable[tuple[str | None, Any]], *, crlf: bool = False) -> bytes:
    """Encode ``(event name or None, data)`` pairs; non-str data is JSON-encoded."""
    nl = "\r\n" if crlf else "\n"
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        lines = [f"event: {name}"] if name else []
        lines += [f"data: {line}" for line in text.split("\n")]
        out.append(nl.join(lines) + nl + nl)
    return "".join(out).encode("utf-8")


def split(body: bytes, at: Iterable[int]) -> tuple[bytes, ...]:
    """``body`` cut at the given byte offsets."""
    cuts = sorted({0, *at, len(body)})
    return tuple(body[a:b] for a, b in itertools.pairwise(cuts) if b > a)


def sse_answer(
    body: bytes,
    *,
    at: Iterable[int] = (),
    part_delay: float = 0.0,
    drop: bool = False,
    status: int = 200,
    **kw: Any,
) -> Answer:
    return Answer(
        status=status,
        headers=(("content-type", "text/event-stream; charset=utf-8"),),
        parts=split(body, at),
        chunked=True,
        part_delay=part_delay,
        drop=drop,
        **kw,
    )


@attrs.define(eq=False)
class FakeServer:
    answers: list[Answer]
    #: Serve many requests per connection (HTTP/1.1 keep-alive).
    keep_alive: bool = False
    requests: list[Recorded] = attrs.field(factory=list)
    port: int = 0
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, stream: SocketStream) -> None:
        connection = self.connections
        self.connections += 1
        async with stream:
            try:
                while True:
                    request = await _read_request(stream, connection)
                    if request is None:
                        return
                    self.requests.append(request)
                    index = len(self.requests) - 1
                    if index < len(self.answers):
                        answer = self.answers[index]
                    else:
                        answer = raw_answer(b"no answer", status=599, content_type="text/plain")
                    await _send(stream, answer, keep_alive=self.keep_alive)
                    if not self.keep_alive or answer.drop or answer.no_answer:
                        return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
                pass  # the client went away: that is some tests' point
            except OSError:
                pass


async def _read_request(stream: SocketStream, connection: int) -> Recorded | None:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        try:
            data = await stream.receive(65536)
        except anyio.EndOfStream:
            return None
        buffer += data
    head, _, body = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        body += await stream.receive(65536)
    return Recorded(method=method, path=path, headers=headers, body=body, connection=connection)


async def _send(stream: SocketStream, answer: Answer, *, keep_alive: bool = False) -> None:
    if answer.no_answer:
        return
    if answer.first_byte_delay:
        await anyio.sleep(answer.first_byte_delay)
    reason = httpx.codes.get_reason_phrase(answer.status) or "Whatever"
    head = [f"HTTP/1.1 {answer.status} {reason}"]
    head += [f"{name}: {value}" for name, value in answer.headers]
    if not keep_alive:
        head.append("connection: close")
    if answer.chunked:
        head.append("transfer-encoding: chunked")
    else:
        length = answer.content_length
        if length is None:
            length = sum(len(p) for p in answer.parts)
        head.append(f"content-length: {length}")
    await stream.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    for i, part in enumerate(answer.parts):
        if i and answer.part_delay:
            await anyio.sleep(answer.part_delay)
        if answer.chunked:
            part = f"{len(part):x}\r\n".encode() + part + b"\r\n"
        await stream.send(part)
    if answer.drop:
        return
    if answer.chunked:
        await stream.send(b"0\r\n\r\n")


@asynccontextmanager
async def fake_server(*answers: Answer, keep_alive: bool = False) -> AsyncIterator[FakeServer]:
    """A server on 127.0.0.1 (a free port) that plays ``answers`` in order."""
    server = FakeServer(answers=list(answers), keep_alive=keep_alive)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        server.port = listener.extra(SocketAttribute.local_port)
        tg.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


async def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (connections are refused)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    await listener.aclose()
    return port


# ------------------------------------------------------------ test helpers

SECRET = "sk-test-SECRET-do-not-leak-0123456789"

#: The request most provider tests send.
REQUEST = ModelRequest(system="Be brief.", messages=(Message.user("Hi"),))


def final(items: list[Any]) -> ModelResponse:
    """The one ModelResponse of a call's items, which must be the last."""
    assert isinstance(items[-1], ModelResponse)
    assert sum(isinstance(i, ModelResponse) for i in items) == 1
    return items[-1]


async def collect(
    provider: Any, request: Any, *, http: Any = None, limit: float = 5.0
) -> list[Any]:
    """Every item of one ``provider.stream`` call (bounded by ``limit`` seconds)."""
    from contextlib import aclosing

    from tether.providers import ProviderContext

    items: list[Any] = []
    with anyio.fail_after(limit):
        ctx = ProviderContext(run_id="test", call_index=0, http=http)
        async with aclosing(provider.stream(request, ctx)) as stream:
            async for item in stream:
                items.append(item)
    return items


async def failure(provider: Any, request: Any, *, http: Any = None, limit: float = 5.0) -> Any:
    """The error one ``provider.stream`` call raises (fails the test if none)."""
    _items, exc = await items_and_failure(provider, request, http=http, limit=limit)
    return exc


async def items_and_failure(
    provider: Any, request: Any, *, http: Any = None, limit: float = 5.0
) -> tuple[list[Any], Any]:
    """The items one ``provider.stream`` call yielded before the error it raised."""
    from contextlib import aclosing

    from tether.providers import ProviderContext, ProviderError

    items: list[Any] = []
    try:
        with anyio.fail_after(limit):
            ctx = ProviderContext(run_id="test", call_index=0, http=http)
            async with aclosing(provider.stream(request, ctx)) as stream:
                async for item in stream:
                    items.append(item)
    except ProviderError as exc:
        assert_no_secret(exc)
        return items, exc
    raise AssertionError(f"the provider raised nothing; it yielded {items!r}")


def assert_no_secret(exc: BaseException, secret: str = SECRET) -> None:
    """The secret is in no message of ``exc`` nor of the exceptions it chains."""
    seen: BaseException | None = exc
    while seen is not None:
        assert secret not in str(seen)
        assert secret not in repr(seen)
        seen = seen.__cause__ or seen.__context__
