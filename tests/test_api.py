"""The public surface: exported names, configuration errors, event serialization."""

from __future__ import annotations

import importlib
import json
import math
import pickle
import traceback
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether
from tether import events as ev
from tether.providers import Reasoning, ScriptedProvider, TokenUsage, ToolUseBlock

CONTRACT_NAMES = [
    "Runtime",
    "RunHandle",
    "Agent",
    "Limits",
    "RunResult",
    "Termination",
    "Usage",
    "tool",
    "ToolError",
    "TransientToolError",
    "FatalToolError",
    "Judge",
    "Judgement",
    "Candidate",
    "RuleJudge",
    "LLMJudge",
    "Policy",
    "Verdict",
    "PolicyPoint",
    "LessonStore",
    "Lesson",
    "InMemoryLessonStore",
    "SQLiteLessonStore",
    "events",
    # docs/guides/settings-and-deps.md, docs/guides/history.md
    "ModelSettings",
    "RunContext",
    # DESIGN §28
    "RuntimeLike",
    "RunHandleLike",
]

CONTRACT_EVENTS = [
    "RunStarted",
    "StageEntered",
    "StageExited",
    "LessonsRecalled",
    "ModelCallStarted",
    "ProviderRetry",
    "ModelCallFinished",
    "PolicyChecked",
    "ToolCallStarted",
    "ToolCallFinished",
    "Judged",
    "Transition",
    "CeilingHit",
    "LessonStored",
    "RunFinished",
]


def test_contract_names_are_importable() -> None:
    """Every name of the public API (docs/api/tether.md) imports from tether and is in __all__."""
    for name in CONTRACT_NAMES:
        assert hasattr(tether, name), name
        assert name in tether.__all__, name


def test_all_is_sorted_and_resolves() -> None:
    """__all__ is sorted and every entry exists."""
    assert tether.__all__ == sorted(tether.__all__)
    for name in tether.__all__:
        assert getattr(tether, name) is not None


@pytest.mark.parametrize("package", ["tether.actors", "tether.providers", "tether.runtime"])
def test_subpackage_all_holds_public_names_only(package: str) -> None:
    """Each package's __all__ is sorted, resolves, and leaves out messages and plumbing."""
    module = importlib.import_module(package)
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    internal = {
        "ModelCall", "ModelReply", "RunTools", "ToolReply", "JudgeCandidate", "JudgeReply",
        "ReplyChannel", "ActorRef", "spawn_mailbox", "supervise", "ModelActor", "ToolActor",
        "JudgeActor", "ProviderGate", "HttpPool", "HttpPoolLike", "parse_retry_after",
        "bound_response", "text_too_deep", "ToolThreads",
    }  # fmt: skip
    assert not internal & set(module.__all__)


def _public_exceptions() -> list[tuple[str, type[BaseException]]]:
    found = []
    for package in ("tether.actors", "tether.providers", "tether.runtime"):
        module = importlib.import_module(package)
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                found.append((package, value))
    return found


@pytest.mark.parametrize(("package", "error"), _public_exceptions())
def test_public_exceptions_name_their_public_path(package: str, error: type[Exception]) -> None:
    """A traceback shows tether.providers.RateLimited, not the private module; pickle finds it."""
    if error.__module__ != package:  # re-exported from a lower package
        assert getattr(importlib.import_module(error.__module__), error.__name__) is error
    assert not any(part.startswith("_") for part in error.__module__.split("."))
    lines = traceback.format_exception_only(error.__new__(error))
    assert lines[-1].startswith(f"{error.__module__}.{error.__qualname__}")


def test_a_provider_error_pickles_by_its_public_path() -> None:
    """RateLimited round-trips through pickle under tether.providers."""
    from tether.providers import RateLimited

    again = pickle.loads(pickle.dumps(RateLimited("slow down")))
    assert type(again) is RateLimited
    assert str(again) == "slow down"


def test_contract_events_exist() -> None:
    """Every event class of docs/concepts/events.md is in tether.events with its fields."""
    for name in CONTRACT_EVENTS:
        cls = getattr(ev, name)
        fields = {f.name for f in attrs.fields(cls)}
        assert {"run_id", "seq", "round", "at"} <= fields


def test_termination_values_and_ok() -> None:
    """Termination is a string enum with the 19 reasons; ok for answered and terminal_tool."""
    assert len(tether.Termination) == 19
    assert {t for t in tether.Termination if t.ok} == {
        tether.Termination.ANSWERED,
        tether.Termination.TERMINAL_TOOL,
    }
    assert tether.Termination("deadline") == "deadline"


