"""Toolsets: tools a run gets from a server (MCP) instead of from functions.

A :class:`Toolset` (``tether.mcp.MCPServerStdio``, ``tether.mcp.MCPServerHTTP``)
goes in ``Agent(tools=[...])`` beside plain tools. The Runtime owns one
:class:`Connection` per toolset, in the Runtime's own task group:

- it is opened on first use (by the first run whose agent has the toolset) and
  shared by every run of that Runtime;
- it is supervised: a connection that dies (the server exits, its HTTP stream
  breaks) is reopened within the toolset's :class:`RestartPolicy`, with a short
  backoff. The call in flight at that moment ends ``transient_error`` and is
  not replayed (a tool may have side effects); calls made while it reconnects
  wait for it, within their own timeout. Past the restart intensity the
  connection is down: its calls fail at once, and the next run that needs it
  opens it anew;
- its tools are listed once per connection, and again when the server says the
  list changed; every run sees the new catalogue from its next round on;
- it is closed when the Runtime exits (a stdio server's process with it).

A run whose agent has toolsets offers their tools through :class:`RemoteTools`
(an :class:`~._discovery.ActiveTools`), which checks for a new catalogue once
per round; a run without toolsets never touches this module.

The protocol is the toolset's business (:meth:`Toolset.open` gives a
:class:`ToolsetSession`); supervision, the catalogue, ``tool_filter`` and
``prefix`` are the Runtime's.
"""

from __future__ import annotations

import abc
import math
import re
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio
import anyio.abc
import attrs

import tether.runtime._events as ev
from tether.actors import RestartPolicy, ToolArgumentsInvalid, ToolSpec, TransientToolError
from tether.providers import Backoff, ToolDef

from ._discovery import SEARCH_TOOL, ActiveTools, choose_tools
from ._limits import Termination
from ._state import Decision, RunState
from ._trail import Trail
from ._typed import TypedOutput

#: Selects a server's tools by their server-side name: a predicate, or the names.
ToolFilter = Callable[[str], bool] | Collection[str]

#: Waits between a lost connection and the next attempt (by restart number).
RESTART_BACKOFF = Backoff(initial=0.25, multiplier=2.0, cap=5.0, jitter=False)

_BAD_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


class ConnectionLost(Exception):
    """Raised by a :class:`ToolsetSession` when its connection to the server is gone."""


@attrs.frozen(kw_only=True)
class RemoteTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


class ToolsetSession(Protocol):
    """One open connection to a toolset's server."""

    async def list_tools(self) -> Sequence[RemoteTool]:
        """The server's tools, all pages."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call a tool; the result as a tether tool returns one.

        That is a ``str``, a list of ``str`` and ``tether.Image`` parts, or a
        ``ToolOutput(is_error=True)`` for a result the server marked as an
        error. Raises :class:`ConnectionLost` when the connection dies.
        """
        ...


class Signals:
    """What a session tells its connection: the tool list changed, the connection died."""

    __slots__ = ("_connection", "_session_id")

    def __init__(self, connection: Connection, session_id: int) -> None:
        self._connection = connection
        self._session_id = session_id

    def tools_changed(self) -> None:
        self._connection._tools_changed(self._session_id)

    def lost(self, why: str) -> None:
        self._connection._lose(self._session_id, why)


def _check_filter(_self: Any, _attr: Any, value: Any) -> None:
    if value is None or callable(value):
        return
    if isinstance(value, str) or not isinstance(value, Collection):
        raise TypeError(
            "tool_filter must be a callable taking a tool's name, or a collection of names "
            f"(a list, a set), got {type(value).__name__}"
        )
    for name in value:
        if not isinstance(name, str):
            raise TypeError(f"tool_filter's names must be str, got {type(name).__name__}")


def _check_prefix(_self: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"prefix must be a str, got {type(value).__name__}")
    if _BAD_NAME_CHARS.search(value):
        raise ValueError(f"prefix {value!r} may hold only letters, digits, '_' and '-'")


