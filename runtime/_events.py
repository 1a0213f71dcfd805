"""The event trail of a run (see docs/concepts/events.md).

Every event is a frozen attrs class carrying ``run_id``, ``seq`` (gap-free per
run, from 0), ``round`` (0 during preparation) and ``at`` (unix time).
:func:`dump` turns one into a JSON-ready dict tagged with ``"type"``;
:func:`load` reads it back to an equal event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs
import cattrs

from tether.providers import Reasoning, TokenUsage, ToolUseBlock

from ._limits import Termination, Usage

Stage = Literal[
    "input",
    "memory",
    "tools",
    "context",
    "model",
    "policy",
    "execute",
    "judge",
    "decide",
    "finalize",
]
ChargeSource = Literal["model", "judge", "subagent"]
ToolOutcome = Literal[
    "ok",
    "model_error",
    "transient_error",
    "fatal_error",
    "denied",
    "nudged",
    "timeout",
    "cancelled",
]


@attrs.frozen(kw_only=True)
class Event:
    run_id: str
    seq: int
    round: int
    at: float


@attrs.frozen(kw_only=True)
class RunStarted(Event):
    agent: str
    input: str
    #: The parent run, for a sub-agent's run.
    parent_run_id: str | None = None
    #: The agent's provider (``anthropic``, ``openai``, ``scripted``) and model.
    provider: str | None = None
    model: str | None = None
    #: The text an ``Agent(instructions=fn)`` function gave this run (``None``: the
    #: agent's instructions are a static ``str``).
    instructions: str | None = None


@attrs.frozen(kw_only=True)
class StageEntered(Event):
    stage: Stage


@attrs.frozen(kw_only=True)
class StageExited(Event):
    stage: Stage


@attrs.frozen(kw_only=True)
class LessonsRecalled(Event):
    lesson_ids: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ModelCallStarted(Event):
    attempt: int
    #: The request's output-token cap, after clamping to the budgets.
    max_tokens: int | None = None


@attrs.frozen(kw_only=True)
class ProviderRetry(Event):
    error_type: str
    attempt: int
    wait_s: float
    message: str = ""


@attrs.frozen(kw_only=True)
class ProviderFallback(Event):
    """A ``FallbackProvider``'s provider failed for good; the same request goes to
    the next one (``to_model``), which the run then stays on."""

    from_model: str
    to_model: str
    error_type: str
    from_provider: str = ""
    to_provider: str = ""
    #: The failure that made the switch.
    message: str = ""


@attrs.frozen(kw_only=True)
class ProviderWait(Event):
    """The run waited on its provider's gate (another run's 429 paused everyone)."""

    wait_s: float
    reason: str


@attrs.frozen(kw_only=True)
class UsageCharged(Event):
    """Usage charged to the run; the run's usage is the sum of these."""

    source: ChargeSource
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    #: Counted by tether's estimator: the provider reported no usage for this call.
    estimated: bool = False
    #: Of ``input_tokens`` (which counts every input token): prompt-cache reads and writes.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@attrs.frozen(kw_only=True)
class ModelCallFinished(Event):
    stop_reason: str
    usage: TokenUsage
    text: str
    tool_calls: tuple[ToolUseBlock, ...]
    raw_stop_reason: str | None = None
    #: The model that answered, as the provider reported it.
    model: str | None = None
    #: The response's reasoning blocks (with their signatures), for replay: with
    #: ``text`` and ``tool_calls`` they are the whole response. Trails written before
    #: this field replay without them.
    reasoning: tuple[Reasoning, ...] = ()


@attrs.frozen(kw_only=True)
class PolicyChecked(Event):
    point: Literal["input", "response", "tool_call", "round_end"]
    verdict: Literal["allow", "deny", "block", "ask"]
    reason: str | None = None
    #: The call checked, at the ``tool_call`` point.
    call_id: str | None = None


@attrs.frozen(kw_only=True)
class ToolCallStarted(Event):
    call_id: str
    name: str
    arguments: Any


