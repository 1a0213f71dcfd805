"""Agents and helpers the UI endpoint tests share: a scripted model that thinks,
says something, calls ``add`` (held for approval) and answers with the sum."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx

import tether
from tests.browser import serve_asgi
from tether import events as ev
from tether.providers import (
    ModelRequest,
    ProviderContext,
    Reasoning,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)
from tether.ui import with_runtime


@tether.tool
async def add(ctx: tether.RunContext[Any], a: int, b: int) -> int:
    """Add two numbers."""
    if isinstance(ctx.deps, dict):
        ctx.deps["additions"] = ctx.deps.get("additions", 0) + 1
    return a + b


def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """Call ``add`` (or the frontend tool ``confirm`` when offered) first; then answer
    with what the tool results say."""
    results = [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]
    if results:
        last = results[-1]
        if last.is_error:
            return Reply(text=f"No sum: {last.content}")
        return Reply(text=f"The answer is {last.content}, as the tool said.")
    offered = {t.name for t in request.tools}
    if "confirm" in offered:
        return Reply(
            text="Asking you.", tool_calls=[ToolCall(name="confirm", arguments={"q": "ok?"})]
        )
    return Reply(
        text="Let me add these two numbers for you.",
        reasoning=[Reasoning(text="The user wants a sum; the add tool does sums.")],
        tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})],
    )


def ask_first(point: tether.PolicyPoint, subject: object) -> tether.Verdict | None:
    return tether.Verdict.ask("adding needs a human's yes") if point == "tool_call" else None


def make_agent(
    *, approval: bool = True, latency_s: float = 0.0, chunk_latency_s: float = 0.005
) -> tether.Agent[Any, Any]:
    provider = ScriptedProvider(
        script, latency_s=latency_s, chunk_size=4, chunk_latency_s=chunk_latency_s
    )
    return tether.Agent(
        name="adder",
        provider=provider,
        tools=[add],
        policies=[ask_first] if approval else [],
        limits=tether.Limits(timeout_s=60),
    )


class Finished:
    """An event sink that keeps the runs' starts and ends (it runs in a thread)."""

    def __init__(self) -> None:
        self.started: list[ev.RunStarted] = []
        self.finished: list[ev.RunFinished] = []
        self._cond = threading.Condition()

    def __call__(self, event: ev.Event) -> None:
        with self._cond:
            if isinstance(event, ev.RunStarted):
                self.started.append(event)
            elif isinstance(event, ev.RunFinished):
                self.finished.append(event)
                self._cond.notify_all()

    def wait(self, count: int, timeout: float = 20) -> list[ev.RunFinished]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.finished) >= count, timeout)
            return list(self.finished)


@contextmanager
def served(make_app: Any, backend: str) -> Iterator[tuple[str, tether.Runtime, Finished]]:
    """``make_app(runtime)`` served on 127.0.0.1 with a fresh Runtime open for the server's life."""
    sink = Finished()
    rt = tether.Runtime(event_sink=sink)
    with serve_asgi(with_runtime(make_app(rt), rt), backend=backend) as url:
        yield url, rt, sink


def sse_data(lines: Iterator[str]) -> Iterator[Any]:
    """The JSON of each ``data:`` line (``[DONE]`` as the string)."""
    for line in lines:
        if line.startswith("data: "):
            text = line[len("data: ") :]
            yield text if text == "[DONE]" else json.loads(text)


def post_stream(url: str, body: Any) -> tuple[httpx.Response, list[Any]]:
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url + "/", json=body) as response,
    ):
        if response.status_code != 200:
            response.read()
            return response, []
        return response, list(sse_data(response.iter_lines()))


async def call_asgi(app: Any, body: Any, *, leave_on: bytes | None = None) -> tuple[int, bytes]:
    """POST ``body`` to the ASGI ``app`` in this task (no socket): the status and the
    whole body. With ``leave_on`` the client disconnects as soon as a chunk of the
    body containing it has been sent."""
    data = json.dumps(body).encode()
    asked = False
    gone = anyio.Event()
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": data, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            return
        chunk = message.get("body", b"")
        chunks.append(chunk)
        if (leave_on is not None and leave_on in chunk) or not message.get("more_body", False):
            gone.set()

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
    }
    await app(scope, receive, send)
    return status, b"".join(chunks)


def data_of(body: bytes) -> list[Any]:
    return list(sse_data(iter(body.decode().splitlines())))
