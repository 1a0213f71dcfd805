"""Token estimates for calls whose provider reports no usage.

Some OpenAI-compatible servers send no usage at all, or only at the very end
of a stream. Without a count, token ceilings could never bind and the run
would show 0 tokens. So when a call has reported no usage, tether counts it
itself, with a deliberately simple and documented rule:

    tokens = ceil(UTF-8 bytes / 4)

of the text (for the input: the system prompt, every message's text, tool
calls' arguments as JSON and tool results, and the tools' definitions; for the
output: the answer's text and its tool calls' names and arguments), and
``IMAGE_TOKENS_ESTIMATE`` (1,600) input tokens for each image. Four bytes
a token is close for English with the common BPE tokenizers and counts more
tokens than there are for most other scripts, so ceilings err on the safe side.

While such a call streams, its estimate is charged as the text arrives, so a
ceiling can cut a runaway stream; a usage report that arrives later replaces
the estimate exactly. A charge that stayed an estimate is marked
(``UsageCharged.estimated``, ``Usage.estimated``, ``TokenUsage.estimated``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tether.providers import (
    IMAGE_TOKENS_ESTIMATE,
    Image,
    Message,
    ModelRequest,
    ModelResponse,
    Reasoning,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

#: UTF-8 bytes counted as one token.
BYTES_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` by tether's estimate: ``ceil(UTF-8 bytes / 4)``."""
    size = len(text.encode("utf-8", "replace"))
    return -(-size // BYTES_PER_TOKEN)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _block_texts(blocks: Iterable[object]) -> Iterable[str]:
    for block in blocks:
        if isinstance(block, TextBlock):
            yield block.text
        elif isinstance(block, ToolUseBlock):
            yield block.name
            yield block.input if isinstance(block.input, str) else _json(block.input)
        elif isinstance(block, ToolResultBlock):
            yield block.content
        elif isinstance(block, Reasoning):
            yield block.text  # a redacted one's payload is not text the model reads


def estimate_input(request: ModelRequest) -> int:
    """The estimated input tokens of ``request``."""
    texts = [request.system]
    images = 0
    for message in request.messages:
        texts.extend(_block_texts(message.content))
        images += _images(message.content)
    for tool in request.tools:
        texts.extend((tool.name, tool.description, _json(tool.input_schema)))
    return sum(estimate_tokens(text) for text in texts if text) + images * IMAGE_TOKENS_ESTIMATE


def _images(blocks: Iterable[object]) -> int:
    n = 0
    for block in blocks:
        if isinstance(block, Image):
            n += 1
        elif isinstance(block, ToolResultBlock):
            n += len(block.images)
    return n


def estimate_message(message: Message) -> int:
    """The estimated tokens of one message: its share of :func:`estimate_input`.

    Defined through :func:`estimate_input`, so the two always count alike: the
    messages' shares and :func:`estimate_overhead` add up to the request's estimate.
    """
    return estimate_input(ModelRequest(system="", messages=(message,)))


def estimate_overhead(request: ModelRequest) -> int:
    """The estimated tokens of ``request`` besides its messages: system prompt and tools."""
    return estimate_input(ModelRequest(system=request.system, messages=(), tools=request.tools))


def response_text(response: ModelResponse) -> str:
    """All of ``response``'s output, as the estimator counts it."""
    return "".join(_block_texts(response.content))


__all__ = [
    "estimate_input",
    "estimate_message",
    "estimate_overhead",
    "estimate_tokens",
    "response_text",
]
