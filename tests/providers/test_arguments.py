"""The depth bound's checks: bracket counting in text, value walks, deep bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.providers import MAX_TOOL_ARGUMENT_DEPTH, ModelResponse, StopReason, ToolUseBlock
from tether.providers._arguments import (
    Cut,
    bound_arguments,
    bound_response,
    loads_body,
    parse_tool_arguments,
    text_too_deep,
    to_json_text,
    value_too_deep,
)


def deep(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


def test_brackets_inside_strings_do_not_count() -> None:
    """Brackets in strings, escaped quotes included, are not nesting."""
    text = json.dumps({"s": "{[" * 100 + '\\"{{{', "t": ['"]]]"']})
    assert not text_too_deep(text)
    assert parse_tool_arguments(text) == json.loads(text)


@pytest.mark.parametrize("depth", [1, MAX_TOOL_ARGUMENT_DEPTH])
def test_up_to_the_bound_is_decoded(depth: int) -> None:
    """Text and values at most MAX_TOOL_ARGUMENT_DEPTH deep are decoded and kept."""
    text = json.dumps(deep(depth))
    assert not text_too_deep(text)
    assert parse_tool_arguments(text) == deep(depth)
    assert bound_arguments(deep(depth)) == deep(depth)


@pytest.mark.parametrize("depth", [MAX_TOOL_ARGUMENT_DEPTH + 1, 100_000])
def test_past_the_bound_stays_text(depth: int) -> None:
    """Too-deep text is never decoded; a too-deep value becomes its flat JSON text."""
    text = "[" * depth + "]" * depth
    assert text_too_deep(text)
    assert parse_tool_arguments(text) == text
    assert parse_tool_arguments(text[:-1]) == text[:-1], "cut short: still text"
    value = deep(depth)
    assert value_too_deep(value)
    flat = bound_arguments(value)
    assert isinstance(flat, str)
    assert flat.count("[") + flat.count("{") == depth
    assert flat.count("1") == 1


def test_to_json_text_matches_json_dumps() -> None:
    """The iterative encoder writes what json.dumps writes, compactly."""
    value = {"a": [1, 2.5, None, True, 'x\n"y"', {"b": []}, {}], "ü": {"c": "é"}}
    assert to_json_text(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_a_value_that_holds_itself_is_too_deep() -> None:
    """A self-referential value is too deep, not an endless walk."""
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert value_too_deep(loop)


def test_a_body_too_deep_for_json_loads_decodes_with_the_deep_part_cut() -> None:
    """A whole answer nested 100,000 deep decodes; the deep input is cut, then flat text."""
    inner = '{"a":' * 100_000 + '"[{"' + "}" * 100_000
    body = '{"content":[{"type":"tool_use","input":' + inner + '},"{\\"x"]}'
    data = loads_body(body.encode())
    assert data["content"][1] == '{"x'
    tool_input = data["content"][0]["input"]
    assert value_too_deep(tool_input)
    assert bound_arguments(tool_input) == inner
    with pytest.raises(ValueError, match="unterminated JSON nested too deep"):
        loads_body(body[:-1000])  # cut inside the deep part


def test_bound_response_flattens_only_too_deep_inputs() -> None:
    """Every provider's answer passes here: shallow inputs are left as they are."""
    ok = ToolUseBlock(id="1", name="t", input={"a": 1})
    too_deep = ToolUseBlock(id="2", name="t", input=deep(MAX_TOOL_ARGUMENT_DEPTH + 1))
    response = ModelResponse(content=(ok,), stop_reason=StopReason.TOOL_USE)
    assert bound_response(response) is response
    fixed = bound_response(ModelResponse(content=(ok, too_deep), stop_reason=StopReason.TOOL_USE))
    assert fixed.content[0] is ok
    assert isinstance(fixed.content[1], ToolUseBlock)
    assert fixed.content[1].input == to_json_text(too_deep.input)
    assert isinstance(Cut("x").text, str)
