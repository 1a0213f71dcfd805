"""The depth bound on tool-call arguments, checked without recursion.

A model's tool arguments may nest at most :data:`MAX_TOOL_ARGUMENT_DEPTH`
levels of objects and arrays (``{}`` is one level, ``{"a": []}`` two).
Arguments nested deeper are not decoded: the tool call keeps them as flat
JSON text (a ``str``, like arguments that are not valid JSON), and the tool
actor answers the call with an ``is_error`` result that names the bound, so
the model can try again. Nothing deeper than the bound ever enters a run's
history, so encoding the history again (request bodies, events, the run's
state) never recurses past it.

Every check here walks the text or the value with an explicit stack: a
model can nest arguments 100,000 levels deep, far past Python's recursion
limit. :func:`loads_body` decodes a whole answer whose nesting is too deep
for :func:`json.loads` (a tool input inside an Anthropic message body).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from ._types import ModelResponse, ToolUseBlock

#: Values ``plain`` returns as they are, tested inline (a call per leaf would
#: be most of an encoding's calls: a request is mostly strings).
_LEAVES = frozenset({str, int, float, bool, type(None)})


def plain(value: Any) -> Any:
    """``value`` with every Mapping made a dict and every tuple a list (for json.dumps)."""
    if isinstance(value, Mapping):
        leaves = _LEAVES
        return {
            (k if type(k) is str else str(k)): (v if type(v) in leaves else plain(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        leaves = _LEAVES
        return [v if type(v) in leaves else plain(v) for v in value]
    return value


def arguments_text(value: Any) -> str:
    """Tool-call arguments as JSON text (a raw string, the model's invalid JSON, as it was)."""
    if isinstance(value, str):
        return value
    return json.dumps(plain(value), ensure_ascii=False, separators=(",", ":"))


#: How many levels of objects and arrays a tool call's arguments may nest.
MAX_TOOL_ARGUMENT_DEPTH = 64

#: Containers opening deeper than this in a whole answer are cut out before
#: :func:`json.loads` (only when it ran out of stack); far above any envelope
#: plus :data:`MAX_TOOL_ARGUMENT_DEPTH`, well below the recursion limit.
_BODY_CUT_DEPTH = 128

# A JSON string (possibly unterminated), or one bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


@attrs.frozen
class Cut:
    """A container :func:`loads_body` left undecoded: its raw JSON text."""

    text: str


def text_too_deep(text: str, limit: int = MAX_TOOL_ARGUMENT_DEPTH) -> bool:
    """Whether the JSON ``text`` opens more than ``limit`` nested brackets (outside strings).

    Valid or not: brackets are counted as they come, strings skipped.
    """
    if text.count("{") + text.count("[") <= limit:
        return False
    depth = 0
    for match in _TOKENS.finditer(text):
        char = text[match.start()]
        if char == "{" or char == "[":
            depth += 1
            if depth > limit:
                return True
        elif char == "}" or char == "]":
            depth = max(depth - 1, 0)
    return False


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _children(value: Any) -> Any:
    if isinstance(value, Mapping):
        return value.values()
    if isinstance(value, list | tuple):
        return value
    return None


def value_too_deep(value: Any, limit: int = MAX_TOOL_ARGUMENT_DEPTH) -> bool:
    """Whether the decoded ``value`` nests more than ``limit`` objects and arrays.

    A :class:`Cut` counts as too deep (it was cut for being deep); a value
    that contains itself does too.
    """
    if type(value) is dict:
        for child in value.values():
            if type(child) not in _SCALARS:
                break
        else:
            return False  # the common case, on every tool call: flat arguments
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Cut):
            return True
        children = _children(item)
        if children is None:
            continue
        if depth > limit:
            return True
        for child in children:
            if isinstance(child, Mapping | list | tuple | Cut):
                stack.append((child, depth + 1))
    return False


def _scalar(value: Any) -> str:
    if isinstance(value, Cut):
        return value.text
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(repr(value), ensure_ascii=False)


class _Literal(str):
    """Text of the output, on the encoder's stack among the values."""


