"""Policies at the four points of a run (docs/guides/policies.md), through events and results."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import anyio
import attrs
import pytest

import tether
from tests.helpers import add, assert_consistent, calls, of, run, transitions
from tether import events as ev
from tether.providers import (
    ModelResponse,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.runtime import RunView

pytestmark = pytest.mark.anyio

POINTS = ["input", "response", "tool_call", "round_end"]


@tether.tool
async def delete(path: str) -> str:
    """Delete a file."""
    calls["delete"] += 1
    return f"deleted {path}"


def add_call(a: int, b: int, id: str | None = None) -> ToolCall:
    return ToolCall(name="add", arguments={"a": a, "b": b}, id=id)


def tool_round() -> list[Reply]:
    """Round 1 asks for two tools, round 2 answers."""
    return [
        Reply(tool_calls=[add_call(1, 2, "c1"), add_call(3, 4, "c2")]),
        Reply(text="3 and 7"),
    ]


def make(
    policies: Sequence[Any], script: Sequence[Reply] | None = None
) -> tuple[tether.Agent, ScriptedProvider]:
    provider = ScriptedProvider(tool_round() if script is None else script, record=True)
    agent = tether.Agent(name="p", provider=provider, tools=[add, delete], policies=policies)
    return agent, provider


def checks(result: tether.RunResult) -> list[tuple[int, str, str]]:
    return [(e.round, e.point, e.verdict) for e in of(result.events, ev.PolicyChecked)]


def tool_outcomes(result: tether.RunResult) -> dict[str, str]:
    return {e.call_id: e.outcome for e in of(result.events, ev.ToolCallFinished)}


def run_error(result: tether.RunResult) -> str:
    error = of(result.events, ev.RunFinished)[0].error
    assert error is not None
    return error


class Recorder:
    """A policy object with ``async check``: records every call, allows everything."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    async def check(self, point: tether.PolicyPoint, subject: Any) -> tether.Verdict:
        self.seen.append((str(point), subject))
        return tether.Verdict.allow()


# ------------------------------------------------------------------- the four points


async def test_every_point_is_consulted_in_round_order() -> None:
    """input, response, tool_call (per call), round_end are checked in that order each round."""
    recorder = Recorder()
    agent, _ = make([recorder])
    result = await run(agent)
    assert checks(result) == [
        (0, "input", "allow"),
        (1, "response", "allow"),
        (1, "tool_call", "allow"),
        (1, "tool_call", "allow"),
        (1, "round_end", "allow"),
        (2, "response", "allow"),
        (2, "round_end", "allow"),
    ]
    assert [point for point, _ in recorder.seen] == [p for _, p, _ in checks(result)]
    tool_checks = [e.call_id for e in of(result.events, ev.PolicyChecked) if e.call_id]
    assert tool_checks == ["c1", "c2"]
    # Each check sits at its place in the round: after the model call, before the
    # tool runs, before the round's transition.
    names = [
        type(e).__name__ if not isinstance(e, ev.PolicyChecked) else f"Policy:{e.point}"
        for e in result.events
        if isinstance(
            e,
            ev.PolicyChecked
            | ev.ModelCallFinished
            | ev.ToolCallFinished
            | ev.Transition
            | ev.RunStarted
            | ev.ModelCallStarted,
        )
    ]
    assert names == [
        "RunStarted",
        "Policy:input",
        "ModelCallStarted",
        "ModelCallFinished",
        "Policy:response",
        "Policy:tool_call",
        "Policy:tool_call",
        "ToolCallFinished",
        "ToolCallFinished",
        "Policy:round_end",
        "Transition",
        "ModelCallStarted",
        "ModelCallFinished",
        "Policy:response",
        "Policy:round_end",
        "Transition",
    ]
    assert result.termination == "answered"