@attrs.frozen(kw_only=True)
class ToolCallFinished(Event):
    call_id: str
    name: str
    outcome: ToolOutcome
    is_error: bool
    attempts: int
    content: str


@attrs.frozen(kw_only=True)
class ApprovalRequested(Event):
    """A policy asked for the host's approval of a tool call; the call waits."""

    call_id: str
    name: str
    arguments: Any
    reason: str


@attrs.frozen(kw_only=True)
class ApprovalAnswered(Event):
    call_id: str
    approved: bool
    reason: str | None = None


@attrs.frozen(kw_only=True)
class Judged(Event):
    scores: Mapping[str, float]
    passed: bool
    feedback: Mapping[str, str]
    #: The round whose candidate was judged (always this round: a score lives one round).
    candidate_round: int = 0
    error: str | None = None


@attrs.frozen(kw_only=True)
class Transition(Event):
    kind: Literal["continue", "retry", "complete"]
    reason: str


@attrs.frozen(kw_only=True)
class CeilingHit(Event):
    ceiling: str
    limit: float
    used: float


@attrs.frozen(kw_only=True)
class MemoryFailed(Event):
    """The lesson store failed; the run goes on without it."""

    operation: Literal["recall", "store"]
    error: str


@attrs.frozen(kw_only=True)
class ChildCrashed(Event):
    """A child actor crashed on a request; the request failed and was not replayed."""

    actor: str
    error: str


@attrs.frozen(kw_only=True)
class MCPToolsListed(Event):
    """The tools a run got from an MCP server: at its start, and when the list changed."""

    server: str
    #: The names the model sees (``prefix`` included), after ``tool_filter``.
    tools: tuple[str, ...]


@attrs.frozen(kw_only=True)
class MCPServerRestarted(Event):
    """An MCP server's connection was lost and reopened since the run's last round."""

    server: str
    #: Reconnections of this server in this Runtime so far.
    restarts: int
    #: Why the previous connection ended.
    error: str


@attrs.frozen(kw_only=True)
class ChildRunFinished(Event):
    """A sub-agent's run (``agent.as_tool()``) ended; its own events carry its run_id."""

    call_id: str
    child_run_id: str
    termination: str


@attrs.frozen(kw_only=True)
class LessonStored(Event):
    lesson_id: str


@attrs.frozen(kw_only=True)
class ConversationLoaded(Event):
    """The run starts from its conversation's stored messages (``conversation=``)."""

    conversation: str
    messages: int


@attrs.frozen(kw_only=True)
class ConversationAppended(Event):
    """The run ended ok and its new messages were appended to its conversation."""

    conversation: str
    messages: int


@attrs.frozen(kw_only=True)
class ConversationFailed(Event):
    """The conversation store failed: a run that cannot load ends; one that cannot
    append keeps its termination, with the error in ``RunFinished.error``."""

    conversation: str
    operation: Literal["load", "append"]
    error: str


@attrs.frozen(kw_only=True)
class ContextBounded(Event):
    """Before a request, the context strategy dropped old messages to fit the model's
    context window (by tether's token estimate)."""

    window: int
    #: The estimated tokens the messages may take: the window less the system prompt,
    #: the tools and the request's ``max_tokens``.
    budget: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int


@attrs.frozen(kw_only=True)
class TextDelta(Event):
    """A piece of a model call's text as it streams (see docs/guides/streaming.md). Live only.

    Deltas go only to readers that ask for them (``handle.events(deltas=True)``,
    ``handle.stream_text()``, a sink with ``deltas = True``); they are never
    kept in the trail, never replayed, and never in ``RunResult.events``: the
    whole text is in the call's ``ModelCallFinished``. A delta takes no number
    of its own: its ``seq`` is that of the last kept event before it (its
    call's ``ModelCallStarted``, or a later one), so the kept trail stays
    gap-free, and sorting a reader's events by ``seq`` (stably) keeps them in order.
    ``round`` is the round of its call. A reader that falls behind gets the
    text joined (per call and attempt), never less of it.
    """

    text: str
    #: The run's model call it belongs to, from 0 (retries of one call share it).
    call_index: int
    #: The provider attempt (from 1): after a ``ProviderRetry`` the call's text starts over.
    attempt: int = 1