def test_limits_defaults() -> None:
    """Limits carries the contract's defaults."""
    limits = tether.Limits()
    assert attrs.asdict(limits) == {
        "max_steps": 10,
        "max_tool_calls": None,
        "max_quality_retries": 2,
        "max_provider_attempts": 3,
        "max_continues": 2,
        "max_tool_retries": 2,
        "max_total_tokens": None,
        "max_cost_usd": None,
        "timeout_s": None,
    }


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("max_steps", 0, ValueError),
        ("max_steps", -1, ValueError),
        ("max_steps", None, TypeError),
        ("max_steps", 2.5, TypeError),
        ("max_steps", True, TypeError),
        ("max_provider_attempts", 0, ValueError),
        ("max_tool_calls", -1, ValueError),
        ("max_quality_retries", -1, ValueError),
        ("max_continues", -2, ValueError),
        ("max_total_tokens", 0, ValueError),
        ("max_cost_usd", 0, ValueError),
        ("max_cost_usd", -0.5, ValueError),
        ("max_cost_usd", math.nan, ValueError),
        ("timeout_s", 0, ValueError),
        ("timeout_s", "10", TypeError),
    ],
)
def test_limits_validate_and_name_the_field(field: str, value: Any, error: type[Exception]) -> None:
    """A meaningless ceiling fails at construction with an error naming the field."""
    with pytest.raises(error, match=f"Limits.{field}"):
        tether.Limits(**{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_quality_retries", 0),
        ("max_continues", 0),
        ("max_tool_retries", 0),
        ("max_tool_calls", 0),
    ],
)
def test_limits_accept_zero_where_meaningful(field: str, value: int) -> None:
    """Zero means 'none allowed' for retries, continues and tool calls."""
    assert getattr(tether.Limits(**{field: value}), field) == 0


def test_agent_validates_its_parts() -> None:
    """Bad Agent configuration fails at construction with a clear message."""
    provider = ScriptedProvider([])
    with pytest.raises(ValueError, match="name"):
        tether.Agent(name="", provider=provider)
    with pytest.raises(TypeError, match="Provider protocol"):
        tether.Agent(name="a", provider=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="judge"):
        tether.Agent(name="a", provider=provider, judge=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="discovery"):
        tether.Agent(name="a", provider=provider, discovery="sometimes")  # type: ignore[arg-type]

    @tether.tool(name="same")
    def one() -> int:
        """One."""
        return 1

    @tether.tool(name="same")
    def two() -> int:
        """Two."""
        return 2

    with pytest.raises(ValueError, match="share a name: same"):
        tether.Agent(name="a", provider=provider, tools=[one, two])