def _check_seconds(_self: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value is None and attr.name == "timeout_s":
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{attr.name} must be a number > 0, got {value!r}")


@attrs.frozen(kw_only=True, eq=False)
class Toolset(abc.ABC):
    """A server that lends tools to runs; the Runtime holds its connection.

    Each instance is one connection per Runtime, shared by every agent that
    lists it. ``tool_filter`` picks tools by their server-side name (a
    predicate, or a collection of names); ``prefix`` is put before each name
    the model sees (``prefix="fs_"``: ``read_file`` becomes ``fs_read_file``).
    ``timeout_s`` bounds each call (``None``: the agent's
    ``ToolSettings.default_timeout_s``); ``connect_timeout_s`` bounds opening
    the connection and listing its tools; ``restart`` bounds the reconnections.
    """

    #: Names the server in events and errors (default: from the command or URL).
    name: str | None = None
    tool_filter: ToolFilter | None = attrs.field(default=None, validator=_check_filter)
    prefix: str = attrs.field(default="", validator=_check_prefix)
    timeout_s: float | None = attrs.field(default=None, validator=_check_seconds)
    connect_timeout_s: float = attrs.field(default=30.0, validator=_check_seconds)
    restart: RestartPolicy = attrs.field(factory=RestartPolicy)

    @property
    def label(self) -> str:
        """The server's name in events and errors."""
        return self.name or self._default_name()

    @abc.abstractmethod
    def _default_name(self) -> str: ...

    @abc.abstractmethod
    def open(self, signals: Signals) -> AbstractAsyncContextManager[ToolsetSession]:
        """Connect to the server; the session lives until the context exits."""

    def selects(self, name: str) -> bool:
        """Whether ``tool_filter`` lets the server's tool ``name`` through."""
        if self.tool_filter is None:
            return True
        if callable(self.tool_filter):
            return bool(self.tool_filter(name))
        return name in self.tool_filter


def _local_name(prefix: str, name: str) -> str:
    """The name the model sees: prefixed, made valid for the providers (at most 64 chars)."""
    return _BAD_NAME_CHARS.sub("_", prefix + name)[:64] or "_"


@attrs.frozen(kw_only=True, eq=False)
class RemoteToolSpec(ToolSpec):
    """A server's tool: its schema as the server gave it, its calls sent to the server.

    The arguments are passed through as the model wrote them (they must be a
    JSON object): the server checks them against its own schema, and its
    complaint comes back to the model as a ``model_error``.
    """

    server: str = ""
    remote_name: str = ""

    def validate(self, arguments: Any) -> dict[str, Any]:
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsInvalid(
                f"invalid arguments for tool {self.name!r}: arguments must be a JSON object, "
                f"got {type(arguments).__name__}"
            )
        return {"arguments": dict(arguments)}


class Connection:
    """The Runtime's connection to one toolset's server, supervised; see the module."""

    __slots__ = (
        "_changed",
        "_closing",
        "_listing",
        "_lost",
        "_scope",
        "_session",
        "_session_id",
        "_state",
        "_tg",
        "_wake",
        "error",
        "failed",
        "generation",
        "listing",
        "name",
        "restarts",
        "specs",
        "toolset",
        "version",
    )

    def __init__(self, toolset: Toolset, tg: anyio.abc.TaskGroup) -> None:
        self.toolset = toolset
        self.name = toolset.label
        #: 1 for the first connection that came up, one more per reconnection.
        self.generation = 0
        #: One more per new catalogue.
        self.version = 0
        self.specs: tuple[RemoteToolSpec, ...] = ()
        self.listing: tuple[RemoteTool, ...] = ()
        #: Why the last connection that was up ended (``None`` until one did).
        self.error: str | None = None
        #: Why the connection is down for good (past its restart intensity), or ``None``.
        self.failed: str | None = None
        self.restarts = 0
        self._tg = tg
        self._session: ToolsetSession | None = None
        self._session_id = 0
        self._changed = False
        self._listing = False
        self._lost: str | None = None
        self._closing = False
        self._scope: anyio.CancelScope | None = None
        self._wake = anyio.Event()
        self._state = anyio.Event()  # set (and replaced) at every change of state

    # ------------------------------------------------------------ supervision

    def start(self) -> None:
        """Start (or, after it failed, restart) the supervisor in the Runtime's task group."""
        if self._scope is not None or self._closing:
            return
        self.failed = None
        self._scope = anyio.CancelScope()
        self._tg.start_soon(self._supervise, name=f"tether-toolset:{self.name}")

    def close(self) -> None:
        """Close the connection (the Runtime exits); calls still waiting fail."""
        self._closing = True
        if self.failed is None:
            self.failed = "the Runtime is closing"
        if self._scope is not None:
            self._scope.cancel(f"toolset {self.name!r}: the Runtime is closing")
        self._announce()

    async def _supervise(self) -> None:
        assert self._scope is not None
        policy = self.toolset.restart
        crashes: deque[float] = deque()
        try:
            with self._scope:
                while True:
                    generation = self.generation
                    why = await self._serve()
                    self._session = None
                    if self.generation != generation or self.error is None:
                        self.error = why  # why the last connection that was up ended
                    now = anyio.current_time()
                    while crashes and now - crashes[0] > policy.period_s:
                        crashes.popleft()
                    if len(crashes) >= policy.max_restarts:
                        self.failed = (
                            f"gave up after {len(crashes)} restarts in {policy.period_s:g}s; "
                            f"last error: {why}"
                        )
                        return
                    crashes.append(now)
                    self.restarts += 1
                    self._announce()
                    await anyio.sleep(RESTART_BACKOFF.wait(len(crashes)))
        finally:
            self._session = None
            self._scope = None
            self._announce()

    async def _serve(self) -> str:
        """One connection, from opening to its end; why it ended."""
        toolset = self.toolset
        self._session_id += 1
        self._lost, self._changed, self._wake = None, False, anyio.Event()
        timeout = toolset.connect_timeout_s
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as opening:
                async with toolset.open(Signals(self, self._session_id)) as session:
                    self._publish(await session.list_tools())
                    opening.deadline = math.inf
                    self.generation += 1
                    self._session = session
                    self._announce()
                    while self._lost is None:
                        await self._wake.wait()
                        self._wake = anyio.Event()
                        if self._changed and self._lost is None:
                            await self._relist(session)
                    self._session = None
                    return self._lost
            return f"timed out after {timeout:g}s connecting and listing the tools"
        except Exception as exc:
            return self._lost or _describe(exc)

    async def _relist(self, session: ToolsetSession) -> None:
        self._changed, self._listing = False, True
        try:
            self._publish(await session.list_tools())
        finally:
            self._listing = False
            self._announce()

    def _publish(self, listing: Sequence[RemoteTool]) -> None:
        """A new listing: a new catalogue (and version) when it differs from the last."""
        listing = tuple(listing)
        if listing == self.listing and self.version:
            return
        toolset, specs, names = self.toolset, [], set()
        for remote in listing:
            if not toolset.selects(remote.name):
                continue
            local = _local_name(toolset.prefix, remote.name)
            if local in names:
                continue  # two server names that clean to one: the first keeps it
            names.add(local)
            specs.append(self._spec(remote, local))
        self.listing, self.specs = listing, tuple(specs)
        self.version += 1

    def _spec(self, remote: RemoteTool, local: str) -> RemoteToolSpec:
        async def call(arguments: dict[str, Any]) -> Any:
            return await self.call(remote.name, arguments)

        return RemoteToolSpec(
            name=local,
            description=remote.description,
            input_schema=remote.input_schema,
            fn=call,
            is_async=True,
            timeout_s=self.toolset.timeout_s,
            server=self.name,
            remote_name=remote.name,
        )

    def _announce(self) -> None:
        state, self._state = self._state, anyio.Event()
        state.set()

    def _tools_changed(self, session_id: int) -> None:
        if session_id == self._session_id:
            self._changed = True
            self._wake.set()

    def _lose(self, session_id: int, why: str) -> None:
        if session_id == self._session_id and self._lost is None:
            self._lost = why
            self._session = None
            self._wake.set()
            self._announce()

    # ------------------------------------------------------------------ use

    async def wait_up(self) -> str | None:
        """Wait until the connection is up (``None``), or why it is down for good."""
        self.start()
        while self._session is None:
            if self.failed is not None:
                return self.failed
            await self._state.wait()
        return None

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call the server's tool ``name``; waits for a reconnection in progress."""
        while (session := self._session) is None:
            if self.failed is not None:
                raise TransientToolError(
                    f"MCP server {self.name!r} is down: {self.failed}", retry=False
                )
            await self._state.wait()
        session_id = self._session_id
        try:
            result = await session.call_tool(name, arguments)
        except ConnectionLost as exc:
            self._lose(session_id, f"connection lost: {exc}")
            raise TransientToolError(
                f"the connection to MCP server {self.name!r} was lost during this call ({exc}); "
                "the call may or may not have completed, and was not retried. "
                "The server is being restarted.",
                retry=False,
            ) from None
        # A tool that changed the tool list: its run's next round sees the new list.
        with anyio.move_on_after(self.toolset.connect_timeout_s):
            while (self._changed or self._listing) and self._session_id == session_id:
                await self._state.wait()
        return result


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ToolsetHub:
    """The Runtime's connections, one per toolset object (part of ``RuntimeServices``)."""

    __slots__ = ("_connections", "_tg")

    def __init__(self) -> None:
        self._tg: anyio.abc.TaskGroup | None = None
        self._connections: dict[int, Connection] = {}

    def bind(self, tg: anyio.abc.TaskGroup) -> None:
        """The task group the connections live in: the Runtime's."""
        self._tg = tg

    def connection(self, toolset: Toolset) -> Connection:
        """The Runtime's connection to ``toolset``, started on first use."""
        connection = self._connections.get(id(toolset))
        if connection is None:
            assert self._tg is not None, "the Runtime binds its task group on entry"
            connection = self._connections[id(toolset)] = Connection(toolset, self._tg)
        connection.start()
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()


class RemoteTools(ActiveTools):
    """A run's tools when its agent has toolsets: the catalogue follows the servers.

    At each round (:meth:`definitions`, in the ``context`` stage) it looks for a
    new catalogue or a reconnection, rebuilds what the model is offered, and
    says so in the trail (``MCPToolsListed``, ``MCPServerRestarted``). Names
    clash first come, first served: plain tools, then the servers in order.
    ``extras`` are tools offered whatever discovery does (those the run had
    chosen beside the agent's own, before the servers were connected).
    """

    __slots__ = ("_connections", "_discovery", "_extras", "_plain", "_seen", "_trail")

    def __init__(
        self,
        plain: Sequence[ToolSpec],
        connections: Sequence[Connection],
        discovery: bool,
        trail: Trail,
        extras: Mapping[str, ToolSpec] | None = None,
    ) -> None:
        self._plain, self._connections, self._discovery = plain, connections, discovery
        self._trail, self._extras = trail, dict(extras or {})
        self._seen = [(c.generation, c.version) for c in connections]
        super().__init__(self._all(), discovery)
        self.specs.update(self._extras)
        for connection in connections:
            self._listed(connection)

    def _all(self) -> list[ToolSpec]:
        specs: dict[str, ToolSpec] = {t.name: t for t in self._plain}
        for connection in self._connections:
            for spec in connection.specs:
                specs.setdefault(spec.name, spec)
        return list(specs.values())

    def _listed(self, connection: Connection) -> None:
        trail = self._trail
        tools = tuple(spec.name for spec in connection.specs)
        trail.add(ev.MCPToolsListed(**trail.head(), server=connection.name, tools=tools))

    def definitions(self) -> tuple[ToolDef, ...]:
        seen = [(c.generation, c.version) for c in self._connections]
        if seen != self._seen:
            self._refresh(seen)
        return super().definitions()

    def _refresh(self, seen: list[tuple[int, int]]) -> None:
        trail = self._trail
        for connection, (generation, version), (old_generation, old_version) in zip(
            self._connections, seen, self._seen, strict=True
        ):
            if generation != old_generation:
                trail.add(
                    ev.MCPServerRestarted(
                        **trail.head(),
                        server=connection.name,
                        restarts=connection.restarts,
                        error=connection.error or "",
                    )
                )
            if version != old_version:
                self._listed(connection)
        self._seen = seen
        every = self._all()
        if self._discovery:
            self.catalogue = every
            by_name = {spec.name: spec for spec in every}
            # search_tools and the extras stay; what a search found follows the servers.
            self.specs = {
                name: by_name.get(name, spec)
                for name, spec in self.specs.items()
                if spec is SEARCH_TOOL or name in self._extras or name in by_name
            }
        else:
            self.specs = {spec.name: spec for spec in every}
        self.specs.update(self._extras)
        self._definitions = None


class _HasToolsets(Protocol):
    @property
    def tools(self) -> Sequence[ToolSpec]: ...
    @property
    def toolsets(self) -> Sequence[Toolset]: ...
    @property
    def discovery(self) -> str: ...
    @property
    def discovery_threshold(self) -> int: ...
    @property
    def typed_output(self) -> TypedOutput | None: ...


async def offer_tools(
    agent: _HasToolsets, hub: ToolsetHub, state: RunState, trail: Trail
) -> ActiveTools | Decision:
    """The ``tools`` stage: the tools a run offers, or the decision that ends it.

    The agent's own tools and its toolsets' (:func:`connect_toolsets`), and, for
    a resumed run, those its searches had found (``state.found_tools``).
    """
    tools = choose_tools(
        agent.tools, agent.discovery, agent.discovery_threshold, agent.typed_output
    )
    state.discovery = tools.discovery
    if agent.toolsets:
        connected = await connect_toolsets(agent, hub, tools, state, trail)
        if isinstance(connected, Decision):
            return connected
        tools = connected
    if found := state.found_tools:
        tools.promote(t for t in tools.catalogue if t.name in found)
    return tools


async def connect_toolsets(
    agent: _HasToolsets, hub: ToolsetHub, chosen: ActiveTools, state: RunState, trail: Trail
) -> ActiveTools | Decision:
    """The ``tools`` of a run whose agent has toolsets (``chosen``: its plain ones).

    Waits for each server's connection (opening it on first use) and offers
    their tools beside the plain ones; discovery's ``"auto"`` counts them all.
    Tools the run had chosen beyond the agent's own (a typed output's tool,
    say) stay offered.
    A server that cannot be reached ends the run ``fatal_tool_error``.
    """
    connections = [hub.connection(toolset) for toolset in agent.toolsets]
    for connection in connections:
        why = await connection.wait_up()
        if why is not None:
            return Decision.end(
                Termination.FATAL_TOOL_ERROR,
                f"MCP server {connection.name!r} is unavailable: {why}",
            )
    total = len(agent.tools) + sum(len(c.specs) for c in connections)
    discovery = agent.discovery == "first" or (
        agent.discovery == "auto" and total > agent.discovery_threshold
    )
    state.discovery = discovery
    own = {t.name for t in agent.tools}
    extras = {n: s for n, s in chosen.specs.items() if s is not SEARCH_TOOL and n not in own}
    return RemoteTools(agent.tools, connections, discovery, trail, extras)
