"""The history both endpoints build: cleaning up a transcript a UI sent back."""

from __future__ import annotations

from collections.abc import Sequence

from tether.providers import Image, Message, TextBlock, ToolResultBlock, ToolUseBlock
from tether.runtime import InputPart, RunInput

from ._asgi import Refused


def tidy(messages: Sequence[Message]) -> list[Message]:
    """``messages`` as a history tether accepts.

    Consecutive assistant messages are joined (a UI may keep a call's text and
    its tool calls apart), tool results in consecutive user messages likewise,
    and a tool call nobody answered (the call of an interrupt that was not
    resumed, a frontend tool left unanswered) is left out, as are messages left
    empty by that.
    """
    joined: list[Message] = []
    for message in messages:
        if not message.content:
            continue
        last = joined[-1] if joined else None
        if (
            last is not None
            and last.role == message.role
            and (
                (message.role == "assistant" and not _uses(last))
                or (_results(last) and _results(message) and not _texts(last))
            )
        ):
            joined[-1] = Message(role=last.role, content=(*last.content, *message.content))
        else:
            joined.append(message)
    out: list[Message] = []
    for i, message in enumerate(joined):
        if message.role == "assistant":
            after = joined[i + 1] if i + 1 < len(joined) else None
            answered = set() if after is None else _results(after)
            content = tuple(
                b for b in message.content if not isinstance(b, ToolUseBlock) or b.id in answered
            )
            message = Message(role="assistant", content=content)
        else:
            before = out[-1] if out else None
            asked = set() if before is None or before.role != "assistant" else _uses(before)
            content = tuple(
                b
                for b in message.content
                if not isinstance(b, ToolResultBlock) or b.tool_use_id in asked
            )
            message = Message(role="user", content=content)
        if message.content:
            out.append(message)
    return out


def split_input(messages: list[Message], continue_prompt: str) -> tuple[RunInput, list[Message]]:
    """The run's input and its history: the last user message is the input; after
    tool results (a frontend tool answered), ``continue_prompt`` is."""
    if not messages:
        raise Refused(422, "messages is empty: there is nothing to answer")
    last = messages[-1]
    if last.role != "user":
        raise Refused(422, "the last message is the assistant's: there is nothing to answer")
    if _results(last):
        return continue_prompt, messages
    parts: list[InputPart] = []
    for block in last.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, Image):
            parts.append(block)
    if not any(parts):
        raise Refused(422, "the last user message has no text or image")
    if len(parts) == 1 and isinstance(parts[0], str):
        return parts[0], messages[:-1]
    return parts, messages[:-1]


def _uses(message: Message) -> set[str]:
    return {b.id for b in message.content if isinstance(b, ToolUseBlock)}


def _results(message: Message) -> set[str]:
    return {b.tool_use_id for b in message.content if isinstance(b, ToolResultBlock)}


def _texts(message: Message) -> bool:
    return any(not isinstance(b, ToolResultBlock) for b in message.content)
