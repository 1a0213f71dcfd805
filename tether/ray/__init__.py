"""Runs across processes and machines, on Ray (see docs/guides/ray.md; extra ``ray``).

::

    from tether.ray import RayRuntime

    async with RayRuntime(hosts=4, store=PostgresRunStore(dsn), agents=[planner]) as rt:
        handle = rt.start(planner, "...")        # the Runtime's interface
        async for event in handle.events(deltas=True):
            ...
        result = await handle.result()

A :class:`RayRuntime` has the :class:`tether.Runtime` interface. Behind it,
each **host** is an async Ray actor (its own process, wherever Ray places it)
running a tether ``Runtime`` on asyncio (:mod:`tether.ray._host`). Ray does
the placement, the restarts and the transport; tether builds no cluster of
its own.

* **Placement.** A run goes to the least-loaded live host (the runs each
  host reports in flight, refreshed twice a second, plus those sent since).
  The runs of one conversation go to one host while it lives, so they keep
  their order. ``start(..., host=i)`` pins a run.
* **What travels.** The agents (with their tools) go to each host once, with
  its construction or with its first run of that agent (cloudpickle). A
  provider travels without its API key and reads it from the host's own
  environment; each host has its own HTTP connection pools. A store travels as
  its settings and opens its own connections. Deps travel with each run.
  Results and events come back in tether's JSON forms.
* **The caller** may be on asyncio or trio. A handle waiting on a host holds
  no thread: it waits on the Ray object's future (:mod:`tether.ray._bridge`).
  Following runs is one long poll per host for all the caller's streams there
  (``_Feed``, :meth:`Host.feed`), each answer a compact batch.
* **Failover.** With a run store shared by the hosts (``SQLiteRunStore`` on
  one machine, ``PostgresRunStore`` on many), the runs of a host that dies
  are resumed by the surviving hosts (or by the host Ray restarts) from their
  last checkpoint, once their lease (``lease_s``) expires (see docs/guides/durable.md).
  Whatever the death (SIGKILL, with or without a restart by Ray; SIGSTOP; a lost
  node), the caller gives up on the host itself (``_probe``), so
  no wait depends on Ray noticing.
  Handles keep working: ``result()`` returns the resumed run's result, and an
  event stream goes on with the resumed run's ``RunResumed`` seam. The events
  the dead host had emitted after its last checkpoint (the round in flight,
  which is done again) were not stored: a stream that had shown them rewinds
  to the seam, whose ``seq`` follows the last stored event. So the trail
  stays gap-free, and a reader that keeps events by ``seq`` replaces those
  of the round done again. Without a shared store a dead host's runs end
  ``crashed``, with the reason.
* **Fleet-wide limits** (:mod:`tether.ray._fleet`). ``limits=`` is a token
  and cost budget over all hosts, which lease slices of it from one ledger
  actor; a 429 with retry-after pauses that endpoint on every host; and
  ``provider_concurrency`` is per endpoint across the fleet (each host gets
  an equal share).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Generic

import anyio
import attrs
from anyio.abc import TaskGroup

try:
    import ray
    import ray.exceptions
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("tether.ray needs Ray: pip install 'tether[ray]'") from exc

from tether import events as ev
from tether.providers import Message, ModelSettings
from tether.ray._bridge import HostGone, Watch, wait_ref
from tether.ray._host import Host, HostConfig, HostInfo, Kind, Open, Status
from tether.ray._local import LocalCluster
from tether.runtime import (
    Agent,
    BudgetExhausted,
    ConversationStore,
    DepsT,
    InMemoryConversationStore,
    Limits,
    OutputT,
    PendingApproval,
    RunInput,
    RunNotFound,
    RunResult,
    RunStore,
    RuntimeClosed,
    Termination,
    Usage,
    check_start,
    stored_result,
)

#: The errors that mean a host's process is gone (or restarting), or that the caller
#: gave up on it (it did not answer in time, or a new process answered: see ``_probe``).
HOST_LOST: tuple[type[BaseException], ...] = (
    ray.exceptions.RayActorError,
    ray.exceptions.ActorUnavailableError,
    HostGone,
)

#: How long one long poll (a feed's, a result collector's) waits on its host for news.
POLL_S = 10.0
#: How often the caller asks each host what it reports (load, liveness).
MONITOR_S = 0.5
#: How long requests made just before a RayRuntime exits may take to reach their hosts.
REQUESTS_S = 5.0
#: How long a host may take to start (its process, its Runtime).
HOST_START_S = 60.0
#: How often a handle whose run is between hosts looks for it again.
RELOCATE_S = 0.25


def shares(hosts: int, provider_concurrency: int) -> list[int]:
    """Each host's share of the fleet's ``provider_concurrency`` per endpoint."""
    share, extra = divmod(provider_concurrency, hosts)
    return [share + (1 if i < extra else 0) for i in range(hosts)]


def _check_arguments(
    hosts: object,
    provider_concurrency: object,
    store: object,
    conversations: object,
    limits: object,
    address: object,
    host_timeout_s: object,
) -> None:
    """``RayRuntime(...)``'s arguments that need a check of their own."""
    if not isinstance(host_timeout_s, int | float) or not host_timeout_s > 0:
        raise ValueError(
            f"RayRuntime(host_timeout_s=...) must be a number > 0, got {host_timeout_s!r}"
        )
    if not isinstance(hosts, int) or hosts < 1:
        raise ValueError(f"RayRuntime(hosts=...) must be a positive int, got {hosts!r}")
    if not isinstance(provider_concurrency, int) or provider_concurrency < hosts:
        raise ValueError(
            "RayRuntime(provider_concurrency=...) is per endpoint over all hosts, so it "
            f"must be an int >= hosts ({hosts}), got {provider_concurrency!r}"
        )
    if store is not None and not isinstance(store, RunStore):
        raise TypeError(
            "RayRuntime(store=...) must be a tether.RunStore that every host reaches "
            f"(tether.SQLiteRunStore, tether.postgres.PostgresRunStore), got {store!r}"
        )
    if isinstance(conversations, InMemoryConversationStore):
        raise ValueError(
            "RayRuntime(conversations=...) must be a store every host reaches "
            "(tether.SQLiteConversationStore, tether.postgres.PostgresConversationStore); "
            "an InMemoryConversationStore would be a separate copy on each host"
        )
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"RayRuntime(limits=...) must be a tether.Limits, got {limits!r}")
    if address is not None and not isinstance(address, str):
        raise TypeError(f"RayRuntime(address=...) must be None or a str, got {address!r}")


