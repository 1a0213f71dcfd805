"""One host of a :class:`tether.ray.RayRuntime`: a Ray actor running a tether ``Runtime``.

The class is plain Python; :mod:`tether.ray` makes it an async Ray actor
(``ray.remote(Host)``), so each host lives in its own worker process and runs
its methods as coroutines on that process's asyncio loop. Its ``Runtime``
lives in one task of that loop (opened by the first call after the host starts
or restarts), so every method finds it running.

What crosses the process boundary is plain data: run ids, inputs, events and
results in their JSON forms (:func:`tether.events.dump`, :meth:`RunResult.dump`).
The agents come once, with the host's construction (or with the first run of
an agent the host has not seen); deps come with each run.

Following runs (:meth:`Host.feed`) is one long poll per caller and host (its
*feed*), whatever the number of streams the caller follows there: each call
opens the cursors asked for and returns what has happened on every cursor of
the feed since the last call, as one compact JSON text, so a caller costs one
Ray call per batch of all its streams rather than one per stream (or event),
and the runs never wait for their readers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
import time
from collections.abc import Sequence
from typing import Any, Literal

import anyio
import attrs

from tether.runtime import (
    Agent,
    Limits,
    ReaderKind,
    RunHandle,
    RunStore,
    Runtime,
    RuntimeHooks,
    TrailReader,
)

#: One run to start: run id, agent name, input, options, the agent (if not shipped yet),
#: the kinds of cursor to open with it, and whether to record it before replying
#: (``RayRuntime.submit``: the host's ``Runtime.submit``).
Start = tuple[str, str, Any, dict[str, Any], "Agent[Any, Any] | None", Sequence["Kind"], bool]
#: What a follower reads: the kept events; the kept events with the live deltas; the text.
Kind = ReaderKind
#: Where a run stands, as a poll or a result answers it: ``live`` (more to come
#: here), ``finished`` (it ended here), ``moved`` (it left this host: parked in
#: the store, or another host owns it now), ``unknown`` (this host never had it).
Status = Literal["live", "finished", "moved", "unknown"]

#: How long a finished run's result stays on its host for its handles to collect.
KEEP_FINISHED_S = 120.0
#: A follower not polled for this long is dropped (its reader went away).
IDLE_FOLLOW_S = 120.0
#: How long a feed's answer waits, once something is new, to gather what comes next.
FEED_LINGER_S = 0.002
#: A cursor a feed asks for: the caller's key for it, the run id (``None``: a cursor
#: the run's start opened, whose id is ``start``), the kind, the start, the last seam.
Open = tuple[int, "str | None", "Kind", int, int]


@attrs.frozen(kw_only=True)
class HostConfig:
    """What every host of a RayRuntime is built with (pickled once per host)."""

    agents: tuple[Agent[Any, Any], ...]
    store: RunStore | None
    conversations: Any
    lease_s: float
    max_concurrent_runs: int | None
    provider_concurrency: int
    tool_threads: int
    shutdown_grace_s: float
    #: The fleet's budget (see :mod:`tether.ray._fleet`), or ``None``.
    limits: Limits | None = None
    #: The fleet's budget ledger actor (with ``limits``), or ``None``.
    coordinator: Any = None


@attrs.frozen(kw_only=True)
class HostInfo:
    """A host as the caller sees it: its place, its process, its load."""

    index: int
    #: The host's ``Runtime`` owner id in the run store's leases.
    owner: str
    pid: int
    node: str
    running: int
    #: Readers' cursors open on this host (each holds a run's events until read).
    follows: int
    #: Results kept for handles to collect.
    kept: int
    #: When this host's process started (a restarted host has a new one).
    started_at: float


class _Follow:
    """One reader's cursor on one run (see the module docstring): a
    :class:`~tether.runtime.TrailReader`, and the feed it is in, if any."""

    __slots__ = ("feed", "handle", "reader", "touched", "watcher")

    def __init__(self, handle: RunHandle[Any], reader: TrailReader) -> None:
        self.handle, self.reader = handle, reader
        self.touched = time.monotonic()
        self.feed: _Feed | None = None
        self.watcher: asyncio.Task[None] | None = None

    def close(self) -> None:
        self.reader.close()
        if self.watcher is not None:
            self.watcher.cancel()
            self.watcher = None


class _Feed:
    """One caller's cursors on this host, answered together by one long poll
    (:meth:`Host.feed`): which of them have something new (``dirty``, marked by a
    watcher task per cursor), and the cursors opened since the last answer."""

    __slots__ = ("dirty", "fids", "opened", "touched", "wake")

    def __init__(self) -> None:
        self.fids: set[int] = set()
        self.dirty: set[int] = set()
        self.opened: list[tuple[int, int | None]] = []
        self.wake = asyncio.Event()
        self.touched = time.monotonic()

    def ready(self) -> bool:
        return bool(self.dirty or self.opened)

    def add(self, fid: int, follow: _Follow) -> None:
        if follow.feed is self:
            return
        follow.feed = self
        self.fids.add(fid)
        self.dirty.add(fid)  # what it holds already is read at once
        follow.watcher = asyncio.get_running_loop().create_task(self._watch(fid, follow))

    async def _watch(self, fid: int, follow: _Follow) -> None:
        reader = follow.reader
        while not reader.finished:
            await reader.wait_change()
            self.dirty.add(fid)
            self.wake.set()

    def reply(self, follows: dict[int, _Follow]) -> str:
        """The feed's answer: ``[opened, updates]`` as one compact JSON text, where
        ``opened`` is ``[key, fid or null]`` per cursor asked for, and ``updates`` is
        ``[fid, status, items]`` per cursor with something new (``items``: events'
        JSON forms, or text chunks). A cursor whose reader is done is closed here."""
        now = time.monotonic()
        opened, self.opened = self.opened, []
        updates: list[tuple[int, Status, list[Any]]] = []
        dirty, self.dirty = self.dirty, set()
        for fid in dirty:
            follow = follows.get(fid)
            if follow is None:
                if fid in self.fids:
                    self.fids.discard(fid)
                    updates.append((fid, "unknown", []))
                continue
            follow.touched = now
            reader = follow.reader
            items = reader.drain()
            if not reader.done():
                if len(items) >= TrailReader.MAX_BATCH:
                    self.dirty.add(fid)  # more to read
                updates.append((fid, "live", items))
                continue
            follow.close()
            del follows[fid]
            self.fids.discard(fid)
            updates.append((fid, "finished" if follow.handle.done else "moved", items))
        for fid in self.fids:
            follow = follows.get(fid)
            if follow is not None:
                follow.touched = now
        return json.dumps([opened, updates], separators=(",", ":"))


class Host:
    """A tether ``Runtime`` in a Ray actor (see the module docstring)."""

    def __init__(self, index: int) -> None:
        # Only the index: Ray keeps a restartable actor's constructor arguments to
        # rebuild it, and arguments in the object store could be lost with their node
        # (Ray logs an error for those). The config comes with :meth:`configure`,
        # which the caller sends to each new process of this host.
        self.index = index
        self.config: HostConfig | None = None
        self._configured = asyncio.Event()
        self.agents: dict[str, Agent[Any, Any]] = {}
        self._rt: Runtime | None = None
        self._opening: asyncio.Future[None] | None = None
        self._closing = asyncio.Event()
        self._main: asyncio.Task[None] | None = None
        #: Runs this host started or resumed, kept until collected (see KEEP_FINISHED_S).
        self._runs: dict[str, RunHandle[Any]] = {}
        self._finished_at: dict[str, float] = {}
        self._follows: dict[int, _Follow] = {}
        self._feeds: dict[str, _Feed] = {}
        self._ids = itertools.count(1)
        self._started_at = time.time()
        self._peers: list[Any] = []
        #: This host's name in the run store's leases and in the fleet's ledger.
        self._owner = ""
        self._budget: Any = None
        #: Runs the caller started here, and those of them that ended, to send it.
        self._watched: set[str] = set()
        self._done: list[tuple[RunHandle[Any], float]] = []
        self._done_base = 0
        self._done_event = asyncio.Event()

    # ------------------------------------------------------------------ the Runtime

    async def configure(self, config: HostConfig, hosts: Sequence[Any]) -> HostInfo:
        """This process's config and the fleet's hosts (see :meth:`join`), once per
        process (later calls only join); opens its Runtime and answers :meth:`info`."""
        if self.config is None:
            self.config = config
            self.agents = {a.name: a for a in config.agents}
            self._configured.set()
        self.join(hosts)
        info = await self.info()
        assert info is not None
        return info

    async def _runtime(self) -> Runtime:
        if self._rt is None:
            await self._configured.wait()  # a restarted process: the caller configures it
            if self._opening is None:
                self._opening = asyncio.get_running_loop().create_future()
                self._main = asyncio.create_task(self._serve(self._opening))
            await asyncio.shield(self._opening)
        assert self._rt is not None
        return self._rt

    async def _serve(self, ready: asyncio.Future[None]) -> None:
        config = self.config
        assert config is not None
        try:
            hooks = RuntimeHooks(on_gate_pause=self._paused, on_run_left=self._ended)
            rt = Runtime(
                max_concurrent_runs=config.max_concurrent_runs,
                provider_concurrency=config.provider_concurrency,
                tool_threads=config.tool_threads,
                shutdown_grace_s=config.shutdown_grace_s,
                conversations=config.conversations,
                store=config.store,
                agents=list(config.agents) if config.store is not None else (),
                lease_s=config.lease_s,
                resume=config.store is not None,
                hooks=hooks,
            )
            self._owner = _owner(rt, self.index)
            if config.coordinator is not None and config.limits is not None:
                from tether.ray._fleet import join_budget

                self._budget = join_budget(
                    rt, config.coordinator, self._owner, config.limits, config.lease_s
                )
            async with rt:
                self._rt = rt
                ready.set_result(None)
                while not self._closing.is_set():
                    with anyio.move_on_after(10.0):
                        await self._closing.wait()
                    self._sweep()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise
        finally:
            self._rt = None

    def _sweep(self) -> None:
        """Forget results nobody collected, and followers nobody polls any more."""
        now = time.monotonic()
        while self._done and now - self._done[0][1] > KEEP_FINISHED_S:
            self.forget(self._done.pop(0)[0].run_id)
            self._done_base += 1
        for run_id, at in list(self._finished_at.items()):
            if now - at > KEEP_FINISHED_S:
                self._runs.pop(run_id, None)
                del self._finished_at[run_id]
        for fid, follow in list(self._follows.items()):
            if now - follow.touched > IDLE_FOLLOW_S:
                follow.close()
                del self._follows[fid]
        for feed_id, feed in list(self._feeds.items()):
            if now - feed.touched > IDLE_FOLLOW_S:
                del self._feeds[feed_id]

    def _run(self, run_id: str) -> RunHandle[Any] | None:
        """The run ``run_id`` as this host knows it: started or resumed here."""
        run = self._runs.get(run_id)
        if run is None and self._rt is not None:
            run = self._rt.in_flight(run_id)  # resumed here by the keeper
            if run is not None:
                self._runs[run_id] = run
        return run

    # ------------------------------------------------------------------ the caller's calls

    async def info(self) -> HostInfo | None:
        """Who this host is and how loaded; ``None`` from a process not configured yet
        (a host Ray restarted: the caller sends it :meth:`configure`)."""
        if self.config is None:
            return None
        rt = await self._runtime()
        return HostInfo(
            index=self.index,
            owner=self._owner,
            pid=os.getpid(),
            node=socket.gethostname(),
            running=rt.running,
            follows=len(self._follows),
            kept=len(self._runs),
            started_at=self._started_at,
        )

    async def start_many(
        self, starts: Sequence[Start]
    ) -> tuple[float, list[list[int] | BaseException]]:
        """Start runs here, in order (one call for the starts a caller made at once):
        this process's epoch (``started_at``: the runs are in this process), and for
        each run the ids of its cursors (see :meth:`_start`), or the error it met."""
        rt = await self._runtime()
        replies: list[list[int] | BaseException] = []
        for start in starts:
            try:
                replies.append(await self._start(rt, *start))
            except Exception as exc:
                replies.append(exc)
        return self._started_at, replies

    async def _start(
        self,
        rt: Runtime,
        run_id: str,
        agent_name: str,
        input: Any,
        options: dict[str, Any],
        agent: Agent[Any, Any] | None,
        follows: Sequence[Kind],
        submit: bool,
    ) -> list[int]:
        """Start a run (its arguments were checked by the caller), with a cursor of
        each kind in ``follows`` opened from its start; their ids. ``submit``: once
        the run store has its record (only then awaited: a start is sync)."""
        if agent is not None:
            self.agents[agent.name] = agent
            rt.add_agent(agent)
        found = self.agents.get(agent_name)
        if found is None:
            raise LookupError(f"unknown agent {agent_name!r}")
        if submit:
            handle = await rt.submit(found, input, run_id=run_id, **options)
        else:
            handle = rt.start(found, input, run_id=run_id, **options)
        self._runs[run_id] = handle
        self._watched.add(run_id)
        return [self._open(handle, kind, 0) for kind in follows]

    def _ended(self, run_id: str) -> None:
        """A run left the Runtime (finished, or parked): its caller hears of it."""
        if run_id in self._watched:
            self._watched.discard(run_id)
            run = self._runs.get(run_id)
            if run is not None:
                self._done.append((run, time.monotonic()))
                self._done_event.set()

    async def done(
        self, cursor: int, epoch: float | None, timeout_s: float
    ) -> tuple[list[tuple[str, Status, dict[str, Any] | None, str | None]], int, float]:
        """The runs started through :meth:`start_many` that ended since ``cursor``
        (waits up to ``timeout_s`` for one): each ``(run_id, status, result, agent)``,
        the cursor to ask from next, and this process's epoch (``started_at``).
        Asking from a cursor lets this host forget the results before it; a cursor
        of another epoch (an earlier process of this host) counts as none, and is
        answered at once (the caller learns that the runs it waits for are not here)."""
        await self._runtime()
        if epoch != self._started_at:
            cursor = self._done_base
            if epoch is not None:
                timeout_s = 0.0
        if (seen := cursor - self._done_base) > 0:
            for run, _ in self._done[:seen]:
                self.forget(run.run_id)
            del self._done[:seen]
            self._done_base = cursor
        if not self._done:
            self._done_event.clear()
            with anyio.move_on_after(timeout_s):
                await self._done_event.wait()
        out: list[tuple[str, Status, dict[str, Any] | None, str | None]] = []
        for run, _ in self._done:
            if not run.done:
                out.append((run.run_id, "moved", None, None))
            else:
                result = await run.result()  # at once: it is done
                out.append((run.run_id, "finished", result.dump(), run.agent.name))
        return out, self._done_base + len(self._done), self._started_at

    def _open(self, run: RunHandle[Any], kind: Kind, start: int, after_seam: int = -1) -> int:
        fid = next(self._ids)
        reader = run.reader(kind, start=start, after_seam=after_seam)
        self._follows[fid] = _Follow(run, reader)
        return fid

    async def result(self, run_id: str) -> tuple[Status, dict[str, Any] | None, str | None]:
        """The run's result once it has one (``finished``), and its agent's name;
        ``unknown`` when this host does not have the run."""
        await self._runtime()
        run = self._run(run_id)
        if run is None:
            return "unknown", None, None
        result = await run.result()
        self._finished_at.setdefault(run_id, time.monotonic())
        return "finished", result.dump(), run.agent.name

    def forget(self, run_id: str) -> None:
        """The caller has the result: this host need not keep it."""
        self._runs.pop(run_id, None)
        self._finished_at.pop(run_id, None)

    async def feed(
        self, feed_id: str, opens: Sequence[Open], closes: Sequence[int], timeout_s: float
    ) -> str:
        """The long poll of one caller's streams on this host (its *feed*): open the
        cursors ``opens`` asks for, close ``closes``, then wait up to ``timeout_s`` for
        something new on any of the feed's cursors, and answer everything in one
        compact JSON batch (see :meth:`_Feed.reply`).

        A cursor is opened on run ``run_id`` from kept event ``start`` (``after_seam``:
        the seq of the last ``RunResumed`` the reader saw, -1 for none: a reader coming
        over from a host that died may have read events past the checkpoint the run
        was resumed from; it goes on from the first newer seam if that comes before
        ``start``, see :mod:`tether.ray`); or, with ``run_id`` ``None``, a cursor the
        run's start opened (``start`` is its id) joins the feed.
        """
        await self._runtime()
        feed = self._feed(feed_id)
        self.feed_open(feed_id, opens, closes)
        if not feed.ready():
            feed.wake.clear()
            with anyio.move_on_after(timeout_s):
                await feed.wake.wait()
        if feed.dirty and FEED_LINGER_S:
            # A short wait gathers what the runs do next into the same batch.
            await anyio.sleep(FEED_LINGER_S)
        return feed.reply(self._follows)

    def feed_open(self, feed_id: str, opens: Sequence[Open], closes: Sequence[int] = ()) -> None:
        """Open (and close) cursors of a feed whose long poll is in flight: it answers
        at once with them (a one-way call; see :meth:`feed`)."""
        feed = self._feed(feed_id)
        for closed in closes:
            self.unfollow(closed)
        for key, run_id, kind, start, after_seam in opens:
            fid: int | None = None
            if run_id is None:
                fid = start if start in self._follows else None
            else:
                run = self._run(run_id)
                if run is not None:
                    fid = self._open(run, kind, start, after_seam)
            if fid is not None:
                feed.add(fid, self._follows[fid])
            feed.opened.append((key, fid))
        if feed.ready():
            feed.wake.set()

    def _feed(self, feed_id: str) -> _Feed:
        feed = self._feeds.get(feed_id)
        if feed is None:
            feed = self._feeds[feed_id] = _Feed()
        feed.touched = time.monotonic()
        return feed

    def unfollow(self, fid: int) -> None:
        """Close a cursor (its stream was closed)."""
        follow = self._follows.pop(fid, None)
        if follow is not None:
            follow.close()
            if follow.feed is not None:
                follow.feed.fids.discard(fid)
                follow.feed.dirty.discard(fid)

    async def cancel(self, run_id: str, reason: str) -> None:
        """Cancel the run: in flight here, or (with a store) wherever it is."""
        rt = await self._runtime()
        run = self._run(run_id)
        if run is not None and not run.done and not run.parked:
            run.cancel(reason)
            return
        with contextlib.suppress(KeyError):
            rt.handle(run_id).cancel(reason)

    async def stop(self, run_id: str) -> None:
        rt = await self._runtime()
        run = self._run(run_id)
        if run is not None and not run.done and not run.parked:
            run.stop()
            return
        with contextlib.suppress(KeyError):
            rt.handle(run_id).stop()

    async def answer(self, run_id: str, call_id: str, approved: bool, note: str | None) -> None:
        """Approve or reject a held call: of a run in flight here, or parked in the store."""
        rt = await self._runtime()
        if approved:
            await rt.approve(run_id, call_id)
        else:
            await rt.reject(run_id, call_id, note or "rejected")
        self._run(run_id)  # resumed here by the answer: keep it for its handles

    async def pending(self, run_id: str) -> list[dict[str, Any]]:
        """The run's held calls: of a run this host has (none once it ended, as on a
        ``RunHandle``), else as the Runtime finds them (in flight, or in the store)."""
        rt = await self._runtime()
        run = self._run(run_id)
        found = (
            await run.pending_approvals()
            if run is not None and not run.parked
            else await rt.pending_approvals(run_id)
        )
        return [attrs.asdict(p) for p in found]

    async def has(self, run_id: str) -> bool:
        await self._runtime()
        return self._run(run_id) is not None

    def join(self, hosts: Sequence[Any]) -> None:
        """The fleet's hosts (this one among them): where this host's 429 pauses go."""
        self._peers = [h for i, h in enumerate(hosts) if i != self.index]

    def _paused(self, key: str, seconds: float) -> None:
        # One-way calls: the others pause a Ray call later (about a millisecond here).
        for peer in self._peers:
            peer.pause.remote(key, seconds)

    def budget(self) -> dict[str, Any] | None:
        """This host's slice of the fleet's budget: its traffic with the ledger, its
        crossings (``SliceStatistics``); ``None`` without ``limits=``."""
        if self._budget is None:
            return None
        return attrs.asdict(self._budget.statistics())

    def pause(self, key: str, seconds: float) -> None:
        """Another host got a 429 with retry-after from this endpoint: wait it out here too."""
        if self._rt is not None:
            self._rt.pause_gate(key, seconds)

    async def close(self, graceful: bool = True) -> None:
        """Exit the Runtime: runs get its shutdown grace (none unless ``graceful``),
        then are cancelled."""
        if not graceful and self._rt is not None:
            self._rt.shutdown_grace_s = 0.0
        self._closing.set()
        main = self._main
        if main is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await main


def _owner(rt: Runtime, index: int) -> str:
    """A host process's name: its Runtime's lease owner id, or one like it."""
    return rt.owner or f"{socket.gethostname()}:{os.getpid()}:host-{index}"


__all__ = ["Host", "HostConfig", "HostInfo", "Kind", "Status"]
