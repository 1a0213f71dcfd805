"""``Runtime``, the root supervisor, and ``RunHandle``."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic

import anyio
import attrs
from anyio.abc import TaskGroup

import tether.runtime._events as ev
from tether.actors import spawn
from tether.providers import Message, ModelSettings, TetherError

from ._agent import Agent, DepsT, OutputT
from ._budget import Budget, Hit
from ._conversations import ConversationStore
from ._durable import wait_result
from ._fork import fork
from ._gc import GcHold, GcTuning
from ._input import RunInput
from ._keeper import Keeper
from ._limits import Limits
from ._perrun import prepare
from ._reader import ReaderKind, TrailReader
from ._result import RunResult
from ._run import Run
from ._runstore import Answer, RunNotFound, RunStore
from ._services import RuntimeServices
from ._shutdown import close_shared
from ._sinks import EventSink, SinkStatus, SinkThread, combine, wants_deltas
from ._startcheck import StartChecked, check_start
from ._state import load_state
from ._storedhandle import StoredEventStream, StoredRun
from ._trail import TextStream
from ._transcript import Chat, Transcript, Turns

if TYPE_CHECKING:  # a fleet's budget is imported by share_budget: not by import tether
    from ._fleetbudget import LedgerLink, SlicedBudget

#: A checked start: what :func:`check_start` made of its arguments, and the run's id.
_Start = tuple[StartChecked, str]


class BudgetExhausted(TetherError):
    """The Runtime-wide budget is spent; no new run starts until it is raised or reset."""


@attrs.frozen(kw_only=True)
class BudgetStatus:
    """The Runtime-wide budget: its ceilings, what was charged, what calls in flight hold."""

    max_total_tokens: int | None
    max_cost_usd: float | None
    tokens: int
    cost_usd: float
    unpriced_charges: int
    #: Output tokens (and their cost) held by model calls in flight, not yet streamed.
    reserved_tokens: int = 0
    reserved_cost_usd: float = 0.0


class RuntimeClosed(RuntimeError):
    """The Runtime is not running (not entered yet, or already closed)."""


@attrs.frozen(kw_only=True)
class RuntimeHooks:
    """Callbacks for an integration that hosts a Runtime (``tether.ray``'s hosts).

    Both are called in the Runtime's event loop and must not block.
    """

    #: ``(endpoint key, seconds)``: a 429 with retry-after paused that provider
    #: endpoint here (tell the other processes; see :meth:`Runtime.pause_gate`).
    on_gate_pause: Callable[[str, float], object] | None = None
    #: ``(run_id)``: a run left this Runtime: it finished, or parked in the run store.
    on_run_left: Callable[[str], object] | None = None


@attrs.frozen(kw_only=True)
class PendingApproval:
    """A tool call a policy held for approval (``Verdict.ask``), waiting for an answer."""

    call_id: str
    name: str
    arguments: Any
    reason: str


class RunHandle(Generic[OutputT]):
    """The host's handle on one run: its events, its result, and cancellation.

    A :class:`~tether.runtime.RunHandleLike`, as ``RayRunHandle`` and
    :class:`StoredRunHandle` are. ``agent``, ``parked`` and :meth:`reader` are
    for integrations that host a Runtime (a run in flight here only).
    """

    __slots__ = ("_run",)

    def __init__(self, run: Run) -> None:
        self._run = run

    @property
    def run_id(self) -> str:
        return self._run.id

    @property
    def done(self) -> bool:
        return self._run.result is not None

    @property
    def agent(self) -> Agent[Any, OutputT]:
        """The agent the run runs."""
        return self._run.agent

    @property
    def parked(self) -> bool:
        """The run is durable and left this Runtime to wait in the run store (for
        approvals, or lost to another owner): its result comes from the store."""
        durable = self._run._durable
        return durable is not None and durable.parked

    def reader(self, kind: ReaderKind, *, start: int = 0, after_seam: int = -1) -> TrailReader:
        """A batched reader of the run's trail from kept event ``start``, for serving
        it to another process (see :class:`~tether.runtime.TrailReader`); ``after_seam``
        is the seq of the last ``RunResumed`` the remote reader saw (-1: none)."""
        return TrailReader(self._run.trail, kind, start, after_seam)

    def events(self, *, deltas: bool = False) -> AsyncIterator[ev.Event]:
        """Every event of the run from the first, then live ones until ``RunFinished``.

        Events are kept by the run, so a slow reader never stalls it and never
        misses one; any number of readers may follow one run.

        With ``deltas=True`` the live :class:`~tether.events.TextDelta` and
        :class:`~tether.events.ToolCallDelta` events (see docs/guides/streaming.md) come too, in
        order between the kept events, from the moment this is called: they are
        not kept, so earlier ones are not replayed. A reader that falls behind
        gets them joined per call, never fewer characters, and never stalls the run.
        """
        if deltas:
            return self._run.trail.follow_live()
        return self._run.follow()

    def stream_text(self) -> TextStream:
        """The text of the run's model calls as it arrives, until the run ends.

        ``async for chunk in handle.stream_text(): ...`` — live from the moment
        it is called (call it right after ``start`` to get all of it); a slow
        reader gets the chunks it missed joined, never less text. The text of
        every call, consecutive calls included, comes in order; after a
        ``ProviderRetry`` the retried call's text starts over. A run nobody
        streams pays nothing for this.
        """
        return self._run.trail.stream_text()

    def cancel(self, reason: str = "cancelled") -> None:
        """End the run now: in-flight calls are cancelled, the run ends ``cancelled``."""
        self._run.cancel(reason)

    def stop(self) -> None:
        """End the run gently: the current round finishes, then it ends ``cancelled``
        with reason ``"stopped"``. No call in flight is interrupted."""
        self._run.stop()

    def approve(self, call_id: str) -> None:
        """Let a tool call that a policy held for approval (``Verdict.ask``) run."""
        self._durable_refuses("approve", call_id)
        self._run.answer(call_id, True, None)

    def reject(self, call_id: str, reason: str = "rejected") -> None:
        """Refuse a held tool call; the model gets an is_error result with ``reason``."""
        self._durable_refuses("reject", call_id)
        self._run.answer(call_id, False, reason)

    def _durable_refuses(self, verb: str, call_id: str) -> None:
        if self._run._durable is not None:  # its held calls park it in the store
            raise ValueError(
                f"run {self.run_id!r} is durable: its held calls wait in the run store; "
                f"use 'await rt.{verb}({self.run_id!r}, {call_id!r})'"
            )

    async def pending_approvals(self) -> list[PendingApproval]:
        """The tool calls waiting for :meth:`approve` or :meth:`reject`.

        A coroutine on every handle (a handle's run may be in another process or
        in the run store); for a run in flight here it answers at once.
        """
        return self._pending()

    def _pending(self) -> list[PendingApproval]:
        return [
            PendingApproval(
                call_id=a.call.id, name=a.call.name, arguments=a.call.input, reason=a.reason
            )
            for a in self._run.pending_approvals()
        ]

    async def result(self) -> RunResult[OutputT]:
        run = self._run
        if run._durable is None or not run._durable.parked:
            await run.wait_finished()
        if run.result is None and run._durable is not None:  # parked: it ends from the store
            return await wait_result(run._durable.store, run.id, run.agent)
        assert run.result is not None
        return run.result

    def __repr__(self) -> str:
        state = self._run.result.termination.value if self._run.result else "running"
        return f"<RunHandle {self._run.id} {state}>"


class StoredRunHandle(RunHandle[Any]):
    """A handle on a run kept in the run store and not in flight here (``rt.handle(id)``).

    ``events()`` replays the stored trail, then follows the owner's commits
    (round by round); ``result()`` waits for the stored result; ``cancel()``
    and ``stop()`` are requests the owner picks up through the store. Live
    text (``stream_text()``, ``events(deltas=True)``) is only for a run in
    flight in this process.
    """

    __slots__ = ("_stored",)

    def __init__(self, stored: StoredRun) -> None:
        self._stored = stored

    @property
    def run_id(self) -> str:
        return self._stored.run_id

    @property
    def done(self) -> bool:
        return self._stored.result is not None

    def events(self, *, deltas: bool = False) -> AsyncIterator[ev.Event]:
        """The stored events from the first, then the owner's as it commits them."""
        if deltas:
            raise ValueError(
                f"run {self.run_id!r} is not in flight in this Runtime: its live deltas are "
                "not stored; use events() without deltas"
            )
        return StoredEventStream(self._stored.store, self.run_id)

    @property
    def agent(self) -> Agent[Any, Any]:
        raise ValueError(f"run {self.run_id!r} is not in flight in this Runtime")

    @property
    def parked(self) -> bool:
        raise ValueError(f"run {self.run_id!r} is not in flight in this Runtime: ask its store")

    def reader(self, kind: ReaderKind, *, start: int = 0, after_seam: int = -1) -> TrailReader:
        raise ValueError(f"run {self.run_id!r} is not in flight in this Runtime: read its events()")

    def stream_text(self) -> TextStream:
        raise ValueError(
            f"run {self.run_id!r} is not in flight in this Runtime: its live text is not "
            "stored; read its events() or its result()"
        )

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the run's owner, through the store, to cancel it."""
        self._stored.request(cancel=reason or "cancelled")

    def stop(self) -> None:
        """Ask the run's owner, through the store, to stop it after the current round."""
        self._stored.request(stop=True)

    def approve(self, call_id: str) -> None:
        raise ValueError(f"use 'await rt.approve({self.run_id!r}, {call_id!r})' for a stored run")

    def reject(self, call_id: str, reason: str = "rejected") -> None:
        raise ValueError(f"use 'await rt.reject({self.run_id!r}, {call_id!r})' for a stored run")

    async def pending_approvals(self) -> list[PendingApproval]:
        """The held calls of the run, as the store has them (none unless it is parked)."""
        return await stored_pending(self._stored.store, self.run_id)

    async def result(self) -> RunResult[Any]:
        return await self._stored.wait_result()

    def __repr__(self) -> str:
        state = self._stored.result.termination.value if self._stored.result else "stored"
        return f"<RunHandle {self.run_id} {state}>"


class Runtime:
    """The root supervisor: one task group for all runs, shared gates and HTTP clients.

    A :class:`~tether.runtime.RuntimeLike`, as ``tether.ray.RayRuntime`` is.

    ``async with tether.Runtime() as rt:`` works on asyncio and trio alike.
    On exit, runs still in flight get ``shutdown_grace_s`` to finish (none when
    the block raised), then are cancelled; each ends with exactly one
    ``RunFinished``. No task outlives the ``async with``.

    ``max_concurrent_runs`` queues runs past that number (``None``: no limit);
    a run's ``timeout_s`` starts when it leaves the queue.
    ``provider_concurrency`` caps requests in flight per provider endpoint.
    ``conversations`` is the store of ``start(..., conversation=ID)``; the
    Runtime closes its connections on exit (a store reopens them when used again).

    ``store`` makes runs durable (see docs/guides/durable.md and :mod:`._keeper`): recorded,
    checkpointed at every round boundary, owned through a lease of ``lease_s``
    seconds that the Runtime renews; ``agents`` are the agents it can resume
    by name; ``resume=True`` claims and continues runs whose owner died.

    ``hooks`` are an integration's callbacks (:class:`RuntimeHooks`). ``gc`` sets the
    process's garbage collector while the Runtime runs (:class:`GcTuning`; ``None``: untouched).
    """

    def __init__(
        self,
        *,
        max_concurrent_runs: int | None = None,
        provider_concurrency: int = 64,
        tool_threads: int = 32,
        shutdown_grace_s: float = 10.0,
        event_sink: EventSink | None = None,
        sink_backlog: int = 10_000,
        limits: Limits | None = None,
        conversations: ConversationStore | None = None,
        store: RunStore | None = None,
        agents: Sequence[Agent[Any, Any]] = (),
        lease_s: float = 30.0,
        resume: bool = False,
        hooks: RuntimeHooks | None = None,
        gc: GcTuning | None = None,
    ) -> None:
        self._keeper = _keeper(store, agents, lease_s, resume)
        self._gc = GcHold(gc)
        if hooks is not None and not isinstance(hooks, RuntimeHooks):
            raise TypeError(f"Runtime(hooks=...) must be a RuntimeHooks, got {hooks!r}")
        self._hooks = hooks or RuntimeHooks()
        for name, value in (
            ("max_concurrent_runs", max_concurrent_runs),
            ("provider_concurrency", provider_concurrency),
            ("tool_threads", tool_threads),
            ("sink_backlog", sink_backlog),
        ):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"Runtime({name}=...) must be a positive int, got {value!r}")
        if not shutdown_grace_s >= 0:
            raise ValueError(
                f"Runtime(shutdown_grace_s=...) must be >= 0, got {shutdown_grace_s!r}"
            )
        self.max_concurrent_runs = max_concurrent_runs
        self.provider_concurrency = provider_concurrency
        self.tool_threads = tool_threads
        self.shutdown_grace_s = shutdown_grace_s
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"Runtime(limits=...) must be a tether.Limits, got {limits!r}")
        self._budget: Budget | None = None
        if limits is not None:
            self._budget = Budget(
                name="runtime.",
                max_total_tokens=limits.max_total_tokens,
                max_cost_usd=limits.max_cost_usd,
            )
        if event_sink is not None and not callable(event_sink):
            raise TypeError(f"Runtime(event_sink=...) must be callable, got {event_sink!r}")
        # Guarded: a sink that raises is reported once and dropped, never ending a run.
        self._sink = None if event_sink is None else combine(event_sink)
        self.sink_backlog = sink_backlog
        self._sink_thread: SinkThread | None = None
        if conversations is not None and not isinstance(conversations, ConversationStore):
            raise TypeError(
                "Runtime(conversations=...) must be a tether.ConversationStore "
                f"(InMemoryConversationStore, SQLiteConversationStore), got {conversations!r}"
            )
        #: Where ``conversation=`` runs load and append their messages, or ``None``.
        self.conversations = conversations
        self._turns = Turns()
        self._tg: TaskGroup | None = None
        self._services: RuntimeServices | None = None
        self._runs: dict[str, Run] = {}
        #: The ids of runs whose record :meth:`submit` is writing.
        self._recording: set[str] = set()
        self._ids = itertools.count(1)
        self._prefix = os.urandom(3).hex()

    async def __aenter__(self) -> Runtime:
        if self._tg is not None:
            raise RuntimeError("this Runtime is already running")
        if self._keeper is not None:  # a store that cannot be used fails here, not per run
            await self._keeper.store.claimable(limit=1)
        self._gc.enter()  # before anything starts: a tuning that conflicts is refused here
        if self._sink is not None:
            self._sink_thread = SinkThread(self._sink, self.sink_backlog)
        self._services = RuntimeServices(
            tool_threads=self.tool_threads,
            max_concurrent_runs=self.max_concurrent_runs,
            provider_concurrency=self.provider_concurrency,
            budget=self._budget,
            sink=self._sink_thread,
            new_run_id=self.new_run_id,
            budget_spent=self._budget_spent,
            run_finished=self._forget,
            delta_sink=self._sink_thread.delta
            if self._sink_thread is not None and wants_deltas(self._sink)
            else None,
        )
        self._services.on_gate_pause = self._hooks.on_gate_pause
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._services.toolsets.bind(tg)
        if self._budget is not None:
            self._budget.bind(tg)  # a fleet's slice keeps its ledger contact (_fleetbudget)
        if self._keeper is not None:
            tg.start_soon(self._keeper.keep, self.resume, name="tether-run-store-keeper")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg, services = self._tg, self._services
        assert tg is not None
        assert services is not None
        try:
            if exc_type is None and self._runs:
                with anyio.move_on_after(self.shutdown_grace_s):
                    await self._wait_all()
            for run in list(self._runs.values()):
                run.cancel("runtime shutdown")
            services.toolsets.close()  # MCP connections: their tasks end with the group
            if self._budget is not None:
                self._budget.close()
            if self._keeper is not None:
                self._keeper.stop()
            return await tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None
            self._gc.exit()
            await close_shared(
                services,
                self._budget,
                self._sink_thread,
                self.shutdown_grace_s,
                self.conversations,
                self._keeper,
            )

    async def _wait_all(self) -> None:
        while self._runs:
            await next(iter(self._runs.values())).wait_finished()

    def start(
        self,
        agent: Agent[DepsT, OutputT],
        input: RunInput,
        *,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        settings: ModelSettings | None = None,
        deps: DepsT = None,  # type: ignore[assignment]
        history: Sequence[Message] | None = None,
        conversation: str | None = None,
    ) -> RunHandle[OutputT]:
        """Start a run and return its handle at once.

        ``input`` is a ``str``, or a sequence of ``str`` and ``tether.Image``
        parts, which the first user message carries (see :mod:`._input`).
        ``settings`` are merged over the agent's (the run's fields win); a
        setting the provider cannot honour is a ``ValueError`` here. ``deps``
        is what tools, policies and judges read as ``ctx.deps``. A provider with no API
        key where its endpoint needs one raises ``AuthenticationFailed`` here, at once.

        ``history`` is the transcript the run continues (a previous
        ``RunResult.messages``, say); it is checked here (see
        :func:`~._history.check_history`) and comes first in the run's messages.
        ``conversation`` names a conversation of ``Runtime(conversations=...)``:
        the run starts from its messages, after the runs started on it before
        have ended, and appends its new messages when it ends ok.

        With a run store the run is recorded once it has been prepared (after a
        ``max_concurrent_runs`` queue, say): until then another Runtime does not
        see it. :meth:`submit` returns only once it is recorded.
        """
        start = _check_start(self, agent, input, run_id, settings, deps, history, conversation)
        return self._launch(agent, start, parent_run_id, conversation, recorded=False)

    async def submit(
        self,
        agent: Agent[DepsT, OutputT],
        input: RunInput,
        *,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        settings: ModelSettings | None = None,
        deps: DepsT = None,  # type: ignore[assignment]
        history: Sequence[Message] | None = None,
        conversation: str | None = None,
    ) -> RunHandle[OutputT]:
        """:meth:`start`, returning once the run store has the run's record: from then
        on any Runtime on the store finds it, and one with ``resume=True`` continues it
        if this process dies, even before it began. Without a store: :meth:`start`.

        The record (history and first user message; a conversation's messages come
        with the first checkpoint) is made before the run is prepared or queued. A
        store error raises here and starts no run; cancelled during the write, the
        run starts all the same (the cancellation lands at the caller's next await).
        """
        start = _check_start(self, agent, input, run_id, settings, deps, history, conversation)
        keeper = self._keeper
        if keeper is None:
            return self._launch(agent, start, parent_run_id, conversation, recorded=False)
        checked, run_id = start
        self._recording.add(run_id)  # no start() may take the id while it is written
        try:
            with anyio.CancelScope(shield=True):
                await keeper.record(run_id, agent, checked, parent_run_id)
        finally:
            self._recording.discard(run_id)
        return self._launch(agent, start, parent_run_id, conversation, recorded=True)

    def _launch(
        self,
        agent: Agent[DepsT, OutputT],
        start: _Start,
        parent_run_id: str | None,
        conversation: str | None,
        *,
        recorded: bool,
    ) -> RunHandle[OutputT]:
        """Make the run and start its task (no await: it cannot be cut half made)."""
        if self._tg is None or self._services is None:
            raise RuntimeClosed("use the Runtime inside 'async with tether.Runtime() as rt:'")
        checked, run_id = start
        if recorded:
            _check_free(self, run_id)  # (a run of that id cannot have been recorded twice)
        chat = None
        if conversation is not None:
            assert self.conversations is not None
            chat = Chat(self.conversations, conversation, self._turns.take(conversation))
        transcript = Transcript.of(agent, checked.history, chat)
        keeper = self._keeper
        durable = None if keeper is None else keeper.durable(run_id, agent, recorded=recorded)
        run = Run(
            self._services,
            agent,
            checked.text,
            run_id,
            parent_run_id,
            checked.first,
            checked.extras,
            transcript=transcript,
            durable=durable,
        )
        if keeper is not None and durable is not None:
            keeper.adopt(run, durable)
        self._runs[run_id] = run
        spawn(self._tg, run.main, name=f"tether-run:{run_id}")
        return RunHandle[OutputT](run)

    # ------------------------------------------------------------ durable runs

    def handle(self, run_id: str) -> RunHandle[Any]:
        """A handle on run ``run_id``: the live one if it is in flight here, else the
        store's (:class:`StoredRunHandle`; needs ``Runtime(store=...)``).

        :class:`~tether.RunNotFound` (a ``KeyError``) for an id nobody knows: here
        without a store; with one, from the handle's first read (``events()``'
        first event, ``result()``), since this method does not wait for the store.
        """
        run = self._runs.get(run_id)
        if run is not None:
            return RunHandle[Any](run)
        if self._keeper is None:
            raise RunNotFound(
                f"no run {run_id!r} is in flight in this Runtime (and it has no run store: "
                "create it with tether.Runtime(store=tether.SQLiteRunStore('runs.db')))"
            )
        if self._tg is None:
            raise RuntimeClosed("use the Runtime inside 'async with tether.Runtime() as rt:'")
        tg = self._tg
        keeper = self._keeper
        return StoredRunHandle(
            StoredRun(
                keeper.store, run_id, keeper.agents, lambda job: tg.start_soon(job), self.resume
            )
        )

    async def resume(self, run_id: str) -> RunHandle[Any]:
        """Claim run ``run_id`` from the store and continue it here from its last checkpoint.

        :class:`~tether.RunNotFound` if the store has no such run; a ``ValueError`` if it has
        finished, is owned under a live lease, is parked, or is a run of an
        agent this Runtime does not know (the run is then left claimable).
        """
        keeper, services, tg = self._keeper, self._services, self._tg
        if keeper is None:
            raise ValueError("resume() needs a run store: tether.Runtime(store=..., agents=[...])")
        if tg is None or services is None:
            raise RuntimeClosed("use the Runtime inside 'async with tether.Runtime() as rt:'")
        if run_id in self._runs:
            raise ValueError(f"run {run_id!r} is already in flight in this Runtime")
        agent, claim, events = await keeper.claim(run_id)
        stored = claim.run
        run = Run(
            services,
            agent,
            stored.input,
            run_id,
            stored.parent_run_id,
            extras=prepare(agent, None, None),
            transcript=Transcript.of(agent),
            durable=(durable := keeper.resumed(claim, events)),  # the run restores itself
        )
        keeper.adopt(run, durable)
        self._runs[run_id] = run
        spawn(tg, run.main, name=f"tether-run:{run_id}")
        return RunHandle[Any](run)

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
        """Run ``agent`` on ``input`` and return its result (``settings``, ``deps``: see
        :meth:`start`).

        Cancelling the caller cancels the run (it still finishes ``cancelled``).
        """
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
                handle.cancel("the caller of Runtime.run() was cancelled")

    async def approve(self, run_id: str, call_id: str) -> None:
        """Let a held tool call run: of a run in flight here, or parked in the store.

        A parked run whose held calls are all answered now is resumed here if
        this Runtime knows its agent (else by any Runtime with ``resume=True``).
        """
        await self._answer(run_id, call_id, True, None)

    async def reject(self, run_id: str, call_id: str, reason: str = "rejected") -> None:
        """Refuse a held tool call (see :meth:`approve`); the model gets ``reason``."""
        await self._answer(run_id, call_id, False, reason)

    async def _answer(self, run_id: str, call_id: str, approved: bool, note: str | None) -> None:
        run = self._runs.get(run_id)
        if run is not None and run._durable is None:
            run.answer(call_id, approved, note)
            return
        if run is not None:
            await _until_parked(run, call_id)
        keeper = self._keeper
        if keeper is None:
            raise RunNotFound(f"no run {run_id!r} is in flight in this Runtime")
        answer = Answer(call_id=call_id, approved=approved, note=note)
        try:
            last = await keeper.store.answer(run_id, answer)
        except KeyError:
            if await keeper.store.get(run_id) is None:
                raise RunNotFound(f"the run store has no run {run_id!r}") from None
            raise  # not parked, or not a pending call of it: the store's words
        if last:  # the last answer: resume it
            # An agent unknown here, or another Runtime claimed it first: not ours to go on.
            with contextlib.suppress(ValueError):
                await self.resume(run_id)

    async def pending_approvals(self, run_id: str) -> list[PendingApproval]:
        """The held calls of run ``run_id``, in flight here or parked in the store."""
        run = self._runs.get(run_id)
        if run is not None:
            return RunHandle[Any](run)._pending()
        if self._keeper is None:
            raise RunNotFound(f"no run {run_id!r} is in flight in this Runtime")
        return await stored_pending(self._keeper.store, run_id)

    # ------------------------------------------------------------ for integrations

    def in_flight(self, run_id: str) -> RunHandle[Any] | None:
        """The handle of run ``run_id`` if it is in flight here (started or resumed
        by this Runtime and not yet finished or parked), else ``None``."""
        return None if (run := self._runs.get(run_id)) is None else RunHandle[Any](run)

    @property
    def owner(self) -> str | None:
        """This Runtime's name in the run store's leases (``None``: no store)."""
        return None if self._keeper is None else self._keeper.owner

    def add_agent(self, agent: Agent[Any, Any]) -> None:
        """Let this Runtime resume runs of ``agent`` too (as ``Runtime(agents=...)``
        does); the first agent given for a name stays. Without a store, nothing to do."""
        if not isinstance(agent, Agent):
            raise TypeError(f"add_agent() wants a tether.Agent, got {agent!r}")
        if self._keeper is not None:
            self._keeper.agents.setdefault(agent.name, agent)

    def pause_gate(self, key: str, seconds: float) -> None:
        """Pause calls to provider endpoint ``key`` for ``seconds``, as a 429 with
        retry-after here would (another process got one; see :class:`RuntimeHooks`).
        Does nothing while the Runtime is not running."""
        if self._services is not None:
            self._services.pause_gate(key, seconds)

    def share_budget(
        self, link: LedgerLink, limits: Limits, *, poll_s: float = 0.05, idle_poll_s: float = 1.0
    ) -> SlicedBudget:
        """Make this Runtime (not yet entered) spend from a fleet's budget through
        ``link`` (see :mod:`tether.runtime` on fleet budgets and
        :class:`~tether.runtime.SlicedBudget` for ``poll_s``/``idle_poll_s``)."""
        if self._tg is not None:
            raise RuntimeError("share_budget() before entering the Runtime")
        if self._budget is not None:
            raise ValueError(
                "this Runtime has a budget of its own (Runtime(limits=...)): a host of a fleet "
                "takes its budget from the fleet's ledger"
            )
        self._budget = _slice_of(link, limits, poll_s=poll_s, idle_poll_s=idle_poll_s)
        return self._budget

    def _forget(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        if self._keeper is not None:
            self._keeper.forget(run_id)
        if (left := self._hooks.on_run_left) is not None:
            left(run_id)

    def _budget_spent(self, origin: str, hit: Hit) -> None:
        # The Runtime signals its runs; no run reaches into another.
        for run_id, run in list(self._runs.items()):
            if run_id != origin:
                run.force_end(hit)

    def new_run_id(self) -> str:
        return f"run-{self._prefix}-{next(self._ids)}"

    fork = fork  # await rt.fork(run_id, at_round=N, agent=...): tether.runtime._fork

    @property
    def sink_status(self) -> SinkStatus | None:
        """How the event sink keeps up: delivered, dropped, waiting (``None``: no sink)."""
        return None if self._sink_thread is None else self._sink_thread.status

    @property
    def budget(self) -> BudgetStatus | None:
        """What the Runtime-wide budget (``Runtime(limits=...)``) has used, or ``None``."""
        if (b := self._budget) is None:
            return None
        return BudgetStatus(
            max_total_tokens=b.max_total_tokens,
            max_cost_usd=b.max_cost_usd,
            tokens=b.tokens,
            cost_usd=b.cost_usd,
            unpriced_charges=b.unpriced,
            reserved_tokens=b.reserved_tokens,
            reserved_cost_usd=b.reserved_cost,
        )

    def reset_budget(self, limits: Limits | None = None) -> None:
        """Zero the Runtime-wide budget's usage; with ``limits``, also set new ceilings."""
        if self._budget is None:
            raise ValueError("this Runtime has no budget: create it with Runtime(limits=...)")
        self._budget.reset()
        if limits is not None:
            self._budget.max_total_tokens = limits.max_total_tokens
            self._budget.max_cost_usd = limits.max_cost_usd

    @property
    def running(self) -> int:
        """Runs started and not yet finished (queued included)."""
        return len(self._runs)


def _slice_of(
    link: LedgerLink, limits: Limits, *, poll_s: float, idle_poll_s: float
) -> SlicedBudget:
    """``_fleetbudget.slice_of``, imported here: only a fleet's host needs that module."""
    from ._fleetbudget import slice_of

    return slice_of(link, limits, poll_s=poll_s, idle_poll_s=idle_poll_s)


def _check_free(rt: Runtime, run_id: str) -> None:
    if run_id in rt._runs or run_id in rt._recording:
        raise ValueError(f"a run with id {run_id!r} is already in flight")


def _check_start(
    rt: Runtime,
    agent: Agent[Any, Any],
    input: RunInput,
    run_id: str | None,
    settings: ModelSettings | None,
    deps: Any,
    history: Sequence[Message] | None,
    conversation: str | None,
) -> _Start:
    """A start's arguments checked (a clear error here, not in the run), and its id."""
    if rt._tg is None or rt._services is None:
        raise RuntimeClosed("use the Runtime inside 'async with tether.Runtime() as rt:'")
    checked = check_start(
        agent,
        input,
        settings=settings,
        deps=deps,
        history=history,
        conversation=conversation,
        conversations=rt.conversations,
    )
    # Here, not in check_start: on Ray the key is the host's (read from its
    # environment where the run is placed), and the host's Runtime checks it.
    if (ready := getattr(agent.provider, "check_ready", None)) is not None:
        ready()  # AuthenticationFailed: no key where the endpoint needs one
    if rt._budget is not None and (hit := rt._budget.exhausted()) is not None:
        raise BudgetExhausted(
            f"the Runtime's budget is spent ({hit.ceiling}: {hit.used:g} of {hit.limit:g}); "
            "raise it or reset it with Runtime.reset_budget()"
        )
    run_id = run_id or rt.new_run_id()
    _check_free(rt, run_id)
    return checked, run_id


async def _until_parked(run: Run, call_id: str) -> None:
    """A durable run in flight here that is parking at ``call_id`` (its ApprovalRequested is
    out, its park is being written) or parked and not gone yet: wait until it has left.

    The store takes an answer only once the run is parked, and this Runtime can resume
    it only once it has left: answered earlier, the store would refuse the answer (not
    parked yet), or ``resume`` would (the run still in flight here) and the answer would
    wait in the store for a Runtime with ``resume=True``.
    """
    durable = run._durable
    assert durable is not None
    if durable.parked or any(p.call.id == call_id for p in run.pending_approvals()):
        await run.wait_finished()


async def stored_pending(store: RunStore, run_id: str) -> list[PendingApproval]:
    """The held calls of run ``run_id`` as ``store`` has them (none unless parked)."""
    stored = await store.get(run_id)
    if stored is None:
        raise RunNotFound(f"the run store has no run {run_id!r}")
    if stored.status != "parked" or stored.checkpoint is None:
        return []
    held = load_state(stored.checkpoint).approvals
    answered = {a.call_id for a in stored.answers}
    return [
        PendingApproval(call_id=i, name=p.call.name, arguments=p.call.input, reason=p.reason)
        for i in stored.pending
        if i not in answered and (p := held.get(i)) is not None
    ]


def _keeper(
    store: RunStore | None, agents: Sequence[Agent[Any, Any]], lease_s: float, resume: bool
) -> Keeper | None:
    """The Runtime's durable side, or ``None`` without a store (the arguments checked)."""
    if not isinstance(lease_s, int | float) or not lease_s > 0:
        raise ValueError(
            f"Runtime(lease_s=...) must be a positive number of seconds, got {lease_s!r}"
        )
    if store is None:
        if resume:
            raise ValueError("Runtime(resume=True) needs a run store: pass store=...")
        if agents:
            raise ValueError("Runtime(agents=...) is for resuming runs: pass store=... too")
        return None
    if not isinstance(store, RunStore):
        raise TypeError(
            "Runtime(store=...) must be a tether.RunStore (tether.SQLiteRunStore('runs.db'), "
            f"tether.postgres.PostgresRunStore(dsn)), got {store!r}"
        )
    return Keeper(store, list(agents), float(lease_s), bool(resume))