@attrs.frozen(kw_only=True)
class ToolCallDelta(Event):
    """A piece of a tool call's arguments (JSON text) as it streams. Live only, as
    :class:`TextDelta` is; the parsed call is in ``ModelCallFinished.tool_calls``."""

    call_id: str
    name: str
    arguments_delta: str
    call_index: int = 0
    attempt: int = 1


@attrs.frozen(kw_only=True)
class ReasoningDelta(Event):
    """A piece of a model call's reasoning text (or its summary) as it streams. Live
    only, as :class:`TextDelta` is; the whole reasoning, with its signature, is in
    the transcript (``RunResult.messages``) as :class:`tether.Reasoning` blocks."""

    text: str
    call_index: int = 0
    attempt: int = 1


@attrs.frozen(kw_only=True)
class ToolOutputDelta(Event):
    """A piece of a tool call's output as the tool streams it (``RunContext.emit_output``:
    a remote A2A agent's text, say). Live only, as :class:`TextDelta` is; the call's
    result is in its ``ToolCallFinished``."""

    call_id: str
    name: str
    text: str


#: The live-only events: never kept, never replayed.
DELTA_TYPES = (TextDelta, ToolCallDelta, ReasoningDelta, ToolOutputDelta)


@attrs.frozen(kw_only=True)
class RunResumed(Event):
    """The seam of a durable run resumed by another owner (see docs/guides/durable.md).

    The events before it are the stored ones, up to the last checkpoint; the
    run goes on from round ``from_round`` + 1 (the round in flight at the crash
    is done again).
    """

    from_round: int
    #: The owner whose lease expired (``None``: a parked run answered, or released).
    previous_owner: str | None = None


@attrs.frozen(kw_only=True)
class RunForked(Event):
    """The seam of a forked run (``Runtime.fork``, see docs/guides/replay.md).

    The rounds before it replayed run ``from_run``'s recorded model responses and
    tool results (no model call, no tool execution); from here on the run is live.
    It comes in round ``at_round`` + 1, right after that round's ``ModelCallStarted``:
    where the first request goes to the live provider.
    """

    from_run: str
    at_round: int


@attrs.frozen(kw_only=True)
class RunFinished(Event):
    termination: Termination
    usage: Usage
    output: str | None = None
    #: What went wrong, for ``crashed`` (the traceback), ``provider_failed``,
    #: ``fatal_tool_error``, ``policy_blocked`` and ``cancelled`` (the reason).
    error: str | None = None


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        RunStarted,
        StageEntered,
        StageExited,
        LessonsRecalled,
        ModelCallStarted,
        ProviderRetry,
        ProviderFallback,
        ProviderWait,
        UsageCharged,
        ModelCallFinished,
        PolicyChecked,
        ToolCallStarted,
        ToolCallFinished,
        ApprovalRequested,
        ApprovalAnswered,
        Judged,
        Transition,
        CeilingHit,
        LessonStored,
        MemoryFailed,
        ChildCrashed,
        ChildRunFinished,
        ConversationLoaded,
        ConversationAppended,
        ConversationFailed,
        ContextBounded,
        MCPToolsListed,
        MCPServerRestarted,
        RunResumed,
        RunForked,
        RunFinished,
        TextDelta,
        ToolCallDelta,
        ReasoningDelta,
        ToolOutputDelta,
    )
}

_converter = cattrs.Converter()


def dump(event: Event) -> dict[str, Any]:
    """A JSON-ready dict of ``event``, with ``"type": "<ClassName>"``."""
    data: dict[str, Any] = _converter.unstructure(event)
    data["type"] = type(event).__name__
    return data


def load(data: Mapping[str, Any]) -> Event:
    """The event :func:`dump` produced ``data`` from."""
    fields = dict(data)
    name = fields.pop("type", None)
    cls = EVENT_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"not a tether event: type {name!r}")
    return _converter.structure(fields, cls)
