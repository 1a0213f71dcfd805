"""What the runs of one Runtime share: the Run's window onto its Runtime.

A run reaches its Runtime only through :class:`RuntimeServices`: the HTTP
pool, the tool threads, the provider gates, admission, the shared budget, the
event sink, the toolsets' connections, and three signals back (a new run id,
the shared budget spent, the run finished). It holds no reference to the Runtime or to other runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio

import tether.runtime._events as ev
from tether.actors import ProviderGate, ToolThreads
from tether.providers import HttpPool, Provider

from ._budget import Budget, Hit
from ._toolsets import ToolsetHub


class RuntimeServices:
    """Shared by every run of one Runtime."""

    def __init__(
        self,
        *,
        tool_threads: int,
        max_concurrent_runs: int | None,
        provider_concurrency: int,
        budget: Budget | None,
        sink: Callable[[ev.Event], object] | None,
        new_run_id: Callable[[], str],
        budget_spent: Callable[[str, Hit], None],
        run_finished: Callable[[str], None],
        delta_sink: Callable[
            [ev.TextDelta | ev.ToolCallDelta | ev.ReasoningDelta | ev.ToolOutputDelta], object
        ]
        | None = None,
    ) -> None:
        self.http = HttpPool()
        self.threads = ToolThreads(tool_threads)
        self._gates: dict[str, ProviderGate] = {}
        self._provider_concurrency = provider_concurrency
        self._admission = (
            anyio.CapacityLimiter(max_concurrent_runs) if max_concurrent_runs else None
        )
        #: The Runtime-wide budget, charged by every run, or ``None``.
        self.budget = budget
        #: Where every run sends its events (guarded: see ``combine``), or ``None``.
        self.sink = sink
        #: Where runs send their live deltas, when a sink asked for them; else ``None``.
        self.delta_sink = delta_sink
        #: A fresh run id (for sub-agents' runs).
        self.new_run_id = new_run_id
        #: The Runtime's budget is spent (by the run named): every other run ends.
        self.budget_spent = budget_spent
        #: The run named has its result.
        self.run_finished = run_finished
        #: The connections to toolsets (MCP servers), opened on first use.
        self.toolsets = ToolsetHub()
        #: Told ``(gate key, seconds)`` when a gate pauses after a 429 (a fleet's hosts).
        self.on_gate_pause: Callable[[str, float], object] | None = None

    def on_budget_spent(self, run_id: str) -> Callable[[Hit], None] | None:
        """What run ``run_id`` calls when it spends the Runtime's budget; ``None`` without one.

        Not a method of the run: the run would hold itself in a cycle."""
        return None if self.budget is None else functools.partial(self.budget_spent, run_id)

    def admission(self) -> AbstractAsyncContextManager[Any] | None:
        """What a run holds while it runs (``max_concurrent_runs``), or ``None``: no limit."""
        return self._admission

    def gate_for(self, provider: Provider) -> ProviderGate | None:
        key = provider.gate_key()
        if key is None:
            return None
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gate(key)
        return gate

    def _gate(self, key: str) -> ProviderGate:
        hook = self.on_gate_pause
        gate = self._gates[key] = ProviderGate(
            self._provider_concurrency,
            None if hook is None else lambda seconds: hook(key, seconds),
        )
        return gate

    def pause_gate(self, key: str, seconds: float) -> None:
        """Pause endpoint ``key`` for ``seconds``: another process got its 429."""
        gate = self._gates.get(key) or self._gate(key)
        gate.pause(seconds, tell=False)