def to_json_text(value: Any) -> str:
    """``value`` as compact JSON text, however deep (a :class:`Cut` as its text)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Literal):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append("{")
            stack.append(_Literal("}"))
            entries = list(item.items())
            for i in range(len(entries) - 1, -1, -1):
                key, child = entries[i]
                stack.append(child)
                comma = "," if i else ""
                stack.append(_Literal(comma + json.dumps(str(key), ensure_ascii=False) + ":"))
        elif isinstance(item, list | tuple):
            out.append("[")
            stack.append(_Literal("]"))
            for i in range(len(item) - 1, -1, -1):
                stack.append(item[i])
                if i:
                    stack.append(_Literal(","))
        else:
            out.append(_scalar(item))
    return "".join(out)


def bound_arguments(value: Any) -> Any:
    """Decoded arguments as they are, or as flat JSON text when they nest too deep."""
    if isinstance(value, str) or not value_too_deep(value):
        return value
    return to_json_text(value)


def bound_response(response: ModelResponse) -> ModelResponse:
    """``response`` with every tool input nested too deep made flat text (itself if none is).

    The model actor applies it to every provider's answer, so a provider that
    does not bound its tool inputs cannot put a too-deep value in a history.
    """
    for block in response.content:
        if (
            type(block) is ToolUseBlock
            and not isinstance(block.input, str)
            and value_too_deep(block.input)
        ):
            break
    else:
        return response  # the common case: nothing to change
    too_deep = [
        isinstance(b, ToolUseBlock) and not isinstance(b.input, str) and value_too_deep(b.input)
        for b in response.content
    ]
    content = tuple(
        attrs.evolve(b, input=to_json_text(b.input)) if deep and isinstance(b, ToolUseBlock) else b
        for b, deep in zip(response.content, too_deep, strict=True)
    )
    return attrs.evolve(response, content=content)


def parse_tool_arguments(raw: str) -> Any:
    """Decoded tool arguments from their JSON text.

    ``{}`` if empty; the raw string when they are not valid JSON or nest
    deeper than :data:`MAX_TOOL_ARGUMENT_DEPTH` (then they are never decoded).
    """
    if not raw.strip():
        return {}
    if text_too_deep(raw):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def loads_body(raw: bytes | str) -> Any:
    """:func:`json.loads` of a whole answer, deep or not.

    When the answer nests too deep for :func:`json.loads` (it runs out of
    stack), every container opening deeper than 128 levels is left
    undecoded, as a :class:`Cut` holding its text; :func:`bound_arguments`
    turns a tool input holding one into flat text. Raises ``ValueError`` like
    :func:`json.loads`.
    """
    try:
        return json.loads(raw)
    except RecursionError:
        pass
    import uuid  # here: only an answer nested past json's stack needs it

    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    nonce = f"\x00tether-cut-{uuid.uuid4().hex}-"
    pieces: list[str] = []
    cuts: dict[str, Cut] = {}
    depth = 0
    kept = 0  # the text before this offset is in pieces
    start = 0
    for match in _TOKENS.finditer(text):
        at = match.start()
        char = text[at]
        if char == "{" or char == "[":
            depth += 1
            if depth == _BODY_CUT_DEPTH + 1:
                start = at
        elif char == "}" or char == "]":
            if depth == _BODY_CUT_DEPTH + 1:
                marker = f"{nonce}{len(cuts)}"
                cuts[marker] = Cut(text[start : at + 1])
                pieces.append(text[kept:start])
                pieces.append(json.dumps(marker))
                kept = at + 1
            depth = max(depth - 1, 0)
    if depth > _BODY_CUT_DEPTH:
        raise ValueError("unterminated JSON nested too deep")
    pieces.append(text[kept:])
    decoded = json.loads("".join(pieces))
    return _restore(decoded, cuts) if cuts else decoded


def _restore(value: Any, cuts: dict[str, Cut]) -> Any:
    """``value`` with each marker string put back as its :class:`Cut` (in place)."""
    if isinstance(value, str):
        return cuts.get(value, value)
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(child, str):
                    item[key] = cuts.get(child, child)
                elif isinstance(child, dict | list):
                    stack.append(child)
        elif isinstance(item, list):
            for i, child in enumerate(item):
                if isinstance(child, str):
                    item[i] = cuts.get(child, child)
                elif isinstance(child, dict | list):
                    stack.append(child)
    return value


__all__ = [
    "MAX_TOOL_ARGUMENT_DEPTH",
    "Cut",
    "arguments_text",
    "bound_arguments",
    "bound_response",
    "loads_body",
    "parse_tool_arguments",
    "plain",
    "text_too_deep",
    "to_json_text",
    "value_too_deep",
]
