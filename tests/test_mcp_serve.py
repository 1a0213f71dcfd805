"""tether.mcp.serve: tether agents as the tools of an MCP server, called by the SDK's client.

Over stdio (``tether mcp-serve``, a process that owns its Runtime) and over
streamable HTTP (the ASGI app, served by hypercorn in the test's own loop, so
the serving Runtime's events and tasks can be looked at), with both protocol
revisions: the 2026-07-28 per-request envelope (``mode="auto"``) and the
2025-11-25 handshake (``mode="legacy"``).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.streams.text
import anyio.to_thread
import pytest

pytest.importorskip("mcp")
pytest.importorskip("hypercorn")

import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tether
from tether import events as ev
from tether.mcp import MCPServerStdio, serve
from tether.mcp._serve import build_server
from tether.otel import OtelSink, combine
from tether.providers import Reply, ScriptedProvider, ToolCall

from . import mcp_served
from .helpers import task_names

pytestmark = pytest.mark.anyio

SERVED = str(Path(__file__).with_name("mcp_served.py"))
SERVER = str(Path(__file__).with_name("mcp_server.py"))

#: The client's connect mode and the revision it ends up speaking.
MODES = [
    pytest.param("auto", LATEST_MODERN_VERSION, id="2026-07-28"),
    pytest.param("legacy", LATEST_HANDSHAKE_VERSION, id="2025-11-25"),
]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def served_http(app: Any, backend: str) -> AsyncIterator[str]:
    """Serve ``app`` with hypercorn in this loop on 127.0.0.1; yield the MCP endpoint's URL."""
    from hypercorn.config import Config

    if backend == "trio":
        from hypercorn.trio import serve as hypercorn_serve
    else:
        from hypercorn.asyncio import serve as hypercorn_serve  # type: ignore[assignment]
    port = _free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    config.graceful_timeout = 1.0
    done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: hypercorn_serve(app, config, shutdown_trigger=done.wait))
        with anyio.fail_after(20):
            while True:
                try:
                    await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                    break
                except OSError:
                    await anyio.sleep(0.01)  # polls the listening socket, asserts nothing
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            done.set()


def tasks_now() -> set[str]:
    """The tasks running now, but sse-starlette's shutdown watcher: on asyncio it starts
    one per event loop, the first time an SSE response is made, to live as long as
    the loop (not a task of a call's)."""
    names = task_names()
    with contextlib.suppress(RuntimeError):  # not on asyncio
        import asyncio

        names -= {
            t.get_name()
            for t in asyncio.all_tasks()
            if getattr(t.get_coro(), "__name__", "") == "_shutdown_watcher"
        }
    return names


class Finished:
    """An event sink that keeps each run's ``RunFinished``; it runs in the Runtime's
    sink thread, and reaches the test's loop as a thread does."""

    def __init__(self) -> None:
        self.runs: list[ev.RunFinished] = []
        self.token = anyio.lowlevel.current_token()
        self.came = anyio.Event()

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunFinished):
            self.runs.append(event)
            anyio.from_thread.run_sync(self.came.set, token=self.token)

    async def wait_for(self, count: int) -> None:
        """Until ``count`` runs have finished."""
        with anyio.fail_after(20):
            while len(self.runs) < count:
                await self.came.wait()
                self.came = anyio.Event()


async def call_and_cancel(client: Client) -> list[str]:
    """Call ``waiter`` and cancel the call once its run is in its tool; the progress."""
    messages: list[str] = []
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        if message == "calling hang":
            started.set()

    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await client.call_tool("waiter", {"task": "wait"}, progress_callback=on_progress)

        tg.start_soon(call)
        with anyio.fail_after(20):
            await started.wait()
        tg.cancel_scope.cancel()
    return messages


async def call_echo(client: Client, task: str) -> tuple[mcp_types.CallToolResult, list[float], str]:
    """Call ``echo``; its result, the progress values and the progress text joined."""
    progress: list[float] = []
    texts: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        texts.append(message or "")

    result = await client.call_tool("echo", {"task": task}, progress_callback=on_progress)
    return result, progress, "".join(texts)


def text_of(result: mcp_types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, mcp_types.TextContent)
    return block.text


# ---------------------------------------------------------------- done when