class RayRuntime:
    """The :class:`tether.Runtime` interface over ``hosts`` Ray actors (see the module):
    a :class:`tether.RuntimeLike`, whose start-time checks are ``Runtime``'s
    (:func:`tether.runtime.check_start`).

    ``address``: ``None`` uses the Ray of this process, starting a local
    cluster if there is none (stopped again on exit); ``"auto"`` or
    ``"ray://..."`` connects to a running cluster. ``ray_init`` are more
    keyword arguments for ``ray.init``; ``host_options`` are the host actors'
    Ray options (``num_cpus=1`` by default, so Ray spreads hosts over
    machines; ``max_restarts``: how often Ray restarts a host that died).
    ``host_timeout_s``: how long a host may leave the caller's probe (twice a
    second) unanswered before the caller gives up on it, as on a host Ray
    reports dead or one Ray restarted (see ``_probe``).

    ``store``, ``agents``, ``lease_s`` are the hosts' durable side
    (docs/guides/durable.md): every host resumes the runs whose owner died. ``conversations``
    must be a store every host reaches (SQLite or PostgreSQL). ``limits``
    is a budget over all hosts; ``provider_concurrency`` is per endpoint over
    all hosts; ``max_concurrent_runs`` and ``tool_threads`` are per host.
    """

    def __init__(
        self,
        *,
        hosts: int = 2,
        store: RunStore | None = None,
        agents: Sequence[Agent[Any, Any]] = (),
        address: str | None = None,
        limits: Limits | None = None,
        conversations: ConversationStore | None = None,
        max_concurrent_runs: int | None = None,
        provider_concurrency: int = 64,
        tool_threads: int = 32,
        shutdown_grace_s: float = 10.0,
        lease_s: float = 30.0,
        max_restarts: int = 5,
        host_timeout_s: float = 5.0,
        host_options: dict[str, Any] | None = None,
        ray_init: dict[str, Any] | None = None,
    ) -> None:
        _check_arguments(
            hosts, provider_concurrency, store, conversations, limits, address, host_timeout_s
        )
        self.host_timeout_s = float(host_timeout_s)
        self._agents: dict[str, Agent[Any, Any]] = {}
        for agent in agents:
            self._know(agent)
        self.store = store
        self.address = address
        self.limits = limits
        self.lease_s = lease_s
        self._n = hosts
        self._ray_init = dict(ray_init or {})
        self._host_options = {"num_cpus": 1, "max_restarts": max_restarts} | dict(
            host_options or {}
        )
        self._config = [
            HostConfig(
                agents=tuple(self._agents.values()),
                store=store,
                conversations=conversations,
                lease_s=lease_s,
                max_concurrent_runs=max_concurrent_runs,
                provider_concurrency=share,
                tool_threads=tool_threads,
                shutdown_grace_s=shutdown_grace_s,
                limits=limits,
            )
            for share in shares(hosts, provider_concurrency)
        ]
        self.conversations = conversations
        self._hosts: list[Any] = []
        self._config_refs: list[Any] = []
        #: Per host: its waits, which the monitor gives up on when it loses the host.
        self._watches: list[Watch] = []
        self._infos: list[HostInfo | None] = []
        self._sent: list[int] = []
        #: Per host: handles waiting for their result, a collector running, its cursor.
        #: Per host: the results of the runs started there, as they end.
        self._results: list[_Results] = []
        #: Per host: the streams this caller follows there, served by one long poll.
        self._feeds: list[_Feed] = []
        self._shipped: list[set[str]] = []
        self._sticky: dict[str, int] = {}
        self._coordinator: Any = None
        self._tg: TaskGroup | None = None
        #: The local cluster this RayRuntime started (and stops), if it started one.
        self._cluster: LocalCluster | None = None
        #: The handles callers hold, by run id (``rt.handle(id)`` returns the same one).
        self._handles: weakref.WeakValueDictionary[str, RayRunHandle[Any]] = (
            weakref.WeakValueDictionary()
        )
        #: Handles whose start is not sent yet (see :meth:`start`).
        self._outbox: deque[RayRunHandle[Any]] = deque()
        self._ids = itertools.count(1)
        self._prefix = os.urandom(3).hex()
        self._budget_spent = False
        self._forgotten: set[str] = set()
        self._requests = 0
        self._watch: anyio.CancelScope | None = None

    def _know(self, agent: Agent[Any, Any]) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"RayRuntime wants tether.Agents, got {agent!r}")
        if self._agents.setdefault(agent.name, agent) is not agent:
            raise ValueError(
                f"two different agents are named {agent.name!r}: hosts find agents by "
                "name, so names must be unique in a RayRuntime"
            )

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> RayRuntime:
        if self._tg is not None:
            raise RuntimeError("this RayRuntime is already running")
        if self.store is not None:  # a store that cannot be used fails here, not per run
            await self.store.claimable(limit=1)
        if not ray.is_initialized():
            cluster = LocalCluster(self._init_ray, ray.shutdown)
            await cluster.start()
            self._cluster = cluster
        try:
            await self._open_hosts()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._teardown(graceful=False)
            raise
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._watch = anyio.CancelScope()
        tg.start_soon(self._monitor, name="tether-ray-monitor")
        return self

    async def _open_hosts(self) -> None:
        """Make the host actors and wait until each has opened its Runtime."""
        actor = ray.remote(Host)
        options = {"max_concurrency": 100_000, "max_task_retries": 0} | self._host_options
        if self.limits is not None:
            from tether.ray._fleet import Coordinator

            self._coordinator = (
                ray.remote(Coordinator)
                .options(num_cpus=0)
                .remote(self.limits, self._n, self.lease_s)
            )
            self._config = [attrs.evolve(c, coordinator=self._coordinator) for c in self._config]
        # Each host is made with its index only, and gets its config by a call, as does
        # every process Ray restarts it in (see Host.configure); the configs stay in the
        # object store while the fleet lives.
        self._config_refs = [ray.put(config) for config in self._config]
        self._hosts = [actor.options(**options).remote(i) for i in range(self._n)]
        self._watches = [Watch() for _ in range(self._n)]
        self._infos = [None] * self._n
        self._last: list[HostInfo | None] = [None] * self._n
        self._sent = [0] * self._n
        self._results = [_Results(self, i) for i in range(self._n)]
        self._feeds = [_Feed(self, i) for i in range(self._n)]
        self._shipped = [set(self._agents) for _ in range(self._n)]
        for i in range(self._n):  # the first host that cannot start fails the RayRuntime
            await _probe(self, i, strict=True)

    def _init_ray(self) -> None:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if self.address is None:
            # Logical CPUs: each host asks for one (host_options), wherever it runs.
            kwargs["num_cpus"] = max(os.cpu_count() or 1, self._n)
        else:
            kwargs["address"] = self.address
        ray.init(**(kwargs | self._ray_init))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg = self._tg
        assert tg is not None
        assert self._watch is not None
        self._watch.cancel()
        # Requests made just before the exit (a cancel, an approval) reach their host.
        with anyio.move_on_after(REQUESTS_S):
            while self._requests:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(None, None, None)
        finally:
            self._tg = None
            with anyio.CancelScope(shield=True):
                await self._teardown(graceful=exc_type is None)
        return None

    async def _teardown(self, *, graceful: bool = True) -> None:
        """Close every live host's Runtime (its runs get the shutdown grace), then kill
        the actors (a host that is lost, or does not close in time, is only killed)."""
        grace = self._config[0].shutdown_grace_s if graceful else 0.0

        async def close(i: int, host: Any) -> None:
            with contextlib.suppress(Exception), anyio.move_on_after(grace + self.host_timeout_s):
                await wait_ref(host.close.remote(graceful), self._watches[i])

        async with anyio.create_task_group() as tg:
            for i, host in enumerate(self._hosts):
                if self._infos[i] is not None:
                    tg.start_soon(close, i, host)
        for host in [*self._hosts, self._coordinator]:
            if host is not None:
                with contextlib.suppress(Exception):
                    ray.kill(host, no_restart=True)
        self._hosts, self._coordinator, self._config_refs = [], None, []
        if self.store is not None:
            await self.store.aclose()
        if self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            await cluster.stop()

    async def _monitor(self) -> None:
        """One watcher per host (a host that does not answer delays no other's), and the
        fleet budget's state."""
        assert self._watch is not None
        with self._watch:
            async with anyio.create_task_group() as tg:
                for i in range(self._n):
                    tg.start_soon(self._watch_host, i, name=f"tether-ray-watch-{i}")
                while True:
                    await anyio.sleep(MONITOR_S)
                    if self._coordinator is not None and self.limits is not None:
                        with contextlib.suppress(*HOST_LOST):
                            self._budget_spent = await wait_ref(self._coordinator.spent.remote())

    async def _watch_host(self, i: int) -> None:
        while True:
            await anyio.sleep(MONITOR_S)
            await _probe(self, i)

    def _gone(self, info: HostInfo) -> None:
        """A host's process died: the ledger counts its unreported grant as spent."""
        if self._coordinator is not None and info.owner not in self._forgotten:
            self._forgotten.add(info.owner)
            self._coordinator.forget.remote(info.owner)

    # ------------------------------------------------------------------ placement

    def _pick(self, conversation: str | None) -> int:
        if conversation is not None:
            i = self._sticky.get(conversation)
            if i is not None and self._infos[i] is not None:
                return i
        live = [i for i, info in enumerate(self._infos) if info is not None]
        if not live:
            live = list(range(self._n))  # all restarting: Ray queues the call
        i = min(live, key=lambda j: (self._load(j), j))
        if conversation is not None:
            self._sticky[conversation] = i
        return i

    def _load(self, i: int) -> int:
        info = self._infos[i]
        return (info.running if info is not None else 0) + self._sent[i]

    def _spawn(self, job: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run a request (a cancel, an approval, the starts) in the RayRuntime's tasks."""
        if self._tg is None:
            raise RuntimeClosed("use the RayRuntime inside 'async with RayRuntime() as rt:'")
        self._requests += 1

        async def request() -> None:
            try:
                await job()
            finally:
                self._requests -= 1

        self._tg.start_soon(request)

    async def _locate(self, run_id: str) -> int | None:
        """The host that has run ``run_id`` in flight (or its result), if any."""
        found: list[int] = []

        async def ask(i: int, host: Any) -> None:
            with contextlib.suppress(*HOST_LOST), anyio.move_on_after(self.host_timeout_s):
                if await wait_ref(host.has.remote(run_id), self._watches[i]):
                    found.append(i)

        async with anyio.create_task_group() as tg:
            for i, host in enumerate(self._hosts):
                if self._infos[i] is not None:
                    tg.start_soon(ask, i, host)
        return found[0] if found else None

    # ------------------------------------------------------------------ runs

    def new_run_id(self) -> str:
        return f"run-{self._prefix}-{next(self._ids)}"

    def start(
        self,
        agent: Agent[DepsT, OutputT],
        input: RunInput,
        *,
        run_id: str | None = None,
        settings: ModelSettings | None = None,
        deps: DepsT = None,  # type: ignore[assignment]
        history: Sequence[Message] | None = None,
        conversation: str | None = None,
        host: int | None = None,
    ) -> RayRunHandle[OutputT]:
        """Start a run on the least-loaded host (or on ``host``) and return its handle at once.

        The arguments are those of :meth:`tether.Runtime.start`, checked here, so
        bad ones raise here as they would there.
        """
        if self._tg is None:
            raise RuntimeClosed("use the RayRuntime inside 'async with RayRuntime() as rt:'")
        # The checks of every runtime; the run is sent with its arguments as given.
        check_start(
            agent,
            input,
            settings=settings,
            deps=deps,
            history=history,
            conversation=conversation,
            conversations=self.conversations,
        )
        self._know(agent)
        if self._budget_spent:
            raise BudgetExhausted("the RayRuntime's budget is spent (limits=... over all hosts)")
        if host is not None and (not isinstance(host, int) or not 0 <= host < self._n):
            raise ValueError(
                f"start(host=...) must be a host index in [0, {self._n}), got {host!r}"
            )
        run_id = run_id or self.new_run_id()
        if run_id in self._handles and not self._handles[run_id].done:
            raise ValueError(f"a run with id {run_id!r} is already in flight")
        options: dict[str, Any] = {}
        for name, value in (
            ("settings", settings),
            ("deps", deps),
            ("history", history),
            ("conversation", conversation),
        ):
            if value is not None:
                options[name] = value
        i = self._pick(conversation) if host is None else host
        self._sent[i] += 1
        handle = RayRunHandle[OutputT](self, run_id, agent, i)
        handle._starting = (input, options)
        handle._early = []
        # Sent at the next checkpoint, so that streams asked for right after start()
        # are opened with the run and miss none of its text; in start order.
        if not self._outbox:
            self._spawn(self._flush)
        self._outbox.append(handle)
        self._handles[run_id] = handle
        return handle

    async def _flush(self) -> None:
        """Send the starts made since the last checkpoint: one call per host, in order."""
        outbox = self._outbox
        batches: dict[int, list[RayRunHandle[Any]]] = {}
        while outbox:
            handle = outbox.popleft()
            assert handle._host is not None
            batches.setdefault(handle._host, []).append(handle)
        for i, handles in batches.items():
            self._send_starts(i, handles)

    def _send_starts(self, i: int, handles: Sequence[RayRunHandle[Any]]) -> None:
        shipped = self._shipped[i]
        items = []
        for handle in handles:
            agent, (input, options) = handle._agent, handle._starting or (None, {})
            assert agent is not None
            extra = None if agent.name in shipped else agent
            shipped.add(agent.name)
            follows = [stream._kind for stream in handle._early or ()]
            items.append(
                (handle.run_id, agent.name, input, options, extra, follows, handle._submit)
            )
        ref = self._hosts[i].start_many.remote(items)
        for n, handle in enumerate(handles):
            handle._host, handle._start_ref, handle._early = i, (ref, n), None
            handle._started_on = i
            handle._sent.set()

    async def run(
        self,
        agent: Agent[DepsT, OutputT],
        input: RunInput,
        *,
        run_id: str | None = None,
        settings: ModelSettings | None = None,
        deps: DepsT = None,  # type: ignore[assignment]
        history: Sequence[Message] | None = None,
        conversation: str | None = None,
    ) -> RunResult[OutputT]:
        """Run ``agent`` on a host and return its result; cancelling the caller cancels it."""
        handle = self.start(
            agent,
            input,
            run_id=run_id,
            settings=settings,
            deps=deps,
            history=history,
            conversation=conversation,
        )
        try:
            return await handle.result()
        finally:
            if not handle.done:
                handle.cancel("the caller of RayRuntime.run() was cancelled")

    async def submit(
        self,
        agent: Agent[DepsT, OutputT],
        input: RunInput,
        *,
        run_id: str | None = None,
        settings: ModelSettings | None = None,
        deps: DepsT = None,  # type: ignore[assignment]
        history: Sequence[Message] | None = None,
        conversation: str | None = None,
        host: int | None = None,
    ) -> RayRunHandle[OutputT]:
        """Start a run as :meth:`start` does, and return its handle once the run store
        has its record (the host submits it: :meth:`tether.Runtime.submit`); from then
        on any host or Runtime on the store finds it. Without a store it returns at
        once, as :meth:`start` does. An error of the start (an id the store has
        already, say) raises here."""
        handle = self.start(
            agent,
            input,
            run_id=run_id,
            settings=settings,
            deps=deps,
            history=history,
            conversation=conversation,
            host=host,
        )
        if self.store is not None:
            handle._submit = True  # before the next checkpoint, when the start is sent
            await handle._started()
        return handle

    def handle(self, run_id: str) -> RayRunHandle[Any]:
        """A handle on run ``run_id``: started by this RayRuntime, on any host, or in the store."""
        known = self._handles.get(run_id)
        if known is not None:
            return known
        if self._tg is None:
            raise RuntimeClosed("use the RayRuntime inside 'async with RayRuntime() as rt:'")
        return RayRunHandle[Any](self, run_id, None, None)

    async def approve(self, run_id: str, call_id: str) -> None:
        """Let a held tool call run, wherever the run is (in flight, or parked in the store)."""
        await self.handle(run_id)._call("answer", call_id, True, None)

    async def reject(self, run_id: str, call_id: str, reason: str = "rejected") -> None:
        """Refuse a held tool call (see :meth:`approve`); the model gets ``reason``."""
        await self.handle(run_id)._call("answer", call_id, False, reason)

    async def pending_approvals(self, run_id: str) -> list[PendingApproval]:
        """The held calls of run ``run_id``, wherever it is."""
        return await self.handle(run_id).pending_approvals()

    # ------------------------------------------------------------------ the fleet

    @property
    def running(self) -> int:
        """Runs in flight over all hosts, as last reported (plus those sent since)."""
        return sum(self._load(i) for i in range(self._n))

    @property
    def hosts(self) -> list[HostInfo | None]:
        """Each host as last reported (``None``: dead or restarting)."""
        return list(self._infos)

    def host_actor(self, index: int) -> Any:
        """The Ray actor handle of host ``index`` (to inspect it, or to kill it in a test)."""
        return self._hosts[index]

    async def budget(self) -> FleetBudget | None:
        """The fleet's budget (``None`` without ``limits=``): the ledger's account, and
        each live host's slice (its contacts with the ledger, its crossings)."""
        if self._coordinator is None:
            return None
        ledger: dict[str, Any] = await wait_ref(self._coordinator.status.remote())
        slices: list[dict[str, Any] | None] = []
        for i, host in enumerate(self._hosts):
            try:
                slices.append(await wait_ref(host.budget.remote(), self._watches[i]))
            except HOST_LOST:
                slices.append(None)
        return FleetBudget(ledger=ledger, hosts=slices)


async def _probe(rt: RayRuntime, i: int, *, strict: bool = False) -> None:
    """Ask host ``i`` of ``rt`` who it is and how loaded; configure a new process of it.

    The host is *lost* when Ray says it died, when it does not answer within
    ``host_timeout_s`` (stopped, cut off, or restarting: Ray may think it alive),
    or when a new process answers (Ray restarted it): every wait on it is given up
    (:class:`~tether.ray._bridge.Watch`), so its handles look for their runs again
    (in the store, on another host, or they end ``crashed`` without a store), and it
    is placed on no more until it answers again.
    """
    host = rt._hosts[i]
    old = rt._last[i]  # as last heard from, even if it has not answered since
    try:
        with anyio.fail_after(HOST_START_S if strict else rt.host_timeout_s):
            info: HostInfo | None = await wait_ref(host.info.remote())
            fresh = info is None
            if info is None:  # a new process, not configured yet
                info = await wait_ref(host.configure.remote(rt._config_refs[i], rt._hosts))
    except Exception as exc:
        if strict:
            raise RuntimeError(f"RayRuntime: host {i} did not start: {exc!r}") from exc
        rt._infos[i] = None  # placed on no more (a slow host comes back)
        rt._watches[i].give_up()
        if isinstance(exc, HOST_LOST) and old is not None:
            rt._gone(old)
        return
    assert info is not None
    rt._last[i] = info
    if old is not None and (fresh or old.started_at != info.started_at):  # a new process
        rt._watches[i].give_up()  # its waits were on runs this process never had
        rt._shipped[i] = {a.name for a in rt._config[i].agents}
        rt._gone(old)
    rt._infos[i], rt._sent[i] = info, 0


class _Results:
    """The results of the runs started on one host, as they end: one long poll
    (:meth:`Host.done`) for all of them, while some handle waits for one."""

    def __init__(self, rt: RayRuntime, index: int) -> None:
        self.rt, self.index = rt, index
        self.waiting: dict[str, RayRunHandle[Any]] = {}
        self.polling = False
        #: Where the next poll asks from, in the numbering of the host process ``epoch``
        #: (a restarted host numbers anew: a cursor of an older process counts as none).
        self.cursor = 0
        self.epoch: float | None = None

    async def wait(self, handle: RayRunHandle[Any]) -> None:
        """Until the host has sent the run's result (or was lost)."""
        last = self.rt._last[self.index]
        if last is not None and handle._epoch is not None and last.started_at != handle._epoch:
            return  # started in an earlier process of this host: not there any more
        if self.epoch is None:
            self.epoch = handle._epoch  # a host of another epoch answers at once
        self.waiting[handle.run_id] = handle
        if not self.polling:
            self.polling = True
            self.rt._spawn(self._poll)
        await handle._delivered.wait()

    async def _poll(self) -> None:
        rt, waiting = self.rt, self.waiting
        host, watch = rt._hosts[self.index], rt._watches[self.index]
        try:
            while waiting:
                try:
                    batch, self.cursor, self.epoch = await wait_ref(
                        host.done.remote(self.cursor, self.epoch, POLL_S), watch
                    )
                except HOST_LOST:
                    self.cursor = 0
                    for handle in waiting.values():
                        handle._delivered.set()  # no result from there: they look for it
                    waiting.clear()
                    return
                for run_id, status, data, agent in batch:
                    found = waiting.pop(run_id, None) or rt._handles.get(run_id)
                    if found is None:
                        continue  # nobody holds its handle any more
                    if found._result is None and status == "finished":
                        found._result = RunResult.load(data, found._output_type(agent))
                    found._delivered.set()
                # A run started in an earlier process of this host (Ray restarted it)
                # is not in this one: its handle looks for it (in the store, or crashed).
                for run_id, handle in list(waiting.items()):
                    if handle._epoch is not None and handle._epoch != self.epoch:
                        del waiting[run_id]
                        handle._delivered.set()
        finally:
            self.polling = False


class _Feed:
    """The streams this caller follows on one host, served by one long poll
    (:meth:`Host.feed`) for all of them: a stream's cursor is opened by the next
    call (or, while one is in flight, by a one-way ``feed_open`` that makes the
    host answer at once), and each answer brings every stream's new events in one
    compact JSON batch. A lost host (``HOST_LOST``) sends every stream to look for
    its run again, as a poll of its own would have."""

    def __init__(self, rt: RayRuntime, index: int) -> None:
        self.rt, self.index = rt, index
        self.generation = 0
        self.id = f"{rt._prefix}-{index}-0"
        self.streams: dict[int, RayEventStream] = {}
        #: Cursors asked for and not answered yet, by key; and those not sent yet.
        self.opening: dict[int, RayEventStream] = {}
        self.opens: list[tuple[Open, RayEventStream]] = []
        self.closes: list[int] = []
        self.keys = itertools.count(1)
        self.running = self.in_flight = self.sending = False

    def open(self, stream: RayEventStream, spec: tuple[str | None, Kind, int, int]) -> None:
        self.opens.append(((next(self.keys), *spec), stream))
        if not self.running:
            self.running = True
            self.rt._spawn(self._loop)
        elif self.in_flight and not self.sending:
            self.sending = True
            self.rt._spawn(self._send)  # at the next checkpoint: the opens asked by then

    def close(self, fid: int) -> None:
        if self.streams.pop(fid, None) is None:
            return
        if not self.running:
            self.rt._hosts[self.index].unfollow.remote(fid)
            return
        self.closes.append(fid)  # with the next call
        if self.in_flight and not self.sending:
            self.sending = True
            self.rt._spawn(self._send)

    async def _send(self) -> None:
        """The opens and closes asked for while a call is in flight, in one one-way call."""
        self.sending = False
        if self.in_flight and (self.opens or self.closes):
            specs = self._take_opens()
            closes, self.closes = self.closes, []
            self.rt._hosts[self.index].feed_open.remote(self.id, specs, closes)
        # (else the loop sends them with its next call, or as it ends)

    def _take_opens(self) -> list[Open]:
        opens, self.opens = self.opens, []
        for spec, stream in opens:
            self.opening[spec[0]] = stream
        return [spec for spec, _ in opens]

    async def _loop(self) -> None:
        rt = self.rt
        try:
            while self.streams or self.opening or self.opens:
                specs = self._take_opens()
                closes, self.closes = self.closes, []
                self.in_flight = True
                try:
                    raw = await wait_ref(
                        rt._hosts[self.index].feed.remote(self.id, specs, closes, POLL_S),
                        rt._watches[self.index],
                    )
                except Exception:  # HOST_LOST, or a host that failed: look again
                    self._lose()
                    continue
                finally:
                    self.in_flight = False
                opened, updates = json.loads(raw)
                for key, fid in opened:
                    stream = self.opening.pop(key, None)
                    if stream is None:
                        continue
                    if fid is not None and stream._over:  # closed meanwhile
                        self.closes.append(fid)
                        continue
                    if fid is not None:
                        self.streams[fid] = stream
                    stream._opened(fid)
                for fid, status, items in updates:
                    found = self.streams.get(fid)
                    if found is None:
                        continue
                    if status != "live":
                        del self.streams[fid]
                    found._deliver(items, status)
            if self.closes:  # streams closed since the last call, none left to follow
                closes, self.closes = self.closes, []
                rt._hosts[self.index].feed_open.remote(self.id, [], closes)
        finally:
            self.running = False
            self._lose()  # none left, unless the loop was cancelled (the RayRuntime exits)

    def _lose(self) -> None:
        """The host was lost: every stream looks for its run again; a new feed id."""
        streams, opening = list(self.streams.values()), list(self.opening.values())
        self.streams, self.opening, self.closes = {}, {}, []
        if streams or opening:
            self.generation += 1
            self.id = f"{self.rt._prefix}-{self.index}-{self.generation}"
        for stream in opening:
            stream._opened(None)
        for stream in streams:
            stream._deliver([], "moved")


@attrs.frozen
class FleetBudget:
    """:meth:`RayRuntime.budget`: the ledger's status and each host's slice, as dicts
    (``LedgerStatus`` and ``SliceStatistics`` of :mod:`tether.runtime`)."""

    ledger: dict[str, Any]
    #: Per host index; ``None`` for a host that is dead or restarting.
    hosts: list[dict[str, Any] | None]


class RayRunHandle(Generic[OutputT]):
    """A run of a :class:`RayRuntime`: a :class:`tether.RunHandleLike`, as a
    :class:`tether.RunHandle` is. The handle follows its run across hosts (see the module).
    """

    def __init__(
        self, rt: RayRuntime, run_id: str, agent: Agent[Any, Any] | None, host: int | None
    ) -> None:
        self._rt, self.run_id, self._agent, self._host = rt, run_id, agent, host
        #: The start call's reply and this run's place in it, until the host has taken it.
        self._start_ref: tuple[Any, int] | None = None
        self._starting: tuple[Any, dict[str, Any]] | None = None
        #: Started by :meth:`RayRuntime.submit`: the host replies once it is recorded.
        self._submit = False
        #: Streams made before the start was sent (they open with the run), or ``None``.
        self._early: list[RayEventStream] | None = None
        self._sent = anyio.Event()
        #: The host the run was started on: it sends the result when the run ends there.
        self._started_on: int | None = None
        #: Set by the collector when the run's host has sent its result (or was lost).
        self._delivered = anyio.Event()
        #: The cursors the host opened with the run (for the early streams).
        self._fids: list[int] = []
        #: The epoch (``started_at``) of the host process that took the start.
        self._epoch: float | None = None
        #: A host had the run once (so losing it means the run crashed with its host).
        self._found = agent is not None
        if agent is None:
            self._sent.set()
        self._start_error: BaseException | None = None
        self._result: RunResult[OutputT] | None = None
        #: The kept events any of this handle's streams has read, in order.
        self._seen: list[ev.Event] = []

    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def host(self) -> int | None:
        """The index of the host that has the run, as last known (``None``: not known)."""
        return self._host

    def __repr__(self) -> str:
        state = self._result.termination.value if self._result else "running"
        return f"<RayRunHandle {self.run_id} {state}>"

    # ------------------------------------------------------------------ reading

    def events(self, *, deltas: bool = False) -> RayEventStream:
        """Every kept event from the first, then live ones until ``RunFinished``;
        with ``deltas=True`` the live deltas too, from now on (as ``RunHandle.events``)."""
        return RayEventStream(self, "live" if deltas else "events")

    def stream_text(self) -> RayEventStream:
        """The text of the run's model calls as it arrives (as ``RunHandle.stream_text``)."""
        return RayEventStream(self, "text")

    async def result(self) -> RunResult[OutputT]:
        """The run's result, wherever it ended (see the module on failover)."""
        if self._result is None and self._agent is not None and not self._delivered.is_set():
            await self._started()  # started here: its host sends the result when it ends
            i = self._started_on
            if i is not None and self._host == i:  # (not if it is known to have moved)
                await self._rt._results[i].wait(self)
        while self._result is None:
            i = await self._where()
            if i is None:
                self._result = await self._lost()
                break
            try:
                status, data, agent = await wait_ref(
                    self._rt._hosts[i].result.remote(self.run_id), self._rt._watches[i]
                )
            except HOST_LOST:
                status, data, agent = "unknown", None, None
            if status == "finished":
                assert data is not None
                self._result = RunResult.load(data, self._output_type(agent))
                self._rt._hosts[i].forget.remote(self.run_id)
                break
            self._host = None  # not there any more: look again
        return self._result

    def _output_type(self, name: str | None) -> Any:
        agent = self._agent or self._rt._agents.get(name or "")
        return str if agent is None else agent.output_type

    async def _lost(self) -> RunResult[OutputT]:
        """No host has the run: from the store where it finished; else it crashed."""
        store = self._rt.store
        if store is not None and await store.get(self.run_id) is not None:
            result: RunResult[OutputT] = await stored_result(store, self.run_id, self._rt._agents)
            return result
        self._unknown()
        return self._crashed()

    def _unknown(self) -> None:
        """A handle made from a run id alone, for a run no host (and no store) has."""
        if not self._found:
            raise RunNotFound(
                f"no host has run {self.run_id!r} (a finished run's result stays on its host "
                "until a handle collects it; RayRuntime(store=...) keeps every run)"
            )

    def _crashed(self) -> RunResult[OutputT]:
        """The result of a run whose host died with no store to resume it from."""
        if self._result is not None:
            return self._result
        if self._start_error is not None:
            raise self._start_error
        rt = self._rt
        why = (
            f"the host running run {self.run_id!r} died (or did not answer for "
            f"{rt.host_timeout_s:g} s)"
            + (
                " and no run store is shared by the hosts, so the run cannot be resumed "
                "(RayRuntime(store=...) makes runs survive a host)"
                if rt.store is None
                else " before the run reached the run store"
            )
            + "; usage counts the charges this handle had seen"
        )
        i = self._started_on
        if i is not None and rt._hosts:
            # A host that was only stopped (SIGSTOP, a paused machine) ends the run when it
            # wakes up, rather than go on with a run whose handle has ended it.
            with contextlib.suppress(Exception):
                rt._hosts[i].cancel.remote(self.run_id, why)
        usage = _usage_of(self._seen)
        last = self._seen[-1] if self._seen else None
        finished = ev.RunFinished(
            run_id=self.run_id,
            seq=len(self._seen),
            round=last.round if last is not None else 0,
            at=last.at if last is not None else 0.0,
            termination=Termination.CRASHED,
            usage=usage,
            error=why,
        )
        self._result = RunResult[OutputT](
            run_id=self.run_id,
            output=None,
            termination=Termination.CRASHED,
            passed=None,
            judgement=None,
            usage=usage,
            messages=(),
            events=(*self._seen, finished),
            error=why,
        )
        return self._result

    # ------------------------------------------------------------------ where it is

    async def _started(self) -> None:
        """Wait until the host has taken the run (re-sending what it could not take)."""
        rt = self._rt
        await self._sent.wait()
        while self._start_ref is not None:
            ref, n = self._start_ref
            assert self._started_on is not None
            try:
                epoch, replies = await wait_ref(ref, rt._watches[self._started_on])
                reply = replies[n]
                if isinstance(reply, BaseException):
                    raise reply
                if self._start_ref == (ref, n):
                    self._fids, self._epoch = reply, epoch
            except HOST_LOST:
                # The host died with the run hardly begun: where no store has it, and
                # a store exists, nothing of it can go on anywhere, so start it again.
                if rt.store is not None and await rt.store.get(self.run_id) is None:
                    if self._start_ref == (ref, n):
                        self._resend(rt._pick(None))
                    continue
            except LookupError:  # a restarted host lost the agents shipped to it
                if self._start_ref == (ref, n) and self._host is not None:
                    rt._shipped[self._host].discard(self._name())
                    self._resend(self._host)
                continue
            except Exception as exc:  # (a waiter cancelled is not the start's error)
                if self._start_ref == (ref, n):
                    self._start_error = _cause(exc)
            if self._start_ref == (ref, n):
                self._start_ref = None
        if self._start_error is not None:
            raise self._start_error

    def _name(self) -> str:
        assert self._agent is not None
        return self._agent.name

    def _resend(self, i: int) -> None:
        """Start the run on host ``i`` again (its streams find it there)."""
        self._fids = []
        self._rt._send_starts(i, [self])

    async def _where(self) -> int | None:
        """The host holding the run now, or ``None`` if no live host has it."""
        await self._started()
        own = self._rt._handles.get(self.run_id)
        if own is not None and own is not self:  # started here: maybe not on its host yet
            await own._started()
        if self._host is not None and self._rt._infos[self._host] is not None:
            return self._host
        self._host = await self._rt._locate(self.run_id)
        self._found = self._found or self._host is not None
        return self._host

    # ------------------------------------------------------------------ control

    def cancel(self, reason: str = "cancelled") -> None:
        """End the run now, on whichever host holds it (it ends ``cancelled``)."""
        self._rt._spawn(lambda: self._call("cancel", reason or "cancelled"))

    def stop(self) -> None:
        """End the run after its current round (``cancelled``, reason ``"stopped"``)."""
        self._rt._spawn(lambda: self._call("stop"))

    def approve(self, call_id: str) -> None:
        """Let a held tool call run (also for a durable run parked in the store)."""
        self._rt._spawn(lambda: self._call("answer", call_id, True, None))

    def reject(self, call_id: str, reason: str = "rejected") -> None:
        """Refuse a held tool call; the model gets an is_error result with ``reason``."""
        self._rt._spawn(lambda: self._call("answer", call_id, False, reason))

    async def pending_approvals(self) -> list[PendingApproval]:
        """The tool calls waiting for :meth:`approve` or :meth:`reject`."""
        data = await self._call("pending")
        return [PendingApproval(**p) for p in data]

    async def _call(self, method: str, *args: Any) -> Any:
        """``method(run_id, *args)`` on the run's host; on another host if that one died
        (with a store, any host reaches a run through it)."""
        rt = self._rt
        for _ in range(3):
            i = await self._where()
            if i is None:
                if rt.store is None:
                    self._unknown()  # a KeyError for a run no host ever had
                    return [] if method == "pending" else None  # it is gone
                i = rt._pick(None)
            try:
                return await wait_ref(
                    getattr(rt._hosts[i], method).remote(self.run_id, *args), rt._watches[i]
                )
            except HOST_LOST:
                self._host = None
        return [] if method == "pending" else None


class RayEventStream:
    """A run's events (or text) from its hosts, as they come: an async iterator.

    A plain iterator object rather than an async generator, so a reader may
    stop early (``break``); ``aclose()`` frees the host's cursor at once.
    """

    def __init__(self, handle: RayRunHandle[Any], kind: Kind) -> None:
        self._handle, self._kind = handle, kind
        self._buffer: deque[Any] = deque()
        self._host: int | None = None
        self._fid: int | None = None
        #: Kept events read (the next one's seq), and the seq of the last seam read.
        self._next = 0
        self._seam = -1
        self._over = False
        #: Set by the feed when it brings something (see :meth:`_deliver`).
        self._arrived = anyio.Event()
        #: Set by the feed when it answers a :meth:`_subscribe` in flight.
        self._opening: anyio.Event | None = None
        #: Opened with the run: which of the cursors the start opened is this stream's.
        self._early: int | None = None
        if handle._early is not None:
            self._early = len(handle._early)
            handle._early.append(self)

    def __aiter__(self) -> RayEventStream:
        return self

    async def __anext__(self) -> Any:
        while not self._buffer:
            if self._over:
                raise StopAsyncIteration
            await self._fill()
        return self._buffer.popleft()

    async def aclose(self) -> None:
        self._over = True
        self._buffer.clear()
        if self._early is not None:
            # The cursor the run's start opens for this stream, never read: close it
            # once the start has its reply.
            k, self._early = self._early, None
            with contextlib.suppress(Exception):
                self._handle._rt._spawn(lambda: self._close_early(k))
        if self._fid is not None and self._host is not None:
            with contextlib.suppress(Exception):
                self._handle._rt._feeds[self._host].close(self._fid)
            self._fid = None

    async def _close_early(self, k: int) -> None:
        handle = self._handle
        with contextlib.suppress(Exception):
            await handle._started()
            if k < len(handle._fids) and handle._host is not None:
                handle._rt._hosts[handle._host].unfollow.remote(handle._fids[k])

    async def _fill(self) -> None:
        handle = self._handle
        if self._early is not None:
            await handle._started()
            k, self._early = self._early, None
            i = handle._host
            if k < len(handle._fids) and i is not None:  # else (sent again) it is found below
                await self._subscribe(i, None, handle._fids[k])
        if self._fid is None and not await self._attach():
            return
        if not self._buffer and not self._over and self._fid is not None:
            await self._arrived.wait()  # the host's feed delivers (see _deliver)
            self._arrived = anyio.Event()

    async def _subscribe(self, i: int, run_id: str | None, start: int) -> bool:
        """Open a cursor on host ``i`` through the caller's feed there (``run_id``
        ``None``: adopt the cursor ``start`` the run's start opened); whether it opened."""
        if self._opening is None:
            self._opening = anyio.Event()
            self._host = i
            self._handle._rt._feeds[i].open(self, (run_id, self._kind, start, self._seam))
        await self._opening.wait()
        self._opening = None
        return self._fid is not None

    def _opened(self, fid: int | None) -> None:
        """The feed's answer to :meth:`_subscribe` (``None``: the run is not there)."""
        self._fid = fid
        if fid is None:
            self._host = None
        if self._opening is not None:
            self._opening.set()

    def _deliver(self, items: list[Any], status: Status) -> None:
        """What the feed brought for this stream's cursor: ``status`` ``live`` (more to
        come), ``finished``, or anything else: the run left the host (or the host was
        lost), so the stream looks for it again."""
        self._take(items)
        if status == "finished":
            self._over = True
        elif status != "live":
            self._fid = self._host = None
        self._arrived.set()

    async def _attach(self) -> bool:
        """Follow the run on the host that has it; else read what the store has, or end."""
        handle = self._handle
        rt = handle._rt
        while True:
            if handle._result is not None:  # its host may have forgotten it: read it here
                if self._kind != "text":
                    self._buffer.extend(handle._result.events[self._next :])
                self._over = True
                return False
            i = await handle._where()
            if i is not None and await self._subscribe(i, handle.run_id, self._next):
                return True
            store = rt.store
            stored = None if store is None else await store.get(handle.run_id)
            if store is None or stored is None:
                handle._unknown()
                self._end_crashed()
                return False
            if self._kind != "text":
                self._take(await self._stored_events(store))
                if stored.status == "finished" and self._next >= stored.events:
                    self._over = True
                    return False
            elif stored.status == "finished":
                self._over = True
                return False
            await anyio.sleep(RELOCATE_S)

    async def _stored_events(self, store: RunStore) -> list[Any]:
        """The store's events from where this stream goes on (the rewind rule, as a
        host's cursor applies it: :meth:`Host.feed`)."""
        run_id = self._handle.run_id
        newer = await store.events(run_id, start=self._seam + 1)
        start = self._next
        for data in newer:
            if data["type"] == "RunResumed" and data["seq"] < start:
                start = data["seq"]
                break
        return [d for d in newer if d["seq"] >= start]

    def _take(self, items: list[Any]) -> None:
        if self._kind == "text":
            self._buffer.extend(items)
            return
        seen = self._handle._seen
        for data in items:
            event = ev.load(data)
            if not isinstance(event, ev.DELTA_TYPES):
                seq = event.seq
                if isinstance(event, ev.RunResumed):
                    self._seam = seq
                    del seen[seq:]  # the events after the checkpoint are done again
                if seq == len(seen):
                    seen.append(event)
                self._next = seq + 1
            self._buffer.append(event)

    def _end_crashed(self) -> None:
        """No host and no store has the run: it crashed with its host."""
        result = self._handle._crashed()
        if self._kind != "text":
            self._buffer.extend(result.events[self._next :])
        self._over = True


def _usage_of(events: Sequence[ev.Event]) -> Usage:
    tokens_in = tokens_out = 0
    cost: float | None = 0.0
    for event in events:
        if isinstance(event, ev.UsageCharged):
            tokens_in += event.input_tokens
            tokens_out += event.output_tokens
            if cost is not None:
                cost = None if event.cost_usd is None else cost + event.cost_usd
    return Usage(input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost)


def _cause(exc: BaseException) -> BaseException:
    """The user's error out of a Ray task error (``ValueError``, ``BudgetExhausted``)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


__all__ = ["FleetBudget", "RayEventStream", "RayRunHandle", "RayRuntime", "shares"]
