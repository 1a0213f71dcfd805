"""``RunState`` is one value: it turns into JSON and back losslessly."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether import events as ev
from tether.actors import Judgement
from tether.providers import (
    Image,
    Message,
    Reasoning,
    Reply,
    ScriptedProvider,
    TextBlock,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.runtime._limits import UsageMeter
from tether.runtime._repeats import RecentCalls, canonical
from tether.runtime._state import PendingApproval, RunState, dump_state, load_state

from .helpers import first

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
ids = st.text(min_size=1, max_size=8)
tool_uses = st.builds(ToolUseBlock, id=ids, name=ids, input=json_values)
#: Images of every kind: bytes of each supported format, URLs with or without a media type.
MAGIC = {
    "image/png": b"\x89PNG\r\n\x1a\n",
    "image/jpeg": b"\xff\xd8\xff",
    "image/gif": b"GIF89a",
    "image/webp": b"RIFF\x00\x00\x00\x00WEBP",
}
images = st.one_of(
    st.builds(
        lambda kind, tail: Image.from_bytes(MAGIC[kind] + tail, kind),
        st.sampled_from(sorted(MAGIC)),
        st.binary(max_size=64),
    ),
    st.builds(
        Image,
        url=st.text(max_size=20).map(lambda t: f"https://example.com/{t}"),
        media_type=st.none() | st.sampled_from(sorted(MAGIC)),
    ),
)
reasonings = st.one_of(
    st.builds(
        Reasoning,
        text=st.text(),
        signature=st.none() | st.text(),
        provider=st.none() | st.sampled_from(["anthropic", "openai-responses", "gemini"]),
        id=st.none() | ids,
    ),
    st.builds(Reasoning, redacted=st.just(True), signature=st.text(), provider=st.none() | ids),
)
blocks = st.one_of(
    st.builds(TextBlock, text=st.text()),
    reasonings,
    tool_uses,
    images,
    st.builds(
        ToolResultBlock,
        tool_use_id=ids,
        content=st.text(),
        is_error=st.booleans(),
        images=st.lists(images, max_size=2).map(tuple),
    ),
)
messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant"]),
    content=st.lists(blocks, max_size=3).map(tuple),
)
counts = st.integers(min_value=0, max_value=10**9)
meters = st.builds(
    UsageMeter,
    input_tokens=counts,
    output_tokens=counts,
    cost_usd=st.floats(min_value=0, max_value=1e6),
    unpriced=st.booleans(),
    model_calls=counts,
    provider_attempts=counts,
    steps=counts,
    tool_calls=counts,
    quality_retries=counts,
    continues=counts,
)
scores = st.dictionaries(ids, st.floats(min_value=0, max_value=1), max_size=3)
judgements = st.builds(
    Judgement,
    scores=scores,
    reasons=st.dictionaries(ids, st.text(), max_size=3),
    passed=st.booleans(),
    feedback=st.dictionaries(ids, st.text(), max_size=3),
    error=st.none() | st.text(),
)
states = st.builds(
    RunState,
    run_id=ids,
    agent=st.text(),
    input=st.text(),
    system=st.text(),
    parent_run_id=st.none() | ids,
    round=counts,
    messages=st.lists(messages, max_size=4),
    usage=meters,
    lesson_ids=st.lists(ids, max_size=3).map(tuple),
    found_tools=st.lists(ids, max_size=3),
    discovery=st.booleans(),
    previous_calls=st.frozensets(st.tuples(ids, st.text()), max_size=3).map(
        lambda keys: RecentCalls(keys=keys)
    )
    | st.lists(tool_uses, max_size=3).map(RecentCalls),
    candidate=st.none() | st.text(),
    partial=st.text(),
    output=st.none() | st.text(),
    judgement=st.none() | judgements,
    trimmed=st.booleans(),
    approvals=st.dictionaries(
        ids, st.builds(PendingApproval, call=tool_uses, reason=st.text()), max_size=2
    ),
    error=st.none() | st.text(),
)


# Values that are equal in Python but not as canonical JSON (1, 1.0 and True), to catch
# a repeat check that trusted Python equality alone.
_ambiguous = st.sampled_from([0, 1, 0.0, 1.0, True, False])
_arguments = st.recursive(
    json_values | _ambiguous,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=6,
)
_calls = st.builds(ToolUseBlock, id=ids, name=st.sampled_from(["a", "b"]), input=_arguments)


@given(st.lists(_calls, max_size=3), _calls)
def test_the_repeat_check_is_canonical_json_equality(
    before: list[ToolUseBlock], call: ToolUseBlock
) -> None:
    """A call repeats one of the previous round's exactly when name and canonical JSON
    arguments match, whether the previous calls are held as they came or restored
    from a checkpoint's keys."""
    keys = {(c.name, canonical(c.input)) for c in before}
    expected = (call.name, canonical(call.input)) in keys
    assert RecentCalls(before).repeats(call) is expected
    assert RecentCalls(keys=RecentCalls(before).keys()).repeats(call) is expected
    assert RecentCalls([*before, call]).repeats(call)


@settings(max_examples=200, deadline=None)
@given(states)
def test_run_state_round_trips_through_json(state: RunState) -> None:
    """Any RunState goes to a JSON text and back to an equal RunState."""
    text = json.dumps(dump_state(state))
    assert load_state(json.loads(text)) == state


@pytest.mark.anyio
async def test_a_parked_runs_state_round_trips() -> None:
    """The state of a run parked on an approval, mid-round, survives JSON whole."""

    @tether.tool
    async def risky(amount: int) -> str:
        """Needs approval."""
        return "done"

    agent = tether.Agent(
        name="payer",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="risky", arguments={"amount": 5})]), Reply(text="ok")]
        ),
        tools=[risky],
        policies=[lambda point, s: tether.Verdict.ask("check") if point == "tool_call" else None],
    )
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "pay")
        event = await first(handle, ev.ApprovalRequested)
        await anyio.wait_all_tasks_blocked()
        state: RunState = handle._run.state  # the run's own state, mid-round
        assert list(state.approvals) == [event.call_id]
        assert state.round == 1
        assert state.usage.steps == 1
        copy = load_state(json.loads(json.dumps(dump_state(state))))
        assert copy == state
        handle.approve(event.call_id)
        result = await handle.result()
    assert result.termination is tether.Termination.ANSWERED