@pytest.mark.parametrize(("mode", "revision"), MODES)
async def test_done_when_the_sdk_client_calls_an_agent_over_stdio(
    anyio_backend: str, mode: str, revision: str, tmp_path: Path
) -> None:
    """Over stdio (``tether mcp-serve``): the tools, a result with its progress, and a
    cancel that ends the run cancelled; closing stdin ends the server."""
    trace = tmp_path / "served.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "tether",
            "mcp-serve",
            f"{SERVED}:echo",
            f"{SERVED}:waiter",
            "--backend",
            anyio_backend,
            "--trace",
            str(trace),
        ],
    )
    async with Client(params, mode=mode) as client:
        assert client.protocol_version == revision
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["echo", "waiter"]
        assert listed.tools[0].input_schema["required"] == ["task"]
        result, progress, text = await call_echo(client, "hello over stdio")
        assert not result.is_error
        assert text_of(result) == "echo: hello over stdio"
        assert text == "echo: hello over stdio"  # the deltas, joined
        assert progress == sorted(set(progress))  # increasing, as the spec wants
        messages = await call_and_cancel(client)
        assert messages[-1] == "calling hang"
        # The connection goes on after a cancel.
        again, _, _ = await call_echo(client, "again")
        assert text_of(again) == "echo: again"
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    finished = [e for e in events if "termination" in e and "usage" in e]
    assert [e["termination"] for e in finished] == ["answered", "cancelled", "answered"]
    assert finished[1]["error"] == "the MCP client cancelled the call"


#: On trio the SDK's streamable HTTP client leaves async generators of its SSE
#: streams (httpx2's) to the garbage collector when it closes, against some
#: servers (hypercorn here): a ResourceWarning from inside the client, not a task
#: or run of the server's.
SDK_CLIENT_GENERATORS = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning"
)


@SDK_CLIENT_GENERATORS
@pytest.mark.parametrize(("mode", "revision"), MODES)
async def test_done_when_the_sdk_client_calls_an_agent_over_http(
    anyio_backend: str, mode: str, revision: str
) -> None:
    """Over streamable HTTP (the ASGI app): a result with its progress, and a cancel
    that ends the run cancelled; the server leaks no task."""
    before = tasks_now()
    finished = Finished()
    async with tether.Runtime(event_sink=finished) as rt:
        app = serve([mcp_served.echo(), mcp_served.waiter()], runtime=rt, transport="http")
        async with served_http(app, anyio_backend) as url, Client(url, mode=mode) as client:
            assert client.protocol_version == revision
            result, progress, text = await call_echo(client, "hello over http")
            assert text_of(result) == "echo: hello over http"
            assert text == "echo: hello over http"
            assert progress
            await call_and_cancel(client)
            await finished.wait_for(2)
            assert rt.running == 0
    assert [(f.termination.value, f.error) for f in finished.runs] == [
        ("answered", None),
        ("cancelled", "the MCP client cancelled the call"),
    ]
    assert tasks_now() - before == set()


# ---------------------------------------------------------------- what maps to what


@pytest.fixture
def client_of() -> Any:
    """An in-process SDK client of ``build_server(agents)`` on a Runtime."""

    @contextlib.asynccontextmanager
    async def make(*agents: tether.Agent) -> AsyncIterator[Client]:
        async with tether.Runtime() as rt, Client(build_server(agents, runtime=rt)) as client:
            yield client

    return make


async def test_a_run_that_fails_is_an_error_result(client_of: Any) -> None:
    """A run that does not end ok is a result with isError saying how it ended."""
    async with client_of(mcp_served.failing()) as client:
        result = await client.call_tool("failing", {"task": "x"})
    assert result.is_error
    assert text_of(result).startswith("the agent's run ended provider_failed: ")


async def test_bad_calls_get_clear_answers(client_of: Any) -> None:
    """An unknown tool is a JSON-RPC error; a call without a string task an error result."""
    async with client_of(mcp_served.echo()) as client:
        with pytest.raises(MCPError, match=r"no tool named 'nope'"):
            await client.call_tool("nope", {"task": "x"})
        result = await client.call_tool("echo", {"text": "x"})
        assert result.is_error
        assert "takes one argument, 'task'" in text_of(result)
        # Without a progress callback, the answer alone.
        plain = await client.call_tool("echo", {"task": "quiet"})
        assert text_of(plain) == "echo: quiet"


async def test_a_closed_runtime_is_an_error_result() -> None:
    """A call on a Runtime that is closed gets an error result, not a crash."""
    rt = tether.Runtime()
    async with Client(build_server(mcp_served.echo(), runtime=rt)) as client:
        result = await client.call_tool("echo", {"task": "x"})
    assert result.is_error
    assert "could not start" in text_of(result)


def test_bad_configuration_fails_at_once() -> None:
    """What serve refuses, with the reason."""
    rt = tether.Runtime()
    with pytest.raises(ValueError, match="at least one agent"):
        serve([], runtime=rt)
    with pytest.raises(TypeError, match=r"tether\.Agent"):
        serve("echo", runtime=rt)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"tether\.Agent objects"):
        serve([object()], runtime=rt)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="different names"):
        serve([mcp_served.echo(), mcp_served.echo()], runtime=rt)
    with pytest.raises(ValueError, match="transport must be"):
        serve(mcp_served.echo(), runtime=rt, transport="ws")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="path must start"):
        serve(mcp_served.echo(), runtime=rt, transport="http", path="mcp")
    coroutine = serve(mcp_served.echo(), runtime=rt)
    coroutine.close()  # stdio: a coroutine to await


