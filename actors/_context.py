"""``RunContext``: what a tool (and a policy, and a judge) may know about its run.

A tool whose first parameter is annotated ``RunContext[DepsT]`` receives the
context there (that parameter stays out of the tool's JSON schema); any code
inside a tool call can also read it with :func:`current_tool_context`. The
context of one call is one object: the same in the tool, in tasks it starts,
and in a sync tool's worker thread (contextvars are copied into it).
"""

from __future__ import annotations

import contextvars
import sys
from typing import Any, Generic, Protocol

import attrs

if sys.version_info >= (3, 13):
    from typing import TypeVar
else:  # TypeVar defaults (PEP 696); typing_extensions comes with anyio below 3.13
    from typing_extensions import TypeVar

#: The type of a run's dependencies (``rt.start(..., deps=...)``); ``Any`` unless told.
DepsT = TypeVar("DepsT", default=Any)
DepsT_co = TypeVar("DepsT_co", covariant=True, default=Any)


class ChildRunner(Protocol):
    """The one capability a tool has on the Runtime: run an agent as a child run.

    The Runtime hands it to every tool call (:attr:`RunContext.run_child`); the
    child runs inside the calling tool, on the parent's remaining budget, and
    what it spent is charged to the parent through the returned
    :class:`ToolOutput`. ``agent`` is a ``tether.Agent`` (anything else is a
    ``TypeError``): the actors layer does not know the runtime's types.
    """

    async def __call__(self, agent: object, task: str, /) -> ToolOutput: ...


class OutputSink(Protocol):
    """Where a tool call's streamed output goes: ``(call_id, text)``, never blocking.

    The Runtime hands one to every tool call (:attr:`RunContext.output_sink`);
    a tool streams through :meth:`RunContext.emit_output`.
    """

    def __call__(self, call_id: str, text: str, /) -> None: ...


@attrs.frozen(kw_only=True)
class ToolOutput:
    """A tool result that carries more than its text.

    A tool may return one to mark its result as an error the model should see
    (``is_error``), or to charge the calling run for usage it caused
    (a sub-agent's tokens and cost), with the child run's id for the trail.
    """

    content: str
    is_error: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    child_run_id: str | None = None
    child_termination: str | None = None


@attrs.frozen(kw_only=True)
class RunContext(Generic[DepsT_co]):
    """What a running tool, policy or judge may know about the run that called it.

    ``deps`` is the run's dependency object (``rt.start(..., deps=obj)``,
    ``None`` when none was given); ``call_id`` is the tool call's id (empty
    for policies and judges); ``remaining_tokens`` and ``remaining_cost_usd``
    are what the run's tightest budgets had left when the context was made
    (``None``: unbounded). Sub-agent tools use :attr:`run_child` to run a child
    run on the parent's budget. A tool with side effects to deduplicate uses
    :attr:`idempotency_key`. ``tether.ToolContext`` is the same class.
    """

    run_id: str
    call_id: str = ""
    deps: DepsT_co = attrs.field(default=None, eq=False, repr=False)
    #: Runs an agent as a child of this run (``None`` outside a Runtime).
    run_child: ChildRunner | None = attrs.field(default=None, eq=False)
    remaining_tokens: int | None = None
    remaining_cost_usd: float | None = None
    #: The lease epoch of the Runtime that runs this call, for a durable run (one
    #: with a run store); ``None`` otherwise. It grows each time another owner
    #: claims the run.
    epoch: int | None = None
    #: Takes the call's streamed output (``None`` outside a Runtime): see :meth:`emit_output`.
    output_sink: OutputSink | None = attrs.field(default=None, eq=False, repr=False)

    def emit_output(self, text: str) -> None:
        """Stream a piece of this tool call's output to the run's readers of deltas, live.

        It becomes a ``ToolOutputDelta`` (live only, as a ``TextDelta`` is; the
        call's result is still what the tool returns). Never blocks; nothing
        happens when nobody reads deltas, or outside a Runtime.
        """
        if self.output_sink is not None and text:
            self.output_sink(self.call_id, text)

    @property
    def idempotency_key(self) -> str:
        """A key for the side effects of this tool call: ``"{run_id}:{call_id}:{epoch}"``
        for a durable run, ``"{run_id}:{call_id}"`` for a run without a store.

        The same for every attempt of the call (the tool's retries) under one owner,
        so a service that deduplicates on it never does the call's work twice for
        one owner. A Runtime that resumes the run after its owner died runs a call
        that had not finished again, with a higher epoch: a service can key its
        deduplication on the part before the epoch (the call) and refuse a request
        whose epoch is lower than one it has seen for that call (a stale owner).
        """
        if self.epoch is None:
            return f"{self.run_id}:{self.call_id}"
        return f"{self.run_id}:{self.call_id}:{self.epoch}"


#: The name tools have used so far; one class, not two mechanisms.
ToolContext = RunContext

_CONTEXT: contextvars.ContextVar[RunContext[Any] | None] = contextvars.ContextVar(
    "tether_tool_context", default=None
)


def current_tool_context() -> RunContext[Any] | None:
    """The context of the tool call running in this task, or ``None`` outside one."""
    return _CONTEXT.get()


__all__ = [
    "ChildRunner",
    "DepsT",
    "OutputSink",
    "RunContext",
    "ToolContext",
    "ToolOutput",
    "current_tool_context",
]
