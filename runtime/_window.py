"""Context strategies: what to do when the transcript outgrows the model's window.

Two moments ask the agent's strategy:

- **Before every request**, when the model's context window is known (the
  price table's, or the provider's ``context_window``): if tether's estimate
  of the request (:mod:`._estimate`) passes the window less the request's
  ``max_tokens``, a strategy that has ``bound(messages, sizes, budget)``
  (:class:`BoundingStrategy`) returns the messages to send instead, within
  ``budget`` estimated tokens (``sizes[i]`` is the estimate of
  ``messages[i]``), or ``None`` when it cannot; then the request goes as it
  is and the provider decides.
- **On ``model_context_window_exceeded``** (the provider refused anyway), the
  run asks ``trim`` once; ``None`` means it cannot, and the run ends
  ``context_exceeded``.

Either way a strategy keeps tool_use/tool_result pairs whole. What it drops
is dropped from what the model sees, not from the transcript:
``RunResult.messages`` and a conversation keep every message.
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


@runtime_checkable
class BoundingStrategy(Protocol):
    def bound(
        self, messages: Sequence[Message], sizes: Sequence[int], budget: int
    ) -> list[Message] | None:
        """Messages within ``budget`` estimated tokens, pairs intact, or ``None``."""
        ...


@attrs.frozen
class KeepAll:
    """Never trims: an exceeded context window ends the run (and nothing is bounded)."""

    def trim(self, messages: Sequence[Message]) -> list[Message] | None:
        return None


@attrs.frozen
class TruncateOldest:
    """Drops the oldest exchanges, keeping the first message (the question).

    On a refusal it keeps the newest ``keep_last`` messages after the first,
    moving the cut forward so that the kept part starts with an assistant
    message, never with a tool result whose tool call was dropped. Before a
    request (:meth:`bound`) it keeps the first message and as many of the
    newest exchanges as fit, cut the same way.
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

    def bound(
        self, messages: Sequence[Message], sizes: Sequence[int], budget: int
    ) -> list[Message] | None:
        best, used = None, sizes[0] if sizes else 0
        for cut in range(len(messages) - 1, 0, -1):
            used += sizes[cut]
            if used > budget:
                break
            if _starts_exchange(messages[cut]):
                best = cut
        if best is None or best == 1:
            return None  # nothing fits, or nothing to drop
        return [messages[0], *messages[best:]]


def _starts_exchange(message: Message) -> bool:
    # After the question, the conversation must resume with the assistant, and a
    # user message made of tool results needs its assistant tool calls before it.
    return message.role == "assistant" and not any(
        isinstance(b, ToolResultBlock) for b in message.content
    )