async def test_deny_at_tool_call_turns_that_call_into_an_error_result() -> None:
    """A denied call gets a `denied` is_error result with the reason; the others run."""

    def no_deletes(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        if point == "tool_call" and subject.name == "delete":
            return tether.Verdict.deny("deleting files is not allowed")
        return None

    agent, provider = make(
        [no_deletes],
        [
            Reply(
                tool_calls=[
                    ToolCall(name="delete", arguments={"path": "/etc"}, id="d1"),
                    add_call(1, 2, "a1"),
                ]
            ),
            Reply(text="could not delete"),
        ],
    )
    result = await run(agent)
    assert tool_outcomes(result) == {"d1": "denied", "a1": "ok"}
    (denied,) = (e for e in of(result.events, ev.ToolCallFinished) if e.call_id == "d1")
    assert denied.is_error
    assert "deleting files is not allowed" in denied.content
    assert calls == Counter({"add": 1})
    assert (1, "tool_call", "deny") in checks(result)
    (deny_check,) = (e for e in of(result.events, ev.PolicyChecked) if e.verdict == "deny")
    assert (deny_check.call_id, deny_check.reason) == ("d1", "deleting files is not allowed")
    results = [b for m in result.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert [(b.tool_use_id, b.is_error) for b in results] == [("d1", True), ("a1", False)]
    assert result.termination == "answered"
    assert len(provider.requests) == 2


# ------------------------------------------------------------------- block


def blocker(at: str, reason: str = "stop right there") -> Any:
    def policy(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        return tether.Verdict.block(reason) if point == at else None

    return policy


# point → (model requests made, tools executed, outcomes of c1 and c2)
BLOCK_CASES = {
    "input": (0, 0, {}),
    "response": (1, 0, {}),
    "tool_call": (1, 0, {"c1": "cancelled", "c2": "cancelled"}),
    "round_end": (1, 2, {"c1": "ok", "c2": "ok"}),
}


@pytest.mark.parametrize("point", POINTS)
async def test_block_at_each_point_ends_the_run_with_no_call_after_it(point: str) -> None:
    """`Verdict.block` ends the run `policy_blocked`; no model or tool call follows it."""
    requests, executed, expected = BLOCK_CASES[point]
    agent, provider = make([blocker(point)])
    result = await run(agent)
    assert result.termination == "policy_blocked"
    assert "stop right there" in run_error(result)
    assert result.output is None
    assert len(provider.requests) == requests
    assert result.usage.model_calls == requests
    assert calls["add"] == executed
    assert result.usage.tool_calls == executed
    assert tool_outcomes(result) == expected
    last = of(result.events, ev.PolicyChecked)[-1]
    assert (last.point, last.verdict, last.reason) == (point, "block", "stop right there")
    # No model call and no tool execution follows the blocking check.
    after = result.events[result.events.index(last) + 1 :]
    assert not of(after, ev.ModelCallStarted)
    assert {e.outcome for e in of(after, ev.ToolCallFinished)} <= {"cancelled"}
    if point != "input":
        assert transitions(result)[-1] == ("complete", "policy_blocked")


@tether.tool(terminal=True)
async def submit(answer: str) -> str:
    """Hand in the final answer."""
    calls["submit"] += 1
    return f"submitted {answer}"


@pytest.mark.parametrize(
    "final",
    [
        pytest.param(Reply(text="the answer"), id="answered"),
        pytest.param(
            Reply(tool_calls=[ToolCall(name="submit", arguments={"answer": "x"}, id="s1")]),
            id="terminal_tool",
        ),
    ],
)
async def test_round_end_block_of_a_finished_round_delivers_no_output(final: Reply) -> None:
    """A round_end block on the round that would end the run leaves no output behind."""
    provider = ScriptedProvider([final], record=True)
    agent = tether.Agent(
        name="p", provider=provider, tools=[add, submit], policies=[blocker("round_end")]
    )
    result = await run(agent)
    assert result.termination == "policy_blocked"
    assert transitions(result) == [("complete", "policy_blocked")]
    assert of(result.events, ev.RunFinished)[0].output is None
    assert result.output is None


async def test_block_at_a_later_call_stops_earlier_allowed_calls_of_the_round() -> None:
    """A block on the 2nd call of a round also keeps the 1st (allowed, not yet run) from running."""

    def block_second(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        if point == "tool_call" and subject.id == "c2":
            return tether.Verdict.block("c2 is forbidden")
        return None

    agent, provider = make([block_second])
    result = await run(agent)
    assert result.termination == "policy_blocked"
    assert len(provider.requests) == 1
    block = next(e for e in of(result.events, ev.PolicyChecked) if e.verdict == "block")
    after = result.events[result.events.index(block) + 1 :]
    assert not [e for e in after if isinstance(e, ev.ToolCallFinished) and e.outcome == "ok"]
    assert calls["add"] == 0
    assert tool_outcomes(result) == {"c1": "cancelled", "c2": "cancelled"}


@pytest.mark.parametrize("point", ["input", "response", "round_end"])
async def test_deny_outside_tool_call_blocks_the_run(point: str) -> None:
    """`deny` only makes sense for a tool call; at another point it blocks the run."""

    def denier(p: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        return tether.Verdict.deny("nope") if p == point else None

    agent, _ = make([denier])
    result = await run(agent)
    assert result.termination == "policy_blocked"
    assert "nope" in run_error(result)
    assert of(result.events, ev.PolicyChecked)[-1].verdict == "block"


# ------------------------------------------------------------------- policy shapes


def sync_policy(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    if point == "tool_call" and subject.input["a"] == 3:
        return tether.Verdict.deny("no threes")
    return None


async def async_policy(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    await anyio.lowlevel.checkpoint()
    return sync_policy(point, subject)


class ObjectPolicy:
    async def check(self, point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        return await async_policy(point, subject)


@pytest.mark.parametrize(
    "policy",
    [sync_policy, async_policy, ObjectPolicy()],
    ids=["sync_function", "async_function", "object"],
)
async def test_functions_and_objects_are_policies_and_none_allows(policy: Any) -> None:
    """Sync and async functions and objects with `async check` work; None means allow."""
    assert isinstance(ObjectPolicy(), tether.Policy)
    agent, _ = make([policy])
    result = await run(agent)
    assert checks(result) == [
        (0, "input", "allow"),
        (1, "response", "allow"),
        (1, "tool_call", "allow"),
        (1, "tool_call", "deny"),
        (1, "round_end", "allow"),
        (2, "response", "allow"),
        (2, "round_end", "allow"),
    ]
    assert tool_outcomes(result) == {"c1": "ok", "c2": "denied"}
    assert calls["add"] == 1
    assert result.termination == "answered"


async def test_first_non_allow_verdict_wins_across_policies() -> None:
    """With several policies, the first non-allow verdict decides and one event is emitted."""
    later = Recorder()
    agent, _ = make([blocker("response", "first says no"), later])
    result = await run(agent)
    assert result.termination == "policy_blocked"
    assert [p for p, _ in later.seen] == ["input"]
    assert checks(result) == [(0, "input", "allow"), (1, "response", "block")]


# ------------------------------------------------------------------- failing policies


class Boom(Exception):
    pass


@pytest.mark.parametrize("point", POINTS)
async def test_raising_policy_fails_closed_and_harms_no_other_run(point: str) -> None:
    """A policy that raises blocks its run (naming the exception); other runs go on."""

    def explosive(p: tether.PolicyPoint, subject: Any) -> None:
        if p == point:
            raise Boom("policy backend down")

    bad, bad_provider = make([explosive])
    good, _ = make([Recorder()])
    async with tether.Runtime() as rt:
        bad_handle = rt.start(bad, "q")
        good_handle = rt.start(good, "q")
        bad_result = await bad_handle.result()
        good_result = await good_handle.result()
        after = await rt.run(make([Recorder()])[0], "q")
    for result in (bad_result, good_result, after):
        assert_consistent(result)
    assert bad_result.termination == "policy_blocked"
    assert "Boom" in run_error(bad_result)
    assert "policy backend down" in run_error(bad_result)
    assert of(bad_result.events, ev.PolicyChecked)[-1].verdict == "block"
    assert len(bad_provider.requests) == BLOCK_CASES[point][0]
    assert good_result.termination == "answered"
    assert after.termination == "answered"
    assert "policy_blocked" not in {e.verdict for e in of(good_result.events, ev.PolicyChecked)}


async def test_policy_returning_a_non_verdict_fails_closed() -> None:
    """A policy that returns something other than a Verdict or None blocks the run."""
    agent, provider = make([lambda point, subject: "yes"])
    result = await run(agent)
    assert result.termination == "policy_blocked"
    assert "TypeError" in run_error(result)
    assert len(provider.requests) == 0


# ------------------------------------------------------------------- subjects


async def test_each_point_gets_its_subject() -> None:
    """Subjects: input text, ModelResponse, ToolUseBlock, and a frozen RunView at round_end."""
    recorder = Recorder()
    agent, _ = make([recorder])
    result = await run(agent, "what is 1+2?")
    subjects: dict[str, list[Any]] = {}
    for point, subject in recorder.seen:
        subjects.setdefault(point, []).append(subject)

    assert subjects["input"] == ["what is 1+2?"]

    first, second = subjects["response"]
    assert isinstance(first, ModelResponse)
    assert [c.id for c in first.tool_calls] == ["c1", "c2"]
    assert second.text == "3 and 7"

    c1, c2 = subjects["tool_call"]
    assert isinstance(c1, ToolUseBlock)
    assert (c1.id, c1.name, c1.input) == ("c1", "add", {"a": 1, "b": 2})
    assert (c2.id, c2.name, c2.input) == ("c2", "add", {"a": 3, "b": 4})

    view1, view2 = subjects["round_end"]
    for view in (view1, view2):
        assert isinstance(view, RunView)
        assert (view.run_id, view.agent) == (result.run_id, "p")
        assert isinstance(view.messages, tuple)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            view.round = 99  # type: ignore[misc]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            view.usage.steps = 99
    assert (view1.round, view2.round) == (1, 2)
    assert (view1.usage.steps, view1.usage.tool_calls) == (1, 2)
    assert view1.candidate is None
    assert view2.candidate == "3 and 7"
    # The view is a snapshot: later rounds do not change it.
    assert len(view1.messages) == 3
    assert len(view2.messages) == 4
    assert result.usage.steps == 2


# ------------------------------------------------------------------- approval


async def test_ask_waits_for_the_host_to_approve() -> None:
    """`Verdict.ask` holds the call until the host approves it through the run's handle."""

    def ask(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        return tether.Verdict.ask("a human must confirm") if point == "tool_call" else None

    agent, _ = make([ask], [Reply(tool_calls=[add_call(1, 2, "c1")]), Reply(text="3")])
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        with anyio.fail_after(5):
            async for event in handle.events():
                if isinstance(event, ev.PolicyChecked) and event.verdict == "ask":
                    break
            await anyio.wait_all_tasks_blocked()
            assert not handle.done, "the run must wait for the host's answer"
            handle.approve("c1")
            result = await handle.result()
    assert tool_outcomes(result) == {"c1": "ok"}
    assert result.termination == "answered"
