"""Context strategies: what to do when the model's context window is exceeded.

The run asks its strategy to trim once, on ``model_context_window_exceeded``;
``None`` means it cannot, and the run ends ``context_exceeded``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from tether.providers import Message, ToolResultBlock


@runtime_checkable
class ContextStrategy(Protocol):
    def trim(self, messages: Sequence[Message]) -> list[Message] | None:
        """A shorter conversation that keeps tool_use/tool_result pairs, or ``None``."""
        ...


@attrs.frozen
class KeepAll:
    """Never trims: an exceeded context window ends the run."""

    def trim(self, messages: Sequence[Message]) -> list[Message] | None:
        return None


@attrs.frozen
class TruncateOldest:
    """Drops the oldest exchanges, keeping the first message (the question).

    It keeps the newest ``keep_last`` messages after the first, moving the cut
    forward so that the kept part starts with an assistant message, never with
    a tool result whose tool call was dropped.
    """

    keep_last: int = 4

    def __attrs_post_init__(self) -> None:
        if self.keep_last < 1:
            raise ValueError(f"TruncateOldest.keep_last must be >= 1, got {self.keep_last}")

    def trim(self, messages: Sequence[Message]) -> list[Message] | None:
        if len(messages) <= 1 + self.keep_last:
            return None
        cut = len(messages) - self.keep_last
        while cut < len(messages) and not _starts_exchange(messages[cut]):
            cut += 1
        if cut >= len(messages):
            return None
        return [messages[0], *messages[cut:]]


def _starts_exchange(message: Message) -> bool:
    # After the question, the conversation must resume with the assistant, and a
    # user message made of tool results needs its assistant tool calls before it.
    return message.role == "assistant" and not any(
        isinstance(b, ToolResultBlock) for b in message.content
    )
