"""History: the earlier messages a run continues from (see docs/guides/history.md).

``rt.start(agent, input, history=...)`` takes a sequence of
:class:`tether.Message`. It is checked once, at the call, so a malformed
history is a ``TypeError``/``ValueError`` naming the message at fault instead
of a 400 from the provider rounds later. The rules are the pairing rule of
The pairing rules of docs/guides/tools.md, applied to what the caller hands in:

- every item is a ``Message`` whose role is ``"user"`` or ``"assistant"``;
- ``tool_use`` blocks appear only in assistant messages, ``tool_result``
  blocks only in user messages;
- every ``tool_use`` is answered by exactly one ``tool_result`` with its id,
  in the very next message, which is a user message; and every
  ``tool_result`` answers a ``tool_use`` of the assistant message just before.

How a history may end:

- on an assistant message (the usual case): the run's input follows as the
  next user message;
- on a user message (a run that ended after a tool round, a continuation
  prompt, or a question never answered): the input follows as a further
  user message. Both providers accept consecutive user messages (Anthropic
  joins them into one turn), and the history is kept as it was, so
  :attr:`RunResult.messages` still starts with it;
- on an assistant ``tool_use`` with no answer (a *dangling* call): refused.
  A run never produces one (every call it makes is answered, whatever
  happens), so such a history was cut or built by hand; nothing can tell
  whether the call ran, and the provider would refuse the request.

The run's first user message is built in one place, :func:`user_message`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.providers import Message, ToolResultBlock, ToolUseBlock


def user_message(input: str) -> Message:
    """The user message a run's input becomes."""
    return Message.user(input)


def check_history(history: object) -> tuple[Message, ...]:
    """``history`` as a tuple, after the checks of the module docstring.

    Raises ``TypeError`` for what is not a sequence of ``Message`` and
    ``ValueError`` for a role or a tool pairing that breaks the rules.
    """
    if isinstance(history, str | bytes) or not isinstance(history, Sequence):
        raise TypeError(
            f"history must be a sequence of tether.Message (for example a previous "
            f"RunResult.messages), got {type(history).__name__}"
        )
    messages = tuple(history)
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise TypeError(
                f"history[{i}] is a {type(message).__name__}, not a tether.Message; "
                "build messages with tether.Message (or read JSON back with tether.load_messages)"
            )
        if message.role not in ("user", "assistant"):
            raise ValueError(
                f"history[{i}] has role {message.role!r}; a message's role is 'user' or "
                "'assistant' (the system prompt is the agent's instructions)"
            )
    for i, message in enumerate(messages):
        _check_pairs(messages, i, message)
    return messages


def _check_pairs(messages: tuple[Message, ...], i: int, message: Message) -> None:
    uses = [b.id for b in message.content if isinstance(b, ToolUseBlock)]
    results = [b.tool_use_id for b in message.content if isinstance(b, ToolResultBlock)]
    if message.role == "user" and uses:
        raise ValueError(
            f"history[{i}] is a user message with a tool_use block ({uses[0]!r}); "
            "tool calls belong to assistant messages"
        )
    if message.role == "assistant" and results:
        raise ValueError(
            f"history[{i}] is an assistant message with a tool_result block ({results[0]!r}); "
            "tool results belong to the user message after the call"
        )
    if results:
        before = messages[i - 1] if i else None
        asked = (
            set()
            if before is None or before.role != "assistant"
            else {b.id for b in before.content if isinstance(b, ToolUseBlock)}
        )
        for call_id in results:
            if call_id not in asked:
                raise ValueError(
                    f"history[{i}] has a tool_result for {call_id!r}, which the assistant "
                    f"message just before did not call; keep each tool_result right after "
                    "the message with its tool_use"
                )
    if not uses:
        return
    repeated = sorted({u for u in uses if uses.count(u) > 1})
    if repeated:
        raise ValueError(f"history[{i}] calls the tool_use id {repeated[0]!r} more than once")
    after = messages[i + 1] if i + 1 < len(messages) else None
    if after is None:
        raise ValueError(
            f"history ends with a tool call nobody answered ({', '.join(map(repr, uses))} in "
            f"history[{i}]); add a user message with a tool_result for each call, or drop "
            "that message"
        )
    answers = [b.tool_use_id for b in after.content if isinstance(b, ToolResultBlock)]
    missing = [u for u in uses if u not in answers]
    if missing:
        raise ValueError(
            f"history[{i}] calls {', '.join(map(repr, missing))} but history[{i + 1}] has no "
            "tool_result for it; every tool_use needs exactly one tool_result with its id "
            "in the next message"
        )
    twice = sorted({a for a in answers if answers.count(a) > 1})
    if twice:
        raise ValueError(
            f"history[{i + 1}] answers the tool call {twice[0]!r} more than once; "
            "every tool_use needs exactly one tool_result"
        )


__all__ = ["check_history", "user_message"]