# ---------------------------------------------------------------- trace context


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@SDK_CLIENT_GENERATORS
async def test_a_served_run_continues_the_callers_trace(
    anyio_backend: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """The caller's traceparent (params._meta): the served run's span is in its trace,
    a child of the caller's span."""
    provider, exporter = spans
    async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
        app = serve(mcp_served.echo(), runtime=rt, transport="http")
        async with served_http(app, anyio_backend) as url, Client(url) as client:
            meta: Any = {"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01"}
            await client.call_tool("echo", {"task": "traced"}, meta=meta)
    (run,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert run.context is not None
    assert run.parent is not None
    assert f"{run.context.trace_id:032x}" == TRACE_ID
    assert f"{run.parent.span_id:016x}" == SPAN_ID


@pytest.mark.parametrize("flags", [(), ("legacy",)], ids=["2026-07-28", "2025-11-25"])
async def test_a_call_to_an_mcp_tool_carries_the_runs_trace(
    spans: tuple[TracerProvider, InMemorySpanExporter], flags: tuple[str, ...]
) -> None:
    """tether calling an MCP tool: the request's traceparent is the tool call's span."""
    provider, exporter = spans
    agent = tether.Agent(
        name="tracer",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="traceparent", arguments={})]), Reply(text="ok")]
        ),
        tools=[MCPServerStdio(sys.executable, [SERVER, "stdio", *flags], name="box")],
    )
    async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
        result = await rt.run(agent, "q")
    (call,) = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    (tool,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool traceparent"]
    assert tool.context is not None
    version, trace_id, parent_id, _flags = call.content.split("-")
    assert (version, trace_id, parent_id) == (
        "00",
        f"{tool.context.trace_id:032x}",
        f"{tool.context.span_id:016x}",
    )


async def test_without_otel_no_traceparent_is_sent() -> None:
    """No OtelSink and no current span: the request carries no traceparent."""
    agent = tether.Agent(
        name="plain",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="traceparent", arguments={})]), Reply(text="ok")]
        ),
        tools=[MCPServerStdio(sys.executable, [SERVER, "stdio"], name="box")],
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    (call,) = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    assert call.content == ""


class HeldAtToolCall:
    """An event sink that holds the sink thread at a ``ToolCallStarted`` until released:
    a sink after it (an ``OtelSink``) follows the run but has not opened the call's span."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.ToolCallStarted):
            self.reached.set()
            self.release.wait(30)


async def test_a_run_cancelled_while_its_call_waits_for_its_span_leaks_nothing(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Cancelled while the MCP call waits for the OtelSink to open its span (the sink
    thread is behind): the run ends cancelled, the server was never called, and
    nothing is left running."""
    provider, _ = spans
    held = HeldAtToolCall()
    agent = tether.Agent(
        name="held",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="traceparent", arguments={})]), Reply(text="ok")]
        ),
        tools=[MCPServerStdio(sys.executable, [SERVER, "stdio"], name="box")],
    )
    before = task_names()
    try:
        async with tether.Runtime(event_sink=combine(held, OtelSink(provider))) as rt:
            handle = rt.start(agent, "q")
            await anyio.to_thread.run_sync(held.reached.wait, 30)
            await anyio.wait_all_tasks_blocked()  # the call waits in its worker thread
            handle.cancel()
            result = await handle.result()
            held.release.set()  # before the Runtime waits for its sink to catch up
    finally:
        held.release.set()
    assert result.termination is tether.Termination.CANCELLED
    (call,) = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    assert call.outcome == "cancelled"
    assert task_names() == before


@SDK_CLIENT_GENERATORS
async def test_mcp_serve_over_http_from_the_command_line(anyio_backend: str) -> None:
    """``tether mcp-serve --http 0``: the URL on stderr, calls answered there (uvicorn
    on asyncio, hypercorn on trio), and SIGINT ends the process (killed, if not, so
    that a hang fails here rather than at the test's timeout)."""
    command = [sys.executable, "-m", "tether", "mcp-serve", "--http", "0"]
    command += [f"{SERVED}:echo", "--backend", anyio_backend]
    async with await anyio.open_process(command, stderr=subprocess.PIPE) as process:
        assert process.stderr is not None
        lines = anyio.streams.text.TextReceiveStream(process.stderr)
        first = ""
        with anyio.fail_after(30):
            async for chunk in lines:
                first += chunk
                if "\n" in first:
                    break
        prefix, _, url = first.partition("\n")[0].partition(": ")
        assert prefix == "tether mcp-serve"
        async with Client(url) as client:
            result, _, _ = await call_echo(client, "over the command line")
        assert text_of(result) == "echo: over the command line"
        process.send_signal(signal.SIGINT)
        with anyio.move_on_after(20):
            await process.wait()
        if process.returncode is None:
            process.kill()
            pytest.fail("the server did not stop on SIGINT")
    assert process.returncode in (0, 130)  # hypercorn stops quietly; uvicorn re-raises
