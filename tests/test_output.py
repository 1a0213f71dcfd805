"""Typed output (docs/guides/typed-output.md): ``output_type=T``, ``final_result``, native mode."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Literal, TypedDict

import attrs
import pytest

import tether
from tether import events as ev
from tether.providers import ModelRequest, Reply, ScriptedProvider, ToolCall

from .helpers import calls, of, run

pytestmark = pytest.mark.anyio


@attrs.frozen
class Trip:
    city: str
    days: int


@dataclasses.dataclass
class Hotel:
    name: str
    stars: int = 3


class Movie(TypedDict):
    title: str
    year: int


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


def final(arguments: Any, call_id: str | None = None) -> Reply:
    return Reply(tool_calls=[ToolCall(name="final_result", arguments=arguments, id=call_id)])


def typed_agent(output_type: Any, replies: list[Reply], **kw: Any) -> tether.Agent[Any]:
    provider = ScriptedProvider(replies, record=True)
    return tether.Agent(name="typed", provider=provider, output_type=output_type, **kw)


def finished(result: tether.RunResult[Any]) -> list[ev.ToolCallFinished]:
    return [e for e in of(result.events, ev.ToolCallFinished) if e.name == "final_result"]


async def test_a_typed_run_retries_on_invalid_arguments_and_ends_answered() -> None:
    """An invalid first final_result goes back listing every problem; the second is the output."""
    agent = typed_agent(Trip, [final({"city": 7, "days": "two"}), final({"city": "L", "days": 2})])
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == Trip(city="L", days=2)
    bad, good = finished(result)
    assert (bad.outcome, bad.is_error) == ("model_error", True)
    assert "city: expected str, got int (7)" in bad.content
    assert "days: expected int, got str ('two')" in bad.content
    assert (good.outcome, good.is_error) == ("ok", False)
    assert [t.reason for t in of(result.events, ev.Transition)] == ["tool_use", "answered"]
    assert result.usage.steps == 2
    assert json.loads(of(result.events, ev.RunFinished)[0].output or "") == {"city": "L", "days": 2}


@pytest.mark.parametrize(
    ("output_type", "wire", "value"),
    [
        (Trip, {"city": "L", "days": 2}, Trip("L", 2)),
        (Hotel, {"name": "Ritz"}, Hotel("Ritz", 3)),
        (Movie, {"title": "Up", "year": 2009}, {"title": "Up", "year": 2009}),
        (list[Trip], {"result": [{"city": "L", "days": 1}]}, [Trip("L", 1)]),
        (Literal["yes", "no"], {"result": "no"}, "no"),
        (Color, {"result": "green"}, Color.GREEN),
        (Trip | Hotel, {"result": {"name": "Ritz", "stars": 5}}, Hotel("Ritz", 5)),
        (int, {"result": 42}, 42),
        (list[str] | None, {"result": None}, None),
    ],
)
async def test_every_kind_of_output_type(output_type: Any, wire: Any, value: Any) -> None:
    """Records are the tool's arguments; any other type is wrapped in {"result": ...}."""
    agent = typed_agent(output_type, [final(wire)])
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == value
    tool = agent.typed_output.tool if agent.typed_output else None
    assert tool is not None
    wrapped = "result" in wire and output_type not in (Trip, Hotel, Movie)
    assert (list(tool.input_schema["properties"]) == ["result"]) is wrapped
    request = agent.provider.requests[0][1]  # type: ignore[attr-defined]
    assert [t.name for t in request.tools] == ["final_result"]


def test_output_type_schemas_are_the_tool_schemas() -> None:
    """The output tool's schema comes from the type: defaults shown, records closed."""
    typed = tether.Agent(name="a", provider=ScriptedProvider([]), output_type=Hotel).typed_output
    assert typed is not None
    assert typed.tool is not None
    assert typed.tool.input_schema == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "stars": {"type": "integer", "default": 3}},
        "required": ["name"],
        "additionalProperties": False,
    }
    assert typed.tool.terminal


@attrs.frozen
class Tagged:
    tags: set[str]
    seen: frozenset[int]


