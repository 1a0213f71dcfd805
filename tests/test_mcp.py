"""MCP servers as tools (docs/guides/mcp.md): real servers written with the SDK, stdio and HTTP.

The servers are tests/mcp_server.py, run as subprocesses: over stdin and stdout
(``MCPServerStdio``) and over streamable HTTP on 127.0.0.1 (``MCPServerHTTP``).
Real processes and sockets run on the real clock, so these tests wait for
events, never for time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.streams.text
import pytest

pytest.importorskip("mcp")

from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION

import tether
from tether import events as ev
from tether.actors import RestartPolicy
from tether.mcp import MCPServerHTTP, MCPServerStdio
from tether.providers import (
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)

from .helpers import assert_consistent, of, task_names

pytestmark = pytest.mark.anyio

SERVER = str(Path(__file__).with_name("mcp_server.py"))


#: The protocol revisions the client is tested with: the newest stable one the SDK
#: speaks, and the previous one (the last of the ``initialize`` handshake).
REVISIONS = (LATEST_MODERN_VERSION, LATEST_HANDSHAKE_VERSION)


def stdio(*flags: str, **options: Any) -> MCPServerStdio:
    """The test server over stdio, as a fresh toolset (one connection per Runtime);
    ``"legacy"`` in ``flags``: a server of the handshake revisions only."""
    options.setdefault("name", "box")
    return MCPServerStdio(sys.executable, [SERVER, "stdio", *flags], **options)


def revision_flags(revision: str) -> tuple[str, ...]:
    """The test server's flags for a server of ``revision``."""
    return ("legacy",) if revision == LATEST_HANDSHAKE_VERSION else ()


