"""The Runtime's toolset connections, against a fake server on trio's autojump clock.

These pin the supervision exactly (restart backoff and intensity, the connect
timeout, waiting calls, the call in flight at a loss, the catalogue's versions)
without the mcp SDK; tests/test_mcp.py runs the same paths against real servers.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import attrs
import pytest

import tether
from tether import events as ev
from tether.actors import RestartPolicy, TransientToolError
from tether.providers import Reply, ScriptedProvider, ToolCall
from tether.runtime import ConnectionLost, RemoteTool, Signals, Toolset, ToolsetSession
from tether.runtime._discovery import SEARCH_TOOL
from tether.runtime._toolsets import Connection, RemoteTools
from tether.runtime._trail import Trail

from .helpers import AUTOJUMP, assert_consistent, of, task_names

pytestmark = [pytest.mark.anyio, AUTOJUMP]


class FakeServer:
    """A tool server in memory: its tools, its sessions, and a kill switch."""

    def __init__(self) -> None:
        self.tools = [RemoteTool(name="echo", description="Echo.", input_schema={})]
        self.opened = 0
        self.closed = 0
        self.hang = False
        self._signals: Signals | None = None
        self._dead = anyio.Event()

    def kill(self) -> None:
        """The server dies: its session says so, and calls in flight lose it."""
        assert self._signals is not None
        self._dead.set()
        self._signals.lost("killed")

    def change(self, *names: str) -> None:
        self.tools = [RemoteTool(name=n, description=n, input_schema={}) for n in names]
        assert self._signals is not None
        self._signals.tools_changed()

    @contextlib.asynccontextmanager
    async def session(self, signals: Signals) -> AsyncIterator[ToolsetSession]:
        self.opened += 1
        if self.hang:
            await anyio.sleep_forever()
        self._signals, self._dead = signals, anyio.Event()
        try:
            yield FakeSession(self, self._dead)
        finally:
            self.closed += 1


class FakeSession:
    def __init__(self, server: FakeServer, dead: anyio.Event) -> None:
        self._server, self._dead = server, dead

    async def list_tools(self) -> Sequence[RemoteTool]:
        return list(self._server.tools)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if name == "block":
            await self._dead.wait()
        if self._dead.is_set():
            raise ConnectionLost("Connection closed")
        return f"{name} {arguments}"


@attrs.frozen(kw_only=True, eq=False)
class FakeToolset(Toolset):
    server: FakeServer = attrs.field(factory=FakeServer)

    def _default_name(self) -> str:
        return "fake"

    def open(self, signals: Signals) -> contextlib.AbstractAsyncContextManager[ToolsetSession]:
        return self.server.session(signals)


@contextlib.asynccontextmanager
async def connected(toolset: FakeToolset) -> AsyncIterator[Connection]:
    async with anyio.create_task_group() as tg:
        connection = Connection(toolset, tg)
        assert await connection.wait_up() is None
        try:
            yield connection
        finally:
            connection.close()


async def test_a_lost_connection_is_reopened_after_the_backoff() -> None:
    """Losses reopen after 0.25 s, then 0.5 s; past the intensity the server is down."""
    toolset = FakeToolset(restart=RestartPolicy(max_restarts=2, period_s=10))
    async with connected(toolset) as connection:
        assert connection.generation == 1
        for wait in (0.25, 0.5):
            start = anyio.current_time()
            toolset.server.kill()
            assert await connection.wait_up() is None
            assert anyio.current_time() - start == pytest.approx(wait)
        assert (connection.generation, connection.restarts) == (3, 2)
        toolset.server.kill()
        why = await connection.wait_up()
        assert why is not None
        assert why.startswith("gave up after 2 restarts in 10s; last error: killed")
        with pytest.raises(TransientToolError, match="is down") as down:
            await connection.call("echo", {})
        assert down.value.retry is False
    assert toolset.server.opened == toolset.server.closed == 3


async def test_restarts_outside_the_period_do_not_count() -> None:
    """The intensity counts losses within period_s only."""
    toolset = FakeToolset(restart=RestartPolicy(max_restarts=1, period_s=5))
    async with connected(toolset) as connection:
        for _ in range(3):
            toolset.server.kill()
            assert await connection.wait_up() is None
            await anyio.sleep(6)
        assert connection.restarts == 3


async def test_a_call_waits_for_the_reconnection() -> None:
    """A call made while the connection is down is served by the new one."""
    toolset = FakeToolset()
    async with connected(toolset) as connection:
        toolset.server.kill()
        start = anyio.current_time()
        assert await connection.call("echo", {"x": 1}) == "echo {'x': 1}"
        assert anyio.current_time() - start == pytest.approx(0.25)
        assert connection.generation == 2


async def test_the_call_in_flight_at_a_loss_fails_without_retry() -> None:
    """The call in flight when the connection dies is a transient error that is not retried."""
    toolset = FakeToolset()
    async with connected(toolset) as connection:
        failures: list[TransientToolError] = []

        async def call() -> None:
            try:
                await connection.call("block", {})
            except TransientToolError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.wait_all_tasks_blocked()
            toolset.server.kill()
        (failure,) = failures
        assert failure.retry is False
        assert "lost during this call" in str(failure)


async def test_opening_is_bounded_by_connect_timeout_s() -> None:
    """A server that never answers the opening fails after connect_timeout_s."""
    server = FakeServer()
    server.hang = True
    toolset = FakeToolset(server=server, connect_timeout_s=3, restart=RestartPolicy(max_restarts=0))
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        connection = Connection(toolset, tg)
        why = await connection.wait_up()
    assert why is not None
    assert "timed out after 3s connecting" in why
    assert anyio.current_time() - start == pytest.approx(3)


async def test_a_new_listing_is_a_new_version() -> None:
    """tools_changed re-lists; a listing that differs is a new catalogue, an equal one is not."""
    toolset = FakeToolset(prefix="f_", tool_filter=lambda n: n != "hidden")
    async with connected(toolset) as connection:
        assert [s.name for s in connection.specs] == ["f_echo"]
        toolset.server.change("echo", "hidden", "dotted.name")
        await anyio.wait_all_tasks_blocked()
        assert connection.version == 2
        assert [s.name for s in connection.specs] == ["f_echo", "f_dotted_name"]
        assert connection.specs[1].remote_name == "dotted.name"
        toolset.server.change("echo", "hidden", "dotted.name")
        await anyio.wait_all_tasks_blocked()
        assert connection.version == 2


@pytest.mark.parametrize("discovery", [False, True])
async def test_tools_chosen_beside_the_agents_stay_offered(discovery: bool) -> None:
    """Extras (a typed output's tool, say) are offered from the start and after a new list."""

    @tether.tool
    def final(answer: str) -> str:
        """The answer."""
        return answer

    toolset = FakeToolset()
    async with connected(toolset) as connection:
        tools = RemoteTools((), [connection], discovery, Trail("r"), {"final": final})
        first = {d.name for d in tools.definitions()}
        toolset.server.change("echo", "more")
        await anyio.wait_all_tasks_blocked()
        second = {d.name for d in tools.definitions()}
    if discovery:
        assert first == second == {SEARCH_TOOL.name, "final"}
        assert [s.name for s in tools.catalogue] == ["echo", "more"]
    else:
        assert (first, second) == ({"echo", "final"}, {"echo", "more", "final"})


async def test_a_run_sees_the_restart_and_the_new_list_at_its_next_round() -> None:
    """A run's next round has MCPServerRestarted and MCPToolsListed, and offers the new tools."""
    toolset = FakeToolset(name="fake")
    offered: list[list[str]] = []

    def script(request: Any, ctx: Any) -> Reply:
        offered.append([d.name for d in request.tools])
        if len(offered) == 1:
            return Reply(tool_calls=[ToolCall(name="echo", arguments={"n": 1})])
        return Reply(text="done")

    class Killer:
        """A policy at round_end: the server dies, and comes back with another tool."""

        async def check(self, point: str, subject: object) -> None:
            if point == "round_end" and len(offered) == 1:
                toolset.server.kill()
                toolset.server.tools.append(RemoteTool(name="new", description="", input_schema={}))
                await anyio.sleep(1)

    agent = tether.Agent(
        name="a", provider=ScriptedProvider(script), tools=[toolset], policies=[Killer()]
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert_consistent(result)
    assert offered == [["echo"], ["echo", "new"]]
    (restarted,) = of(result.events, ev.MCPServerRestarted)
    assert (restarted.round, restarted.restarts, restarted.error) == (2, 1, "killed")
    listed = of(result.events, ev.MCPToolsListed)
    assert [(e.round, e.tools) for e in listed] == [(0, ("echo",)), (2, ("echo", "new"))]


async def test_the_runtime_closes_its_connections() -> None:
    """On exit every connection's session is closed and no toolset task is left."""
    toolset = FakeToolset()
    agent = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="ok")]), tools=[toolset])
    async with tether.Runtime() as rt:
        await rt.run(agent, "one")
        await rt.run(agent, "two")
        assert toolset.server.opened == 1
    assert toolset.server.closed == 1
    assert not any(name.startswith("tether-toolset:") for name in task_names())


async def test_a_run_without_toolsets_opens_nothing() -> None:
    """An agent without toolsets never reaches the hub."""
    agent = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="ok")]))
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
        assert rt._services is not None
        assert not rt._services.toolsets._connections
    assert not of(result.events, ev.MCPToolsListed)