async def test_a_set_field_of_a_typed_output_dumps_as_a_list() -> None:
    """A record's set fields are JSON arrays in the candidate's text and the dump (the run
    crashed on json.dumps of a set before: fields are unstructured by their declared type)."""
    agent = typed_agent(Tagged, [final({"tags": ["b", "a"], "seen": [2, 1]})])
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == Tagged(tags={"a", "b"}, seen=frozenset({1, 2}))
    text = of(result.events, ev.RunFinished)[0].output or ""
    assert json.loads(text) == {"tags": ["a", "b"], "seen": [1, 2]}
    assert tether.RunResult.load(result.dump(), Tagged).output == result.output


async def test_str_output_is_unchanged() -> None:
    """The default str output type adds no tool, and the answer is the text."""
    agent = typed_agent(str, [Reply(text="plain")])
    assert agent.typed_output is None
    result = await run(agent)
    assert (result.output, result.termination) == ("plain", tether.Termination.ANSWERED)
    request: ModelRequest = agent.provider.requests[0][1]  # type: ignore[attr-defined]
    assert request.tools == ()
    assert request.output_format is None


async def test_a_text_answer_is_nudged_to_the_output_tool() -> None:
    """A text answer of a typed agent is not accepted: a nudge asks for final_result."""
    agent = typed_agent(Trip, [Reply(text="Lisbon for 2 days"), final({"city": "L", "days": 2})])
    result = await run(agent)
    assert result.output == Trip("L", 2)
    assert [t.reason for t in of(result.events, ev.Transition)] == ["output_nudge", "answered"]
    assert "final_result" in result.messages[2].text
    assert result.usage.steps == 2


async def test_a_model_that_never_calls_the_output_tool_ends_at_max_steps() -> None:
    """Nudges count steps, so a model that only writes text ends max_steps."""
    agent = typed_agent(Trip, [Reply(text="no")] * 3, limits=tether.Limits(max_steps=3))
    result = await run(agent)
    assert (result.termination, result.output) == (tether.Termination.MAX_STEPS, None)


