"""The checks every runtime makes when a run is started, in one place.

``Runtime.start`` and ``RayRuntime.start`` (and any other runtime of the
:class:`~tether.runtime.RuntimeLike` interface) call :func:`check_start`, so
a bad agent, input, setting, history or conversation fails with the same
error, worded the same, whichever runtime was asked. What is specific to one
runtime (its budget, where it places the run) is checked by that runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from tether.providers import Message, ModelSettings

from ._agent import Agent
from ._conversations import ConversationStore
from ._history import check_history
from ._input import RunInput, parts_input
from ._perrun import RunExtras, prepare


@attrs.frozen(kw_only=True)
class StartChecked:
    """What :func:`check_start` made of a run's arguments (a runtime that runs it
    here uses them; one that sends the run elsewhere sends the arguments as given)."""

    #: The input's text, and the first user message when the input has parts.
    text: str
    first: Message | None
    #: The run's merged settings and its deps.
    extras: RunExtras
    #: The checked ``history`` (empty without one).
    history: tuple[Message, ...]


def check_start(
    agent: object,
    input: RunInput,
    *,
    settings: ModelSettings | None = None,
    deps: Any = None,
    history: Sequence[Message] | None = None,
    conversation: str | None = None,
    conversations: ConversationStore | None = None,
) -> StartChecked:
    """Check a run's start arguments; raise ``TypeError``/``ValueError`` naming the bad one.

    ``conversations`` is the runtime's conversation store (``None``: it has
    none, so ``conversation=`` is refused).
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"start() wants a tether.Agent, got {type(agent).__name__}")
    text, first = (input, None) if isinstance(input, str) else parts_input(input)
    extras = prepare(agent, settings, deps)
    past = () if history is None else check_history(history)
    if conversation is not None:
        if conversations is None:
            raise ValueError(
                "conversation= needs a conversation store: create the runtime with "
                "conversations=tether.SQLiteConversationStore('chats.db') "
                "(or, on one Runtime, tether.InMemoryConversationStore())"
            )
        if not isinstance(conversation, str) or not conversation:
            raise TypeError(f"conversation= must be a non-empty str, got {conversation!r}")
        if history is not None:
            raise ValueError(
                "pass history= or conversation=, not both: a conversation's history is "
                "what its store holds"
            )
    return StartChecked(text=text, first=first, extras=extras, history=past)


__all__ = ["StartChecked", "check_start"]