def test_rule_judge_validates() -> None:
    """RuleJudge refuses no criteria, non-callables and a threshold outside [0, 1]."""
    with pytest.raises(ValueError, match="at least one"):
        tether.RuleJudge({})
    with pytest.raises(TypeError, match="callable"):
        tether.RuleJudge({"x": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="threshold"):
        tether.RuleJudge({"x": lambda c: 1.0}, threshold=1.5)


def test_judgement_scores_must_be_in_range() -> None:
    """A Judgement refuses a score outside [0, 1]."""
    with pytest.raises(ValueError, match="criterion 'x'"):
        tether.Judgement(scores={"x": 1.2}, passed=True)


def test_runtime_validates_arguments() -> None:
    """Runtime refuses non-positive limits."""
    with pytest.raises(ValueError, match="max_concurrent_runs"):
        tether.Runtime(max_concurrent_runs=0)
    with pytest.raises(ValueError, match="shutdown_grace_s"):
        tether.Runtime(shutdown_grace_s=-1)


# ------------------------------------------------------------- serialization

BASE = {"run_id": "run-1", "seq": 3, "round": 2, "at": 1_700_000_000.25}
USAGE = tether.Usage(input_tokens=10, output_tokens=5, cost_usd=None, steps=2)
EXAMPLES: list[ev.Event] = [
    ev.RunStarted(**BASE, agent="a", input="q", parent_run_id="run-0"),
    ev.StageEntered(**BASE, stage="model"),
    ev.StageExited(**BASE, stage="judge"),
    ev.LessonsRecalled(**BASE, lesson_ids=("l1", "l2")),
    ev.ModelCallStarted(**BASE, attempt=2, max_tokens=100),
    ev.ProviderRetry(**BASE, error_type="rate_limited", attempt=1, wait_s=0.5, message="slow"),
    ev.ProviderWait(**BASE, wait_s=1.0, reason="gate"),
    ev.ProviderFallback(
        **BASE,
        from_model="claude-sonnet-4-5",
        to_model="gpt-4.1",
        error_type="rate_limited",
        from_provider="anthropic",
        to_provider="openai",
        message="slow down",
    ),
    ev.UsageCharged(**BASE, source="model", input_tokens=3, output_tokens=4, cost_usd=0.001),
    ev.ModelCallFinished(
        **BASE,
        stop_reason="tool_use",
        usage=TokenUsage(input_tokens=3, output_tokens=4),
        text="",
        tool_calls=(ToolUseBlock(id="t1", name="add", input={"a": [1, 2], "b": {"c": None}}),),
        raw_stop_reason="tool_use",
        reasoning=(Reasoning(text="hm", signature="sig", provider="anthropic"),),
    ),
    ev.PolicyChecked(**BASE, point="tool_call", verdict="deny", reason="no", call_id="t1"),
    ev.ToolCallStarted(**BASE, call_id="t1", name="add", arguments='{"a": 1'),
    ev.ToolCallFinished(
        **BASE, call_id="t1", name="add", outcome="ok", is_error=False, attempts=1, content="3"
    ),
    ev.ApprovalRequested(**BASE, call_id="t1", name="send", arguments={"to": "x"}, reason="check"),
    ev.ApprovalAnswered(**BASE, call_id="t1", approved=False, reason="no"),
    ev.Judged(**BASE, scores={"x": 0.5}, passed=False, feedback={"x": "why"}, candidate_round=2),
    ev.Transition(**BASE, kind="retry", reason="judgement_failed"),
    ev.CeilingHit(**BASE, ceiling="max_steps", limit=3, used=3),
    ev.ChildCrashed(**BASE, actor="tools", error="Traceback ..."),
    ev.ChildRunFinished(**BASE, call_id="t1", child_run_id="run-2", termination="answered"),
    ev.MCPToolsListed(**BASE, server="files", tools=("fs_read", "fs_write")),
    ev.MCPServerRestarted(**BASE, server="files", restarts=1, error="the server closed it"),
    ev.LessonStored(**BASE, lesson_id="l3"),
    ev.MemoryFailed(**BASE, operation="recall", error="LessonStoreError: locked"),
    ev.ConversationLoaded(**BASE, conversation="user-42", messages=4),
    ev.ConversationAppended(**BASE, conversation="user-42", messages=2),
    ev.ConversationFailed(**BASE, conversation="c", operation="append", error="locked"),
    ev.ContextBounded(
        **BASE,
        window=200_000,
        budget=190_000,
        tokens_before=191_000,
        tokens_after=120_000,
        messages_before=40,
        messages_after=21,
    ),
    ev.RunResumed(**BASE, from_round=2, previous_owner="host:1234:ab"),
    ev.RunForked(**BASE, from_run="run-1", at_round=2),
    ev.RunFinished(
        **BASE, termination=tether.Termination.CRASHED, usage=USAGE, output=None, error="tb"
    ),
    ev.TextDelta(**BASE, text="par", call_index=0, attempt=2),
    ev.ToolCallDelta(**BASE, call_id="t1", name="add", arguments_delta='{"a": ', call_index=1),
    ev.ReasoningDelta(**BASE, text="First, add.", call_index=0, attempt=2),
    ev.ToolOutputDelta(**BASE, call_id="t1", name="oracle", text="The answer"),
]


def test_examples_cover_every_event_class() -> None:
    """The round-trip examples include every registered event class."""
    assert {type(e).__name__ for e in EXAMPLES} == set(ev.EVENT_TYPES)


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_json(event: ev.Event) -> None:
    """dump → JSON text → load gives back an equal event, tagged with its type."""
    data = ev.dump(event)
    assert data["type"] == type(event).__name__
    again = ev.load(json.loads(json.dumps(data)))
    assert again == event
    assert type(again) is type(event)


def test_load_refuses_unknown_type() -> None:
    """load() names what it could not read."""
    with pytest.raises(ValueError, match="not a tether event"):
        ev.load({"type": "Nope"})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(arguments=json_values, seq=st.integers(min_value=0), content=st.text())
def test_tool_events_round_trip_any_json_arguments(arguments: Any, seq: int, content: str) -> None:
    """Tool events carry arbitrary JSON arguments and text losslessly."""
    started = ev.ToolCallStarted(
        run_id="r", seq=seq, round=1, at=0.0, call_id="c", name="n", arguments=arguments
    )
    assert ev.load(json.loads(json.dumps(ev.dump(started)))) == started
    finished = ev.ToolCallFinished(
        run_id="r",
        seq=seq,
        round=1,
        at=0.0,
        call_id="c",
        name="n",
        outcome="model_error",
        is_error=True,
        attempts=0,
        content=content,
    )
    assert ev.load(json.loads(json.dumps(ev.dump(finished)))) == finished


@pytest.mark.anyio
async def test_a_real_run_round_trips() -> None:
    """Every event of a real run survives dump/load."""
    from tether.providers import Reply, ToolCall

    @tether.tool
    async def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]), Reply(text="3")]
        ),
        tools=[add],
        judge=tether.RuleJudge({"ok": lambda c: True}),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "1+2?")
    for event in result.events:
        assert ev.load(json.loads(json.dumps(ev.dump(event)))) == event
