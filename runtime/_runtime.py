"""``Runtime``, the root supervisor, and ``RunHandle``."""

from __future__ import annotations

import itertools
import os
from types import TracebackType
from typing import Any

import anyio
import attrs
from anyio.abc import TaskGroup

from tether.providers import TetherError

from ._agent import Agent
from ._budget import Budget, Hit
from ._input import RunInput, parts_input
from ._limits import Limits
from ._result import RunResult
from ._run import Run
from ._services import RuntimeServices
from ._sinks import EventSink, SinkStatus, SinkThread, combine
from ._trail import EventStream


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
class PendingApproval:
    call_id: str
    name: str
    arguments: Any
    reason: str


class RunHandle:
    """The host's handle on one run: its events, its result, and cancellation."""

    __slots__ = ("_run",)

    def __init__(self, run: Run) -> None:
        self._run = run

    @property
    def run_id(self) -> str:
        return self._run.id

    @property
    def done(self) -> bool:
        return self._run.result is not None

    def events(self) -> EventStream:
        """Every event of the run from the first, then live ones until ``RunFinished``.

        Events are kept by the run, so a slow reader never stalls it and never
        misses one; any number of readers may follow one run.
        """
        return self._run.follow()

    def cancel(self, reason: str = "cancelled") -> None:
        """End the run now: in-flight calls are cancelled, the run ends ``cancelled``."""
        self._run.cancel(reason)

    def stop(self) -> None:
        """End the run gently: the current round finishes, then it ends ``cancelled``
        with reason ``"stopped"``. No call in flight is interrupted."""
        self._run.stop()

    def approve(self, call_id: str) -> None:
        """Let a tool call that a policy held for approval (``Verdict.ask``) run."""
        self._run.answer(call_id, True, None)

    def reject(self, call_id: str, reason: str = "rejected") -> None:
        """Refuse a held tool call; the model gets an is_error result with ``reason``."""
        self._run.answer(call_id, False, reason)

    def pending_approvals(self) -> list[PendingApproval]:
        """The tool calls waiting for :meth:`approve` or :meth:`reject`."""
        return [
            PendingApproval(
                call_id=a.call.id, name=a.call.name, arguments=a.call.input, reason=a.reason
            )
            for a in self._run.pending_approvals()
        ]

    async def result(self) -> RunResult:
        await self._run.wait_finished()
        assert self._run.result is not None
        return self._run.result

    def __repr__(self) -> str:
        state = self._run.result.termination.value if self._run.result else "running"
        return f"<RunHandle {self._run.id} {state}>"


class Runtime:
    """The root supervisor: one task group for all runs, shared gates and HTTP clients.

    ``async with tether.Runtime() as rt:`` works on asyncio and trio alike.
    On exit, runs still in flight get ``shutdown_grace_s`` to finish (none when
    the block raised), then are cancelled; each ends with exactly one
    ``RunFinished``. No task outlives the ``async with``.

    ``max_concurrent_runs`` queues runs past that number (``None``: no limit);
    a run's ``timeout_s`` starts when it leaves the queue.
    ``provider_concurrency`` caps requests in flight per provider endpoint.
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
    ) -> None:
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
        self._tg: TaskGroup | None = None
        self._services: RuntimeServices | None = None
        self._runs: dict[str, Run] = {}
        self._ids = itertools.count(1)
        self._prefix = os.urandom(3).hex()

    async def __aenter__(self) -> Runtime:
        if self._tg is not None:
            raise RuntimeError("this Runtime is already running")
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
        )
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._services.toolsets.bind(tg)
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
            return await tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(5):
                    await services.http.aclose()
                if self._sink_thread is not None:
                    await self._sink_thread.aclose(self.shutdown_grace_s)

    async def _wait_all(self) -> None:
        while self._runs:
            await next(iter(self._runs.values())).wait_finished()

    def start(
        self,
        agent: Agent,
        input: RunInput,
        *,
        run_id: str | None = None,
        parent_run_id: str | None = None,
    ) -> RunHandle:
        """Start a run and return its handle at once.

        ``input`` is a ``str``, or a sequence of ``str`` and ``tether.Image``
        parts, which the first user message carries (see :mod:`._input`).
        """
        if self._tg is None or self._services is None:
            raise RuntimeClosed("use the Runtime inside 'async with tether.Runtime() as rt:'")
        if not isinstance(agent, Agent):
            raise TypeError(f"start() wants a tether.Agent, got {type(agent).__name__}")
        text, first = (input, None) if isinstance(input, str) else parts_input(input)
        if self._budget is not None and (hit := self._budget.exhausted()) is not None:
            raise BudgetExhausted(
                f"the Runtime's budget is spent ({hit.ceiling}: {hit.used:g} of {hit.limit:g}); "
                "raise it or reset it with Runtime.reset_budget()"
            )
        run_id = run_id or self.new_run_id()
        if run_id in self._runs:
            raise ValueError(f"a run with id {run_id!r} is already in flight")
        run = Run(self._services, agent, text, run_id, parent_run_id, first)
        self._runs[run_id] = run
        self._tg.start_soon(run.main, name=f"tether-run:{run_id}")
        return RunHandle(run)

    async def run(self, agent: Agent, input: RunInput, *, run_id: str | None = None) -> RunResult:
        """Run ``agent`` on ``input`` and return its result.

        Cancelling the caller cancels the run (it still finishes ``cancelled``).
        """
        handle = self.start(agent, input, run_id=run_id)
        try:
            return await handle.result()
        finally:
            if not handle.done:
                handle.cancel("the caller of Runtime.run() was cancelled")

    def _forget(self, run_id: str) -> None:
        self._runs.pop(run_id, None)

    def _budget_spent(self, origin: str, hit: Hit) -> None:
        # The Runtime signals its runs; no run reaches into another.
        for run_id, run in list(self._runs.items()):
            if run_id != origin:
                run.force_end(hit)

    def new_run_id(self) -> str:
        return f"run-{self._prefix}-{next(self._ids)}"

    @property
    def sink_status(self) -> SinkStatus | None:
        """How the event sink keeps up: delivered, dropped, waiting (``None``: no sink)."""
        return None if self._sink_thread is None else self._sink_thread.status

    @property
    def budget(self) -> BudgetStatus | None:
        """What the Runtime-wide budget (``Runtime(limits=...)``) has used, or ``None``."""
        b = self._budget
        if b is None:
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
