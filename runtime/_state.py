"""What a run knows between rounds, as one value; and the decisions that move it.

:class:`RunState` holds everything a run carries from one round to the next:
the transcript, the counters and usage, the round number, the tool calls
waiting for approval, the recalled lessons, the candidate of this round and
the error so far. It turns into JSON and back losslessly
(:func:`dump_state` / :func:`load_state`), so a run can be checkpointed at a
round boundary and resumed from there.

What is *not* in it is machinery: the run's cancel scope, its children, the
event trail (kept by :class:`~._trail.Trail`) and the waiters of approvals.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import cattrs
import cattrs.preconf.json

from tether.actors import Judgement
from tether.providers import Message, ToolUseBlock, dump_message, load_message

from ._limits import Termination, Usage, UsageMeter
from ._repeats import NO_CALLS, RecentCalls


@attrs.define(kw_only=True)
class PendingApproval:
    """A tool call held for the host's answer (``Verdict.ask``)."""

    call: ToolUseBlock
    reason: str


@attrs.define(kw_only=True)
class RunState:
    """A run between rounds (see the module docstring). Only the Run changes it."""

    run_id: str
    agent: str
    #: The input's text form (a parts input's message is the first of ``messages``).
    input: str
    #: The system prompt as sent: the agent's instructions plus recalled lessons.
    system: str
    parent_run_id: str | None = None
    #: The round in progress (0 during preparation).
    round: int = 0
    messages: list[Message] = attrs.field(factory=list)
    #: Every counter and the usage so far.
    usage: UsageMeter = attrs.field(factory=UsageMeter)
    #: Lessons recalled at preparation (their ids, newest first).
    lesson_ids: tuple[str, ...] = ()
    #: Tools made callable by ``search_tools`` (discovery), in the order found.
    found_tools: list[str] = attrs.field(factory=list)
    #: Whether discovery holds the catalogue back (``search_tools`` first).
    discovery: bool = False
    #: The calls of the previous tool round, for the repeat check (see ``_repeats``).
    previous_calls: RecentCalls = NO_CALLS
    #: This round's candidate answer (``None`` once the round has none).
    candidate: str | None = None
    #: Its typed value (``Agent(output_type=...)``; set with ``candidate``).
    candidate_value: Any = None
    #: Text of responses cut off by ``max_tokens``, waiting for their continuation.
    partial: str = ""
    #: A terminal tool's result, or the text when continuations ran out.
    output: str | None = None
    judgement: Judgement | None = None
    #: Whether the context has been trimmed once after the window was exceeded.
    trimmed: bool = False
    approvals: dict[str, PendingApproval] = attrs.field(factory=dict)
    #: What went wrong, once something did.
    error: str | None = None


@attrs.frozen
class Decision:
    """The round-boundary transition (see docs/concepts/round.md), and the ending it implies."""

    kind: Literal["continue", "retry", "complete"]
    reason: str
    termination: Termination | None = None
    #: What went wrong, for endings that carry an error.
    error: str | None = None

    @classmethod
    def end(cls, termination: Termination, error: str | None = None) -> Decision:
        """Complete the run with ``termination`` (its value is the reason)."""
        return cls("complete", termination.value, termination, error)


@attrs.frozen(kw_only=True)
class RunView:
    """A read-only view of a run, given to ``round_end`` policies."""

    run_id: str
    agent: str
    round: int
    usage: Usage
    messages: tuple[Message, ...]
    candidate: str | None
    judgement: Judgement | None

    @classmethod
    def of(cls, state: RunState) -> RunView:
        return cls(
            run_id=state.run_id,
            agent=state.agent,
            round=state.round,
            usage=state.usage.freeze(),
            messages=tuple(state.messages),
            candidate=state.candidate,
            judgement=state.judgement,
        )


_converter = cattrs.preconf.json.make_converter()
# Messages in the transcript's own JSON form (``tether.dump_messages``): images' bytes as base64.
_converter.register_unstructure_hook(Message, dump_message)
_converter.register_structure_hook(Message, lambda data, _: load_message(data))
# The previous round's calls as [name, canonical arguments] pairs (what a frozenset of
# them unstructured to before RecentCalls).
_converter.register_unstructure_hook(RecentCalls, lambda calls: sorted(calls.keys()))
_converter.register_structure_hook(
    RecentCalls, lambda data, _: RecentCalls(keys=((str(n), str(k)) for n, k in data))
)


def dump_state(state: RunState) -> dict[str, Any]:
    """A JSON-ready dict of ``state``; :func:`load_state` reads it back equal."""
    data: dict[str, Any] = _converter.unstructure(state)
    # Tool arguments are whatever the model sent: make them plain JSON now, so the
    # dict is JSON-ready whatever they hold (an unencodable value becomes its repr).
    plain: dict[str, Any] = json.loads(json.dumps(data, default=repr))
    return plain


def load_state(data: Mapping[str, Any]) -> RunState:
    """The :class:`RunState` that :func:`dump_state` made ``data`` from."""
    return _converter.structure(dict(data), RunState)