class HttpServer:
    """The test server over streamable HTTP, in a subprocess on 127.0.0.1."""

    def __init__(self, *flags: str) -> None:
        self.port = 0
        self.flags = flags
        self.process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        """Start it (again on the same port, once it has one)."""
        process = subprocess.Popen(
            [sys.executable, SERVER, "http", str(self.port), *self.flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert process.stdout is not None
        self.port = int(process.stdout.readline())
        self.process = process

    def stop(self) -> None:
        """Kill it at once, as a crash would."""
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()
            assert process.stdout is not None
            process.stdout.close()


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    """A running HTTP MCP server, killed after the test."""
    server = HttpServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def calls(*items: Reply) -> ScriptedProvider:
    return ScriptedProvider(list(items))


def use(tool: str, /, **arguments: Any) -> Reply:
    return Reply(tool_calls=[ToolCall(name=tool, arguments=arguments)])


def finished(result: tether.RunResult) -> list[tuple[str, str, str]]:
    """(tool, outcome, content) of each tool call, in order."""
    return [(e.name, e.outcome, e.content) for e in of(result.events, ev.ToolCallFinished)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def run(agent: tether.Agent, question: str = "q") -> tether.RunResult:
    async with tether.Runtime() as rt:
        result = await rt.run(agent, question)
    assert_consistent(result)
    return result


# ---------------------------------------------------------------- listing and calls


async def test_lists_the_tools_and_calls_them_over_stdio() -> None:
    """The server's tools are listed in the tools stage and called like any tool."""
    agent = tether.Agent(
        name="a",
        provider=calls(use("add", a=2, b=3), use("echo", text="hi"), Reply(text="5")),
        tools=[stdio()],
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    (listed,) = of(result.events, ev.MCPToolsListed)
    assert listed.round == 0
    assert listed.server == "box"
    assert {"add", "echo", "fail", "slow", "picture"} <= set(listed.tools)
    # Structured content is sent as its JSON; plain text as it is.
    assert finished(result) == [("add", "ok", '{"result":5}'), ("echo", "ok", "hi")]


async def test_the_schema_is_the_servers() -> None:
    """Each tool's definition carries the input schema exactly as the server listed it."""
    seen: list[ModelRequest] = []

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        seen.append(request)
        return Reply(text="ok")

    await run(tether.Agent(name="a", provider=ScriptedProvider(script), tools=[stdio()]))
    add = next(d for d in seen[0].tools if d.name == "add")
    assert add.description == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"]
    assert add.input_schema["properties"]["a"]["type"] == "integer"


async def test_an_is_error_result_is_a_model_error_and_the_run_goes_on() -> None:
    """isError comes back to the model as model_error with the server's text."""
    agent = tether.Agent(
        name="a",
        provider=calls(use("fail", message="the disk is full"), Reply(text="sorry")),
        tools=[stdio()],
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    ((name, outcome, content),) = finished(result)
    assert (name, outcome) == ("fail", "model_error")
    assert "the disk is full" in content


async def test_bad_arguments_are_the_servers_to_judge() -> None:
    """Arguments pass through; the server's complaint reaches the model as model_error."""
    agent = tether.Agent(
        name="a",
        provider=calls(use("add", a="two"), Reply(tool_calls=[]), Reply(text="x")),
        tools=[stdio()],
    )
    result = await run(agent)
    ((_, outcome, content),) = finished(result)
    assert outcome == "model_error"
    assert "b" in content
    assert "valid integer" in content


async def test_images_are_carried_into_the_tool_result() -> None:
    """Image content becomes a tether.Image after the result's text."""
    agent = tether.Agent(
        name="a", provider=calls(use("picture"), Reply(text="red")), tools=[stdio()]
    )
    result = await run(agent)
    ((_, outcome, content),) = finished(result)
    assert outcome == "ok"
    assert content.startswith("a red pixel\n[image: image/png")
    (block,) = [b for m in result.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert block.content == "a red pixel"
    assert [i.media_type for i in block.images] == ["image/png"]


# ---------------------------------------------------------------- filter, prefix, discovery


async def test_tool_filter_and_prefix_select_and_rename() -> None:
    """Only the filtered tools are offered, under their prefixed names."""
    agent = tether.Agent(
        name="a",
        provider=calls(use("m_add", a=1, b=1), use("fail", message="x"), Reply(text="2")),
        tools=[stdio(tool_filter=["add", "echo"], prefix="m_")],
    )
    result = await run(agent)
    (listed,) = of(result.events, ev.MCPToolsListed)
    assert listed.tools == ("m_add", "m_echo")
    (added, unknown) = finished(result)
    assert added == ("m_add", "ok", '{"result":2}')
    assert unknown[1] == "model_error"
    assert "unknown tool 'fail'" in unknown[2]


async def test_a_callable_filter() -> None:
    """tool_filter may be a predicate on the server's names."""
    agent = tether.Agent(
        name="a",
        provider=calls(Reply(text="ok")),
        tools=[stdio(tool_filter=lambda name: name.startswith("e"))],
    )
    result = await run(agent)
    (listed,) = of(result.events, ev.MCPToolsListed)
    assert listed.tools == ("echo",)


async def test_discovery_searches_the_servers_tools() -> None:
    """With discovery, search_tools finds an MCP tool, which is callable from the next round."""
    agent = tether.Agent(
        name="a",
        provider=calls(
            use("search_tools", query="add two integers"),
            use("m_add", a=20, b=22),
            Reply(text="42"),
        ),
        tools=[stdio(prefix="m_")],
        discovery="first",
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    (search, added) = finished(result)
    assert search[1] == "ok"
    assert "m_add" in [t["name"] for t in json.loads(search[2])]
    assert added == ("m_add", "ok", '{"result":42}')


# ---------------------------------------------------------------- list changes


@pytest.mark.parametrize("revision", REVISIONS)
async def test_a_list_change_reaches_the_next_round(revision: str) -> None:
    """A list change (a listen stream's event at 2026-07-28, a
    notifications/tools/list_changed before): the next round offers the new catalogue."""
    offered: list[set[str]] = []

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        offered.append({d.name for d in request.tools})
        return [use("grow"), use("late", word="hi"), Reply(text="HI")][len(offered) - 1]

    agent = tether.Agent(
        name="a", provider=ScriptedProvider(script), tools=[stdio(*revision_flags(revision))]
    )
    result = await run(agent)
    assert "late" not in offered[0]
    assert "late" in offered[1]
    assert finished(result) == [("grow", "ok", "grown"), ("late", "ok", "HI")]
    first_list, second_list = of(result.events, ev.MCPToolsListed)
    assert (first_list.round, second_list.round) == (0, 2)
    assert set(second_list.tools) - set(first_list.tools) == {"late"}


# ---------------------------------------------------------------- supervision


async def test_a_server_killed_mid_call_is_transient_and_restarted() -> None:
    """The call in flight ends transient_error (not retried); the next works on a new process."""
    agent = tether.Agent(
        name="a",
        provider=calls(
            use("pid"), use("crash"), use("pid"), use("echo", text="e"), Reply(text="ok")
        ),
        tools=[stdio()],
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    (before, crashed, after, echoed) = finished(result)
    assert crashed[:2] == ("crash", "transient_error")
    assert "lost during this call" in crashed[2]
    assert "not retried" in crashed[2]
    (crash_event,) = [e for e in of(result.events, ev.ToolCallFinished) if e.name == "crash"]
    assert crash_event.attempts == 1
    assert after[1] == "ok"
    assert after[2] != before[2]
    assert echoed == ("echo", "ok", "e")
    (restarted,) = of(result.events, ev.MCPServerRestarted)
    assert restarted.server == "box"
    assert restarted.restarts == 1
    assert restarted.round > crash_event.round
    assert ev.load(json.loads(json.dumps(ev.dump(restarted)))) == restarted


async def test_past_its_restart_intensity_the_server_is_down() -> None:
    """A server that dies past its RestartPolicy fails its calls at once, transient."""
    agent = tether.Agent(
        name="a",
        provider=calls(use("crash"), use("echo", text="e"), Reply(text="gave up")),
        tools=[stdio(restart=RestartPolicy(max_restarts=0))],
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    (crashed, down) = finished(result)
    assert crashed[1] == down[1] == "transient_error"
    assert "is down" in down[2]
    assert "gave up after 0 restarts" in down[2]


async def test_a_server_that_cannot_start_ends_the_run() -> None:
    """A server that never comes up ends the run fatal_tool_error, saying which and why."""
    broken = MCPServerStdio(
        sys.executable, ["-c", "pass"], name="broken", restart=RestartPolicy(max_restarts=0)
    )
    agent = tether.Agent(name="a", provider=calls(Reply(text="never")), tools=[broken])
    result = await run(agent)
    assert result.termination is tether.Termination.FATAL_TOOL_ERROR
    assert result.error is not None
    assert "MCP server 'broken' is unavailable" in result.error
    assert result.usage.model_calls == 0


async def test_a_call_past_its_timeout_is_timeout_and_the_connection_stays() -> None:
    """timeout_s bounds each call: timeout outcome; the same server answers the next call."""
    agent = tether.Agent(
        name="a",
        provider=calls(use("pid"), use("slow", seconds=30), use("pid"), Reply(text="ok")),
        tools=[stdio(timeout_s=0.5)],
        limits=tether.Limits(max_tool_retries=0),
    )
    result = await run(agent)
    (before, slow, after) = finished(result)
    assert slow[1] == "timeout"
    assert after == before  # the same process
    assert not of(result.events, ev.MCPServerRestarted)


# ---------------------------------------------------------------- the Runtime owns it


async def test_runs_share_one_connection_and_the_runtime_closes_it() -> None:
    """Every run of a Runtime uses one connection; on exit the server process is gone."""
    box = stdio()
    agent = tether.Agent(name="a", provider=calls(use("pid"), Reply(text="ok")), tools=[box])
    async with tether.Runtime() as rt:
        results = [await rt.run(agent, "one"), await rt.run(agent, "two")]
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(rt.run, agent, "concurrent")
        pids = {finished(r)[0][2] for r in results}
        assert any(name.startswith("tether-toolset:") for name in task_names())
    assert len(pids) == 1
    assert not alive(int(pids.pop()))
    assert not any(name.startswith("tether-toolset:") for name in task_names())


async def test_a_run_cancelled_during_a_call_leaks_nothing() -> None:
    """Cancelling a run mid-call ends it cancelled; the connection serves the next run."""
    box = stdio()
    slow = tether.Agent(name="s", provider=calls(use("pid"), use("slow", seconds=30)), tools=[box])
    quick = tether.Agent(name="q", provider=calls(use("pid"), Reply(text="ok")), tools=[box])
    async with tether.Runtime() as rt:
        handle = rt.start(slow, "slow")
        async for event in handle.events():
            if isinstance(event, ev.ToolCallStarted) and event.name == "slow":
                break
        await anyio.wait_all_tasks_blocked()
        handle.cancel("the user left")
        cancelled = await handle.result()
        after = await rt.run(quick, "after")
    assert_consistent(cancelled)
    assert cancelled.termination is tether.Termination.CANCELLED
    assert finished(cancelled)[-1][:2] == ("slow", "cancelled")
    assert after.termination is tether.Termination.ANSWERED
    assert finished(after)[0][2] == finished(cancelled)[0][2]  # the same server process
    assert not alive(int(finished(after)[0][2]))


# ---------------------------------------------------------------- over HTTP


async def test_done_when_an_agent_answers_through_stdio_and_http(http_server: HttpServer) -> None:
    """An agent with a stdio server and an HTTP server answers through both."""
    agent = tether.Agent(
        name="both",
        provider=calls(
            Reply(
                tool_calls=[
                    ToolCall(name="add", arguments={"a": 2, "b": 3}),
                    ToolCall(name="web_echo", arguments={"text": "over http"}),
                ]
            ),
            Reply(text="5, over http"),
        ),
        tools=[stdio(), MCPServerHTTP(http_server.url, name="web", prefix="web_")],
        discovery="off",  # two servers' tools are past the "auto" threshold
    )
    result = await run(agent, "add 2 and 3, and echo over http")
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "5, over http"
    # The two calls run concurrently: their results come in either order.
    assert sorted(finished(result)) == [
        ("add", "ok", '{"result":5}'),
        ("web_echo", "ok", "over http"),
    ]
    assert [e.server for e in of(result.events, ev.MCPToolsListed)] == ["box", "web"]
    assert result.summary() == "Model → Tools(2) → Model → answered"


# On trio, the SDK's streamable HTTP client leaves the async generators of its
# 2025-era GET stream (httpx2's SSE reader) to the garbage collector when it
# closes: a ResourceWarning from inside the SDK, not a leak of tether's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("revision", REVISIONS)
async def test_both_revisions_over_stdio_and_http(revision: str) -> None:
    """Servers of the newest stable revision and of the previous one (2025-11-25),
    over stdio and over HTTP: the connection speaks theirs, and calls work."""
    web = HttpServer(*revision_flags(revision))
    web.start()
    try:
        agent = tether.Agent(
            name="both",
            provider=calls(
                Reply(
                    tool_calls=[
                        ToolCall(name="revision", arguments={}),
                        ToolCall(name="web_revision", arguments={}),
                    ]
                ),
                use("add", a=2, b=3),
                Reply(text="done"),
            ),
            tools=[
                stdio(*revision_flags(revision)),
                MCPServerHTTP(web.url, name="web", prefix="web_"),
            ],
            discovery="off",
        )
        result = await run(agent)
    finally:
        web.stop()
    assert result.termination is tether.Termination.ANSWERED
    assert sorted(finished(result)) == [
        ("add", "ok", '{"result":5}'),
        ("revision", "ok", revision),
        ("web_revision", "ok", revision),
    ]


async def test_an_http_server_killed_mid_call_is_reconnected(http_server: HttpServer) -> None:
    """A killed HTTP server: the call in flight is transient; the server back, calls work."""
    web = MCPServerHTTP(
        http_server.url, name="web", restart=RestartPolicy(max_restarts=10, period_s=60)
    )
    agent = tether.Agent(
        name="a",
        provider=calls(use("pid"), use("slow", seconds=30), use("pid"), Reply(text="ok")),
        tools=[web],
    )
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        async for event in handle.events():
            if isinstance(event, ev.ToolCallStarted) and event.name == "slow":
                break
        await anyio.wait_all_tasks_blocked()
        http_server.stop()
        await anyio.to_thread.run_sync(http_server.start)
        result = await handle.result()
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED
    (before, slow, after) = finished(result)
    assert slow[1] == "transient_error"
    assert "lost during this call" in slow[2]
    assert after[1] == "ok"
    assert after[2] != before[2]
    (restarted,) = of(result.events, ev.MCPServerRestarted)
    assert restarted.server == "web"


async def test_an_http_server_restarted_while_idle_is_reconnected(http_server: HttpServer) -> None:
    """The listen stream shows an idle server's death: reconnected, and list changes heard again."""
    web = MCPServerHTTP(
        http_server.url, name="web", restart=RestartPolicy(max_restarts=10, period_s=60)
    )
    rounds: list[set[str]] = []

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        rounds.append({d.name for d in request.tools})
        items = [
            use("pid"),
            use("echo", text="back"),
            use("pid"),
            use("grow"),
            use("late", word="w"),
        ]
        return (*items, Reply(text="ok"))[len(rounds) - 1]

    class Restart:
        """After round 1, the server dies and comes back on the same port."""

        async def check(self, point: str, subject: object) -> None:
            if point == "round_end" and len(rounds) == 1:
                http_server.stop()
                await anyio.to_thread.run_sync(http_server.start)

    agent = tether.Agent(
        name="a", provider=ScriptedProvider(script), tools=[web], policies=[Restart()]
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    (before, back, after, grown, late) = finished(result)
    assert back == ("echo", "ok", "back")  # the next call waited for the reconnection
    assert grown == ("grow", "ok", "grown")
    assert after[1] == "ok"
    assert after[2] != before[2]
    assert late == ("late", "ok", "W")  # the new connection's listen stream heard the change
    (restarted,) = of(result.events, ev.MCPServerRestarted)
    assert "change stream" in restarted.error


async def test_a_run_cancelled_during_an_http_call_leaks_nothing(http_server: HttpServer) -> None:
    """Over HTTP too, a cancelled call leaves the connection serving the other runs."""
    web = MCPServerHTTP(http_server.url, name="web")
    slow = tether.Agent(name="s", provider=calls(use("slow", seconds=30)), tools=[web])
    quick = tether.Agent(
        name="q", provider=calls(use("echo", text="e"), Reply(text="ok")), tools=[web]
    )
    async with tether.Runtime() as rt:
        handle = rt.start(slow, "slow")
        async for event in handle.events():
            if isinstance(event, ev.ToolCallStarted):
                break
        await anyio.wait_all_tasks_blocked()
        handle.cancel("the user left")
        cancelled = await handle.result()
        after = await rt.run(quick, "after")
    assert_consistent(cancelled)
    assert cancelled.termination is tether.Termination.CANCELLED
    assert finished(after) == [("echo", "ok", "e")]
    assert not of(after.events, ev.MCPServerRestarted)


async def test_http_headers_reach_the_server(http_server: HttpServer) -> None:
    """headers go with every request, and stay out of the server's repr."""
    web = MCPServerHTTP(http_server.url, {"X-Token": "s3cret"}, name="web")
    agent = tether.Agent(
        name="a", provider=calls(use("header", name="x-token"), Reply(text="ok")), tools=[web]
    )
    result = await run(agent)
    assert finished(result) == [("header", "ok", "s3cret")]
    assert "s3cret" not in repr(web)


# ---------------------------------------------------------------- the public call


def test_bad_configuration_fails_at_construction() -> None:
    """Mistakes in a server's configuration are TypeError/ValueError naming the fault."""
    with pytest.raises(TypeError, match="needs a command"):
        MCPServerStdio("")
    with pytest.raises(TypeError, match="args must be a sequence"):
        MCPServerStdio("python", "server.py")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="env must map str to str"):
        MCPServerStdio("python", [], {"PORT": 8000})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="http:// or https://"):
        MCPServerHTTP("127.0.0.1:8000/mcp")
    with pytest.raises(TypeError, match="tool_filter"):
        MCPServerHTTP("http://h/mcp", tool_filter="search")
    with pytest.raises(ValueError, match="prefix"):
        MCPServerHTTP("http://h/mcp", prefix="my tools.")
    with pytest.raises(ValueError, match="timeout_s"):
        MCPServerHTTP("http://h/mcp", timeout_s=0)
    box = stdio()
    with pytest.raises(ValueError, match="listed twice"):
        tether.Agent(name="a", provider=calls(), tools=[box, box])


def test_servers_go_in_tools_beside_plain_tools() -> None:
    """Agent(tools=[...]) keeps plain tools in tools and servers in toolsets."""
    box = stdio()
    agent = tether.Agent(name="a", provider=calls(), tools=[tether.tool(os.getcwd), box])
    assert [t.name for t in agent.tools] == ["getcwd"]
    assert agent.toolsets == (box,)
    assert box.label == "box"
    assert MCPServerHTTP("http://u:secret@h:8/mcp?key=k").label == "http://h:8/mcp"
    npx = MCPServerStdio("/usr/bin/npx", ["-y", "@acme/server", "--token", "t"], {"KEY": "k"})
    assert npx.label == "npx server"
    assert "KEY" not in repr(npx)


def test_the_core_does_not_import_mcp() -> None:
    """import tether works without the extra: the mcp SDK is imported by tether.mcp only."""
    code = "import sys, tether; sys.exit(any(m.split('.')[0] == 'mcp' for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---------------------------------------------------------------- bounds and orphans


HOST = str(Path(__file__).with_name("mcp_host.py"))


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an orphan's zombie may wait for
    a PID 1 that never reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def group_running(pgid: int) -> list[int]:
    """The pids of the group's processes that still run."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except FileNotFoundError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry))
    return found


async def _host(
    mode: str, anyio_backend: str, marker: Path | None = None
) -> tuple[anyio.abc.Process, int, int]:
    """A host process on the test server: it, the server's pid, the server's group.
    ``hang``: once the server is blocked in its call (it made ``marker``)."""
    host = await anyio.open_process(
        [sys.executable, HOST, anyio_backend, mode, str(marker or "-")],
        stderr=subprocess.DEVNULL,
    )
    assert host.stdout is not None
    lines = anyio.streams.text.TextReceiveStream(host.stdout)
    seen = ""
    with anyio.fail_after(60):
        async for chunk in lines:
            seen += chunk
            if "pid " in seen and seen.endswith("\n"):
                break
    (pid,) = [int(line.split()[1]) for line in seen.splitlines() if line.startswith("pid ")]
    pgid = os.getpgid(pid)
    if marker is not None:
        with anyio.fail_after(60):
            while not await anyio.Path(marker).exists():  # noqa: ASYNC110 (a file, no event)
                await anyio.sleep(0.02)
    return host, pid, pgid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_a_stdio_server_dies_with_its_host(anyio_backend: str, tmp_path: Path) -> None:
    """A host SIGKILLed while its server is blocked in a call (deaf to its stdin and to
    SIGTERM): the server, its launcher and its whole process group are gone within a
    few seconds (the launcher's parent-death signal, then SIGKILL after GRACE_S)."""
    host, pid, pgid = await _host("hang", anyio_backend, tmp_path / "stuck")
    assert running(pid)
    assert pgid == pid or pgid not in (os.getpgid(0), host.pid)  # a group of its own
    host.kill()  # SIGKILL: nothing of the host runs after this
    await host.wait()
    for _ in range(200):  # 10 s; GRACE_S (2 s) after the kernel's signal, at most
        if not group_running(pgid):
            break
        await anyio.sleep(0.05)
    assert group_running(pgid) == []
    assert not running(pid)
    await host.aclose()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_a_clean_close_leaves_no_server(anyio_backend: str) -> None:
    """A Runtime that exits closes its server: no process of the server's group is left."""
    host, pid, pgid = await _host("close", anyio_backend)
    with anyio.fail_after(30):
        assert await host.wait() == 0
    assert not running(pid)
    assert group_running(pgid) == []
    await host.aclose()


async def test_a_result_past_the_bound_is_a_model_error_and_others_go_on() -> None:
    """A 20 MB result and a small call at once on one stdio server: the big one is a
    model_error naming max_result_bytes (nothing of it in the transcript), the small one
    answers ok within a timeout the SDK's whole-line reading would have run out."""
    agent = tether.Agent(
        name="a",
        provider=calls(
            Reply(
                tool_calls=[
                    ToolCall(name="big", arguments={"megabytes": 20}),
                    ToolCall(name="echo", arguments={"text": "small"}),
                ]
            ),
            use("pid"),
            Reply(text="ok"),
        ),
        tools=[
            MCPServerStdio(
                sys.executable,
                [SERVER, "stdio", "more"],
                name="box",
                timeout_s=5,
                max_result_bytes=4_000_000,
            )
        ],
        limits=tether.Limits(max_tool_retries=0),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    done = {name: (outcome, content) for name, outcome, content in finished(result)}
    assert done["big"][0] == "model_error"
    assert "20.0 MB, past this server's max_result_bytes (4000000 bytes)" in done["big"][1]
    assert done["echo"] == ("ok", "small")
    assert done["pid"][0] == "ok"  # the same connection goes on
    assert not of(result.events, ev.MCPServerRestarted)
    assert sum(len(m.text) for m in result.messages) < 10_000


def test_an_oversized_line_is_dropped_as_it_comes() -> None:
    """The reader never holds more than the bound of one line: a 20 MB answer fed in
    64 KiB chunks becomes one error for its request id (written first, as the Python
    SDK does, or last, as the TypeScript SDK does); the next line parses."""
    import mcp_types

    from tether.mcp._mcp_stdio import RESULT_TOO_LARGE, _Lines

    for line in (
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"'
        + b"x" * 20_000_000
        + b'"}]}}\n',
        b'{"result":{"content":[{"type":"text","text":"'
        + b'"id": 3 ' * 2_000_000
        + b'"}]},"jsonrpc":"2.0","id":7}\n',
    ):
        lines = _Lines(1_000_000)
        small = b'{"jsonrpc":"2.0","id":8,"result":{"content":[]}}\n'
        out = []
        data = line + small
        for at in range(0, len(data), 65536):
            out += lines.feed(data[at : at + 65536])
            assert len(lines._buffer) <= 1_000_000
        (error, answer) = out
        assert isinstance(error.message, mcp_types.JSONRPCError)  # type: ignore[union-attr]
        assert error.message.id == 7  # type: ignore[union-attr]
        assert error.message.error.code == RESULT_TOO_LARGE  # type: ignore[union-attr]
        assert answer.message.id == 8  # type: ignore[union-attr]


def test_the_bound_is_checked() -> None:
    with pytest.raises(ValueError, match="max_result_bytes"):
        MCPServerStdio("python", max_result_bytes=0)
    with pytest.raises(ValueError, match="max_result_bytes"):
        MCPServerHTTP("http://127.0.0.1:1/mcp", max_result_bytes=True)


async def test_a_missing_program_is_named() -> None:
    """A command that is not on the server's PATH fails the connection with the
    FileNotFoundError naming it (checked before the launcher is started)."""
    missing = MCPServerStdio(
        "no-such-program-for-tether", name="nx", restart=RestartPolicy(max_restarts=0)
    )
    agent = tether.Agent(name="a", provider=calls(Reply(text="never")), tools=[missing])
    result = await run(agent)
    assert result.termination is tether.Termination.FATAL_TOOL_ERROR
    assert result.error is not None
    assert "FileNotFoundError" in result.error
    assert "no-such-program-for-tether" in result.error


#: A host that starts a launched sleeper from a thread that then ends (as trio's idle
#: worker threads do), prints the launcher's pid, and waits.
THREAD_HOST = """
import os, subprocess, sys, threading, time
started = []
def spawn():
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    launch = [sys.executable, "-I", "-S", sys.argv[1], str(os.getpid())]
    started.append(subprocess.Popen([*launch, *sleeper], start_new_session=True))
    pid = started[0].pid
    children = f"/proc/{pid}/task/{pid}/children"
    while not open(children).read().strip():  # it forks once its watch is set
        time.sleep(0.01)
thread = threading.Thread(target=spawn)
thread.start()
thread.join()
print(started[0].pid, flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_the_end_of_the_spawning_thread_is_not_the_end_of_the_host() -> None:
    """Linux's parent-death signal comes when the host's *thread* that started the
    launcher ends (trio's worker threads end when idle): the server lives on while the
    host does, and still goes when the host is SIGKILLed later (the launcher polls)."""
    from tether.mcp._mcp_stdio import LAUNCHER

    host = await anyio.open_process(
        [sys.executable, "-c", THREAD_HOST, LAUNCHER], stderr=subprocess.DEVNULL
    )
    assert host.stdout is not None
    with anyio.fail_after(30):
        launcher = int((await host.stdout.receive()).decode())
    await anyio.sleep(1)  # the signal for the thread came at once; the launcher handled it
    assert running(launcher)
    assert len(group_running(launcher)) == 2  # the launcher and its sleeper
    host.kill()
    await host.wait()
    for _ in range(200):  # 10 s; one poll (0.5 s) and GRACE_S (2 s) at most
        if not group_running(launcher):
            break
        await anyio.sleep(0.05)
    assert group_running(launcher) == []
    await host.aclose()
