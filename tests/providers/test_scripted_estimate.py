"""The scripted provider counts a run's input once per message, not once per call.

Its estimate (characters / 4) must stay what :func:`estimate_input_tokens` says for
every request, whatever happened to the transcript between two calls: messages
appended (the common round), dropped or replaced (a bounding strategy), a run's
entry forgotten, a provider copied to another process.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether.providers import (
    Message,
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    TextBlock,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.providers._scripted import _Counted, estimate_input_tokens

from ..helpers import add

_text = st.text(max_size=40)
_blocks = st.one_of(
    st.builds(TextBlock, text=_text),
    st.builds(
        ToolUseBlock,
        id=st.just("c"),
        name=st.just("add"),
        input=st.dictionaries(_text, st.integers(), max_size=2),
    ),
    st.builds(ToolResultBlock, tool_use_id=st.just("c"), content=_text),
)
_messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant"]),
    content=st.lists(_blocks, min_size=1, max_size=3).map(tuple),
)
#: What happens to a run's transcript before its next call: (what, where, new messages).
_steps = st.tuples(
    st.sampled_from(["append", "drop", "replace", "answer"]),
    st.integers(min_value=0, max_value=5),
    st.lists(_messages, min_size=1, max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_messages, min_size=1, max_size=3), st.lists(_steps, max_size=8))
def test_the_memo_always_gives_the_whole_estimate(
    first: list[Message], steps: list[tuple[str, int, list[Message]]]
) -> None:
    counted = _Counted()
    messages = list(first)
    for kind, where, new in steps:
        if kind == "append":
            messages += new
        elif kind == "drop" and messages:
            del messages[where % len(messages)]
        elif kind == "replace" and messages:
            messages[where % len(messages)] = new[0]
        request = ModelRequest(system="be brief", messages=tuple(messages))
        expected = estimate_input_tokens(request)
        assert counted.input_tokens(request, "run-1", last=kind == "answer") == expected
        # Another run's requests never mix with this one's.
        other = ModelRequest(system="", messages=tuple(messages[:1]))
        assert counted.input_tokens(other, "run-2", last=False) == estimate_input_tokens(other)


def test_a_runs_entry_goes_with_its_answer_and_copies_start_empty() -> None:
    counted = _Counted()
    request = ModelRequest(
        system="", messages=(Message(role="user", content=(TextBlock(text="hi"),)),)
    )
    counted.input_tokens(request, "a", last=False)
    counted.input_tokens(request, "b", last=False)
    assert set(counted._runs) == {"a", "b"}
    counted.input_tokens(request, "a", last=True)
    assert set(counted._runs) == {"b"}
    assert pickle.loads(pickle.dumps(counted))._runs == {}


def test_at_most_limit_runs_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Counted, "LIMIT", 3)
    counted = _Counted()
    request = ModelRequest(
        system="", messages=(Message(role="user", content=(TextBlock(text="hi"),)),)
    )
    for run_id in "abcde":
        counted.input_tokens(request, run_id, last=False)
    assert list(counted._runs) == ["c", "d", "e"]


@pytest.mark.anyio
async def test_a_runs_usage_is_the_estimate_of_each_request() -> None:
    """End to end: each call's input tokens are its whole request's estimate."""
    provider = ScriptedProvider(
        [Reply(tool_calls=[ToolCall(name="add", arguments={"a": i, "b": 1})]) for i in range(4)]
        + [Reply(text="done")],
        record=True,
    )
    agent = tether.Agent(name="a", instructions="add things", provider=provider, tools=[add])
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "go")
    assert result.termination == tether.Termination.ANSWERED
    expected = sum(estimate_input_tokens(request) for _, request in provider.requests)
    assert result.usage.input_tokens == expected
    assert provider._counted._runs == {}


def test_a_scripted_provider_still_pickles() -> None:
    provider = ScriptedProvider([Reply(text="x")])
    ctx = ProviderContext(run_id="r", call_index=0)
    provider._counted.input_tokens(ModelRequest(system="s", messages=()), ctx.run_id, last=False)
    copy = pickle.loads(pickle.dumps(provider))
    assert copy._counted._runs == {}


@pytest.mark.anyio
async def test_a_list_scripts_tool_calls_are_sized_once() -> None:
    """A list script's calls are sized once for every run; a callable's are not kept."""
    calls = [ToolCall(name="add", arguments={"a": i, "b": 1}) for i in range(3)]
    script = [Reply(tool_calls=[call]) for call in calls] + [Reply(text="done")]
    listed = ScriptedProvider(script)
    made = ScriptedProvider(lambda request, ctx: script[ctx.call_index])
    async with tether.Runtime() as rt:
        for provider in (listed, made):
            agent = tether.Agent(name="a", provider=provider, tools=[add])
            results = [await rt.run(agent, "go") for _ in range(2)]
            assert [r.usage for r in results] == [results[0].usage] * 2
    assert [kept[0] for kept in listed._counted._calls.values()] == calls
    assert made._counted._calls == {}
