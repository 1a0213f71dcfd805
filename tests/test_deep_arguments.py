"""Tool arguments nested too deep (docs/guides/tools.md): the model is told, the run goes on.

The ScriptedProvider hands the arguments over as Python values; the HTTP
providers' side of the story is in ``tests/providers/test_deep_arguments.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import (
    MAX_TOOL_ARGUMENT_DEPTH,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.runtime._sinks import JsonlSink
from tether.runtime._state import dump_state, load_state

from .helpers import add, assert_consistent, of

pytestmark = pytest.mark.anyio

DEPTHS = pytest.mark.parametrize("depth", [500, 100_000])


def nested(depth: int) -> Any:
    """``{"a": {"a": ... 1 ...}}``: ``depth`` objects, one inside the other."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_agent(depth: int) -> tuple[tether.Agent, ScriptedProvider]:
    provider = ScriptedProvider(
        [
            Reply(tool_calls=[ToolCall(name="add", arguments=nested(depth), id="deep")]),
            Reply(text="Sorry, done."),
        ],
        record=True,
    )
    return tether.Agent(name="deep", provider=provider, tools=[add]), provider


@DEPTHS
async def test_too_deep_arguments_are_a_model_error_and_the_run_answers(
    depth: int, tmp_path: Path
) -> None:
    """Scripted arguments nested too deep: an is_error result, then the run answers."""
    agent, provider = deep_agent(depth)
    path = tmp_path / "events.jsonl"
    with JsonlSink(path) as sink:
        async with tether.Runtime(event_sink=sink) as rt:
            handle = rt.start(agent, "q")
            result = await handle.result()
        status = rt.sink_status  # the Runtime's exit waited for the sink
        state = handle._run.state
    assert_consistent(result)
    assert result.termination is tether.Termination.ANSWERED, result.error
    assert result.output == "Sorry, done."
    assert result.error is None
    assert not of(result.events, ev.ChildCrashed)
    (done,) = of(result.events, ev.ToolCallFinished)
    assert (done.outcome, done.is_error) == ("model_error", True)
    assert f"deeper than {MAX_TOOL_ARGUMENT_DEPTH} levels" in done.content
    assert len(done.content) < 1000, "the model is told briefly"

    # The next request carries the error result; the call is kept as flat text.
    assert len(provider.requests) == 2
    _, second = provider.requests[1]
    (call,) = [b for m in second.messages for b in m.content if isinstance(b, ToolUseBlock)]
    assert isinstance(call.input, str)
    (told,) = [b for m in second.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert (told.tool_use_id, told.is_error) == ("deep", True)

    # Every event dumps to JSON, the sink wrote them all, and the state round-trips.
    text = json.dumps([ev.dump(e) for e in result.events])
    assert [ev.load(d) for d in json.loads(text)] == list(result.events)
    assert status is not None
    assert (status.delivered, status.dropped) == (len(result.events), 0)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(result.events)
    assert load_state(json.loads(json.dumps(dump_state(state)))) == state


async def test_arguments_at_the_bound_are_accepted() -> None:
    """Arguments exactly MAX_TOOL_ARGUMENT_DEPTH levels deep reach the tool's validation."""

    @tether.tool
    async def echo(a: Any) -> str:
        """Echo the nesting back."""
        depth = 1
        while isinstance(a, dict):
            a, depth = a["a"], depth + 1
        return str(depth)

    agent = tether.Agent(
        name="bound",
        provider=ScriptedProvider(
            [
                Reply(
                    tool_calls=[ToolCall(name="echo", arguments=nested(MAX_TOOL_ARGUMENT_DEPTH))]
                ),
                Reply(
                    tool_calls=[
                        ToolCall(name="echo", arguments=nested(MAX_TOOL_ARGUMENT_DEPTH + 1))
                    ]
                ),
                Reply(text="ok"),
            ]
        ),
        tools=[echo],
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert result.termination is tether.Termination.ANSWERED
    first, second = of(result.events, ev.ToolCallFinished)
    assert (first.outcome, first.content) == ("ok", str(MAX_TOOL_ARGUMENT_DEPTH))
    assert second.outcome == "model_error"
    assert "deeper than" in second.content