async def test_the_judge_sees_the_typed_output() -> None:
    """Candidate.output is the typed value; a failed judgement retries with feedback."""
    seen: list[Any] = []

    def long_enough(c: tether.Candidate) -> tuple[float, str]:
        seen.append(c.output)
        return (1.0 if c.output.days >= 3 else 0.0, "stay at least 3 days")

    agent = typed_agent(
        Trip,
        [final({"city": "L", "days": 2}), final({"city": "L", "days": 4})],
        judge=tether.RuleJudge({"long": long_enough}),
    )
    result = await run(agent)
    assert seen == [Trip("L", 2), Trip("L", 4)]
    assert (result.output, result.passed) == (Trip("L", 4), True)
    assert [t.reason for t in of(result.events, ev.Transition)] == ["judgement_failed", "answered"]
    # The feedback joins the turn that answers final_result: the roles keep alternating.
    roles = [m.role for m in result.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert "stay at least 3 days" in result.messages[2].text


async def test_a_str_agents_candidate_output_is_its_text() -> None:
    """Without an output type, Candidate.output is the text."""
    seen: list[Any] = []
    judge = tether.RuleJudge({"x": lambda c: seen.append(c.output) or True})
    await run(typed_agent(str, [Reply(text="hi")], judge=judge))
    assert seen == ["hi"]


async def test_quality_exhausted_keeps_the_last_typed_candidate() -> None:
    """A rejected last candidate is still the typed output, passed false."""
    agent = typed_agent(
        Trip,
        [final({"city": "L", "days": 2})],
        judge=tether.RuleJudge({"never": lambda c: False}),
        limits=tether.Limits(max_quality_retries=0),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.QUALITY_EXHAUSTED
    assert (result.output, result.passed) == (Trip("L", 2), False)


async def test_the_output_tool_counts_toward_max_tool_calls() -> None:
    """Each checked final_result is a tool call; past the budget it is denied."""
    agent = typed_agent(
        Trip,
        [final({"city": 1, "days": 1}), final({"city": "L", "days": 2})],
        limits=tether.Limits(max_tool_calls=1),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.MAX_TOOL_CALLS
    assert [e.outcome for e in finished(result)] == ["model_error", "denied"]
    assert result.usage.tool_calls == 1
    assert result.output is None


async def test_two_output_calls_in_one_response_the_first_valid_wins() -> None:
    """Invalid calls before the winner get their problems, later ones "not used"; all paired."""
    calls.clear()
    reply = Reply(
        tool_calls=[
            ToolCall(name="final_result", arguments={"city": "A"}, id="c1"),
            ToolCall(name="add", arguments={"a": 1, "b": 2}, id="c2"),
            ToolCall(name="final_result", arguments={"city": "B", "days": 1}, id="c3"),
            ToolCall(name="final_result", arguments={"city": "C", "days": 2}, id="c4"),
        ]
    )
    from .helpers import add

    agent = typed_agent(Trip, [reply], tools=[add])
    result = await run(agent)
    assert result.output == Trip("B", 1)
    outcomes = {e.call_id: e.outcome for e in of(result.events, ev.ToolCallFinished)}
    assert outcomes == {"c1": "model_error", "c2": "denied", "c3": "ok", "c4": "denied"}
    assert calls["add"] == 0  # the answer was given: the other tools did not run
    assert result.usage.tool_calls == 2  # c1 and c3 were checked
    results = [b.tool_use_id for b in result.messages[-1].content]  # type: ignore[union-attr]
    assert results == ["c1", "c2", "c3", "c4"]


async def test_the_output_tool_is_offered_with_discovery() -> None:
    """With discovery the model starts with search_tools and final_result."""
    from .helpers import add

    agent = typed_agent(Trip, [final({"city": "L", "days": 1})], tools=[add], discovery="first")
    await run(agent)
    request = agent.provider.requests[0][1]  # type: ignore[attr-defined]
    assert [t.name for t in request.tools] == ["search_tools", "final_result"]


async def test_native_mode_parses_the_text_answer() -> None:
    """output_mode="native" sends an OutputFormat and validates the text as JSON."""
    agent = typed_agent(
        Trip,
        [Reply(text='{"city": "L"}'), Reply(text="not json"), Reply(text='{"city":"L","days":3}')],
        output_mode="native",
    )
    result = await run(agent)
    assert result.output == Trip("L", 3)
    reasons = [t.reason for t in of(result.events, ev.Transition)]
    assert reasons == ["output_invalid", "output_invalid", "answered"]
    assert "days: missing required field" in result.messages[2].text
    assert "not JSON" in result.messages[4].text
    request: ModelRequest = agent.provider.requests[0][1]  # type: ignore[attr-defined]
    assert request.tools == ()
    assert request.output_format is not None
    assert request.output_format.name == "final_result"
    assert request.output_format.strict is True


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"output_type": tuple[int, str]}, TypeError, "cannot be described"),
        ({"output_type": Trip, "output_mode": "json"}, ValueError, "'tool' or 'native'"),
        ({"output_type": str, "output_mode": "native"}, ValueError, "other than str"),
    ],
)
def test_bad_output_settings_fail_at_construction(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    """An output type tether cannot describe, or a bad mode, is an error at construction."""
    with pytest.raises(error, match=match):
        tether.Agent(name="a", provider=ScriptedProvider([]), **kwargs)


def test_a_tool_named_final_result_clashes_with_the_output_tool() -> None:
    """A user tool may not take the output tool's name."""

    @tether.tool
    def final_result(x: int) -> int:
        """Clash."""
        return x

    provider = ScriptedProvider([])
    with pytest.raises(ValueError, match="rename the tool"):
        tether.Agent(name="a", provider=provider, tools=[final_result], output_type=Trip)
    tether.Agent(name="a", provider=provider, tools=[final_result])  # str: fine


async def test_a_typed_result_survives_dump_and_load() -> None:
    """RunResult.dump() is JSON; RunResult.load(data, T) gives back the typed output."""
    agent = typed_agent(
        list[Trip],
        [final({"result": [{"city": 1}]}), final({"result": [{"city": "L", "days": 2}]})],
        judge=tether.RuleJudge({"ok": lambda c: True}),
    )
    result = await run(agent)
    data = json.loads(json.dumps(result.dump()))
    assert data["output"] == [{"city": "L", "days": 2}]
    loaded = tether.RunResult.load(data, list[Trip])
    assert loaded.output == [Trip("L", 2)]
    assert (loaded.termination, loaded.passed, loaded.judgement) == (
        result.termination,
        result.passed,
        result.judgement,
    )
    assert (loaded.usage, loaded.messages, loaded.run_id) == (
        result.usage,
        result.messages,
        result.run_id,
    )
    assert list(loaded.events) == list(result.events)
    assert loaded.summary() == result.summary()


async def test_a_str_result_survives_dump_and_load() -> None:
    """Without an output type the output is the text, loaded as a str."""
    result = await run(typed_agent(str, [Reply(text="hi")]))
    loaded = tether.RunResult.load(json.loads(json.dumps(result.dump())))
    assert (loaded.output, loaded.termination) == ("hi", tether.Termination.ANSWERED)


def test_loading_a_result_checks_the_output_type() -> None:
    """An output that is not a T, or a dict that is no result, is a ValueError."""
    data = {"run_id": "r", "output": {"city": "L"}, "termination": "answered", "passed": None}
    data |= {"judgement": None, "usage": {}, "messages": [], "events": []}
    with pytest.raises(ValueError, match="not a dumped RunResult"):
        tether.RunResult.load(data, Trip)
    with pytest.raises(ValueError, match="expected a str output"):
        tether.RunResult.load(data)
    with pytest.raises(ValueError, match="not a dumped RunResult"):
        tether.RunResult.load({"output": None})


async def test_a_typed_agent_as_a_tool_answers_its_caller_with_json() -> None:
    """A typed sub-agent's output reaches its caller as the value's JSON text."""
    child = typed_agent(Trip, [final({"city": "L", "days": 2})])
    parent = tether.Agent(
        name="boss",
        provider=ScriptedProvider(
            [
                Reply(tool_calls=[ToolCall(name="typed", arguments={"task": "plan"})]),
                Reply(text="done"),
            ]
        ),
        tools=[child.as_tool()],
    )
    result = await run(parent)
    (tool,) = of(result.events, ev.ToolCallFinished)
    assert (tool.outcome, json.loads(tool.content)) == ("ok", {"city": "L", "days": 2})


@pytest.mark.parametrize(
    ("output_type", "strict"),
    [
        (Trip, True),
        (list[Trip] | None, True),
        (Literal["a", "b"], True),
        (Hotel, False),  # a default
        (dict[str, int], False),  # open keys
        (list[Any], False),  # an untyped value
        (set[str], False),  # uniqueItems
    ],
)
def test_native_strict_mode_only_for_schemas_openai_takes(output_type: Any, strict: bool) -> None:
    """strict is true exactly when the schema is closed, fully required and fully typed."""
    agent = typed_agent(output_type, [], output_mode="native")
    assert agent.typed_output is not None
    assert agent.typed_output.format is not None
    assert agent.typed_output.format.strict is strict


@pytest.mark.parametrize("choice", ["required", "final_result"])
async def test_tool_choice_may_force_the_output_tool(choice: str) -> None:
    """A typed agent's final_result counts for tool_choice: required, or by name."""
    settings = tether.ModelSettings(tool_choice=choice)
    agent = typed_agent(Trip, [final({"city": "L", "days": 1})], settings=settings)
    result = await run(agent)
    assert result.output == Trip("L", 1)
    request: ModelRequest = agent.provider.requests[0][1]  # type: ignore[attr-defined]
    assert request.settings is not None
    assert request.settings.tool_choice == choice


async def test_native_mode_refuses_an_answer_nested_too_deep_and_retries() -> None:
    """A native answer nested 1,200 deep is a retryable validation error naming the bound
    (64, as for tool arguments), not a RecursionError that crashes the run."""
    deep = '{"city": "L", "days": 1, "x": ' + "[" * 1200 + "]" * 1200 + "}"
    just = '{"city": "L", "days": 1, "x": ' + "[" * 63 + "]" * 63 + "}"
    agent = typed_agent(
        Trip,
        [Reply(text=deep), Reply(text=just), Reply(text='{"city":"L","days":3}')],
        output_mode="native",
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == Trip("L", 3)
    reasons = [t.reason for t in of(result.events, ev.Transition)]
    assert reasons == ["output_invalid", "output_invalid", "answered"]
    assert "deeper than 64 levels" in result.messages[2].text
    # 64 levels deep is within the bound: the answer fails on its extra field, not its depth.
    assert "deeper" not in result.messages[4].text
