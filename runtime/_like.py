"""One runtime interface: :class:`RuntimeLike` and :class:`RunHandleLike`.

``tether.Runtime`` (one process) and ``tether.ray.RayRuntime`` (a fleet of
processes) implement :class:`RuntimeLike`; their handles, and the handle of a
run read from the run store (``rt.handle(run_id)`` of a run not in flight
here), implement :class:`RunHandleLike`. Code written against these works
with either runtime, and ``tests/typing/check_api.py`` has mypy check that
both conform.

The shape, chosen so a remote runtime can honour it: what may wait on another
process or the store is a coroutine (``run``, ``result``, ``approve`` and
``reject`` on the runtime, ``pending_approvals`` everywhere); what only asks
(``start``, a handle's ``cancel``, ``stop``, ``approve``, ``reject``) is a
plain method that returns at once. Event and text streams are async iterators.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

from tether.providers import Message, ModelSettings

from ._agent import Agent, DepsT, OutputT
from ._input import RunInput
from ._result import RunResult

if TYPE_CHECKING:
    import tether.runtime._events as ev

    from ._runtime import PendingApproval


class RunHandleLike(Protocol[OutputT]):
    """A handle on one run, wherever it runs (see the module docstring)."""

    @property
    def run_id(self) -> str: ...

    @property
    def done(self) -> bool:
        """The handle has the run's result (``result()`` returns at once)."""
        ...

    def events(self, *, deltas: bool = False) -> AsyncIterator[ev.Event]:
        """Every kept event from the first, then live ones until ``RunFinished``;
        with ``deltas=True`` the live deltas too (where the run is live)."""
        ...

    def stream_text(self) -> AsyncIterator[str]:
        """The text of the run's model calls as it arrives."""
        ...

    def cancel(self, reason: str = "cancelled") -> None:
        """End the run now (it ends ``cancelled``)."""
        ...

    def stop(self) -> None:
        """End the run after its current round (``cancelled``, reason ``"stopped"``)."""
        ...

    def approve(self, call_id: str) -> None:
        """Let a held tool call run."""
        ...

    def reject(self, call_id: str, reason: str = "rejected") -> None:
        """Refuse a held tool call; the model gets ``reason``."""
        ...

    async def pending_approvals(self) -> list[PendingApproval]:
        """The tool calls held for approval."""
        ...

    async def result(self) -> RunResult[OutputT]:
        """The run's result, once it has ended."""
        ...


class RuntimeLike(Protocol):
    """What ``Runtime`` and ``RayRuntime`` have alike (see the module docstring).

    Used as ``async with runtime as rt:``; ``start`` raises
    :class:`~tether.runtime.RuntimeClosed` outside that block. The start-time
    checks are the same on every runtime (:func:`~tether.runtime.check_start`).
    """

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...

    def start(
        self,
        agent: Agent[DepsT, OutputT],
        input: RunInput,
        *,
        run_id: str | None = None,
        settings: ModelSettings | None = None,
        deps: DepsT = ...,
        history: Sequence[Message] | None = None,
        conversation: str | None = None,
    ) -> RunHandleLike[OutputT]:
        """Start a run and return its handle at once."""
        ...

    async def run(
        self,
        agent: Agent[DepsT, OutputT],
        input: RunInput,
        *,
        run_id: str | None = None,
        settings: ModelSettings | None = None,
        deps: DepsT = ...,
        history: Sequence[Message] | None = None,
        conversation: str | None = None,
    ) -> RunResult[OutputT]:
        """Run ``agent`` on ``input`` and return its result."""
        ...

    def handle(self, run_id: str) -> RunHandleLike[Any]:
        """A handle on run ``run_id`` (a ``KeyError`` where the runtime cannot find it)."""
        ...

    async def approve(self, run_id: str, call_id: str) -> None:
        """Let a held tool call of run ``run_id`` run, wherever the run is."""
        ...

    async def reject(self, run_id: str, call_id: str, reason: str = "rejected") -> None:
        """Refuse a held tool call of run ``run_id``."""
        ...

    async def pending_approvals(self, run_id: str) -> list[PendingApproval]:
        """The held calls of run ``run_id``, wherever it is."""
        ...

    def new_run_id(self) -> str:
        """A fresh run id."""
        ...

    @property
    def running(self) -> int:
        """Runs in flight."""
        ...


__all__ = ["RunHandleLike", "RuntimeLike"]
