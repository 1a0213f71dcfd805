"""Pydantic types wherever tether takes a type (DESIGN §23; the ``pydantic`` extra).

Output types (tool and native mode), tool parameters and results, deps; their
schemas come from Pydantic, their checks are Pydantic's and so are the
messages the model gets back.
"""

from __future__ import annotations

import datetime
import enum
import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

import attrs
import pydantic
import pytest
from pydantic import BaseModel, Field

import tether
from tether import events as ev
from tether.actors import OutputSchema
from tether.providers import ModelRequest, Reply, ScriptedProvider, ToolCall

from .helpers import of, run

pytestmark = pytest.mark.anyio


class Trip(BaseModel):
    city: str = Field(description="The city to visit")
    days: Annotated[int, Field(gt=0, le=14)]


class Leg(BaseModel):
    origin: str
    to: str = Field(alias="destination")


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Color(enum.Enum):
    RED = "red"


class Node(BaseModel):
    children: list[Node]


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # pydantic.v1 warns on Python 3.14
    from pydantic import v1

    class Old(v1.BaseModel):
        x: int


class Customer(BaseModel):
    name: str
    vip: bool = False


def final(arguments: Any, call_id: str | None = None) -> Reply:
    return Reply(tool_calls=[ToolCall(name="final_result", arguments=arguments, id=call_id)])


def typed_agent(output_type: Any, replies: list[Reply], **kw: Any) -> tether.Agent[Any, Any]:
    provider = ScriptedProvider(replies, record=True)
    return tether.Agent(name="typed", provider=provider, output_type=output_type, **kw)


def finished(result: tether.RunResult[Any], name: str = "final_result") -> list[Any]:
    return [e for e in of(result.events, ev.ToolCallFinished) if e.name == name]


# --------------------------------------------------------------------- output types


async def test_a_pydantic_model_as_output_type_ends_answered() -> None:
    """The issue's first bullet: output_type=<BaseModel> works, and a bad first answer goes
    back with Pydantic's messages, each at its path."""
    agent = typed_agent(
        Trip, [final({"city": 7, "days": 30}), final({"city": "Lisbon", "days": 2})]
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == Trip(city="Lisbon", days=2)
    assert isinstance(result.output, Trip)
    bad, good = finished(result)
    assert (bad.outcome, bad.is_error, good.outcome) == ("model_error", True, "ok")
    assert "city: Input should be a valid string (got 7)" in bad.content
    assert "days: Input should be less than or equal to 14 (got 30)" in bad.content
    assert result.usage.tool_calls == 2  # both checked calls count, as for any output type
    assert json.loads(of(result.events, ev.RunFinished)[0].output or "") == {
        "city": "Lisbon",
        "days": 2,
    }
    # The model was shown Pydantic's schema: description and constraints included.
    request: ModelRequest = agent.provider.requests[0][1]  # type: ignore[attr-defined]
    (tool,) = request.tools
    assert tool.input_schema["properties"]["city"]["description"] == "The city to visit"
    days = tool.input_schema["properties"]["days"]
    assert (days["type"], days["exclusiveMinimum"], days["maximum"]) == ("integer", 0, 14)
    assert tool.input_schema["additionalProperties"] is False
    assert tool.input_schema["required"] == ["city", "days"]


@pytest.mark.parametrize(
    ("output_type", "wire", "value"),
    [
        (Trip, {"city": "L", "days": 2}, Trip(city="L", days=2)),
        (list[Trip], {"result": [{"city": "L", "days": 1}]}, [Trip(city="L", days=1)]),
        (Cat | Dog, {"result": {"kind": "dog", "good": True}}, Dog(kind="dog", good=True)),
        (
            Annotated[Cat | Dog, Field(discriminator="kind")],
            {"result": {"kind": "cat", "lives": 9}},
            Cat(kind="cat", lives=9),
        ),
        (Trip | None, {"result": None}, None),
        (Annotated[int, Field(ge=0)], {"result": 3}, 3),
        (Leg, {"origin": "A", "destination": "B"}, Leg(origin="A", destination="B")),
        (pydantic.RootModel[list[int]], {"result": [1, 2]}, pydantic.RootModel[list[int]]([1, 2])),
    ],
)
async def test_every_kind_of_pydantic_output_type(output_type: Any, wire: Any, value: Any) -> None:
    """A model is the tool's arguments; anything else TypeAdapter reads is wrapped, as for
    cattrs' types."""
    agent = typed_agent(output_type, [final(wire)])
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == value
    assert agent.typed_output is not None
    assert agent.typed_output.schema.wrapped is ("result" in wire)
    # What the run dumps is the value's JSON form, and it loads back as the type.
    data = json.loads(json.dumps(result.dump()))
    assert tether.RunResult.load(data, output_type).output == value


async def test_invalid_answers_count_against_the_same_limits() -> None:
    """A model that keeps sending an invalid model ends at max_tool_calls, as with attrs."""
    agent = typed_agent(
        Trip,
        [final({"city": "L", "days": 0}), final({"city": "L", "days": 99})],
        limits=tether.Limits(max_tool_calls=1),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.MAX_TOOL_CALLS
    assert [e.outcome for e in finished(result)] == ["model_error", "denied"]
    assert result.output is None


async def test_native_mode_with_a_pydantic_model() -> None:
    """output_mode="native": the format carries Pydantic's schema, strict when every field is
    required; a bad answer goes back with Pydantic's messages."""
    agent = typed_agent(
        Trip,
        [Reply(text='{"city": "L", "days": -1}'), Reply(text='{"city": "L", "days": 3}')],
        output_mode="native",
    )
    result = await run(agent)
    assert result.output == Trip(city="L", days=3)
    reasons = [t.reason for t in of(result.events, ev.Transition)]
    assert reasons == ["output_invalid", "answered"]
    assert "days: Input should be greater than 0 (got -1)" in result.messages[2].text
    request: ModelRequest = agent.provider.requests[0][1]  # type: ignore[attr-defined]
    assert request.output_format is not None
    assert request.output_format.strict is True
    assert request.output_format.schema["properties"]["days"]["maximum"] == 14


@pytest.mark.parametrize(
    ("output_type", "strict"),
    [
        (Trip, True),
        (list[Cat | Dog], True),
        (Customer, False),  # a default
        (dict[str, Trip], False),  # open keys
    ],
)
def test_native_strict_mode_for_pydantic_schemas(output_type: Any, strict: bool) -> None:
    """The same rule as for every type: strict exactly when OpenAI's strict mode takes it."""
    agent = typed_agent(output_type, [], output_mode="native")
    assert agent.typed_output is not None
    assert agent.typed_output.format is not None
    assert agent.typed_output.format.strict is strict


def test_a_discriminated_union_is_inlined_without_refs() -> None:
    """$defs are inlined, oneOf becomes anyOf, and the OpenAPI discriminator is dropped."""
    schema = OutputSchema.of(Annotated[Cat | Dog, Field(discriminator="kind")]).schema
    text = json.dumps(schema)
    assert "$ref" not in text
    assert "$defs" not in text
    assert "discriminator" not in text
    members = schema["properties"]["result"]["anyOf"]
    assert [m["properties"]["kind"]["const"] for m in members] == ["cat", "dog"]
    assert all(m["additionalProperties"] is False for m in members)


# --------------------------------------------------------------------- tools


async def test_a_tool_takes_and_returns_pydantic_models() -> None:
    """A tool's Pydantic parameters arrive as models; bad arguments go back with Pydantic's
    messages (and count as calls); a model it returns reaches the model as JSON."""

    @tether.tool
    async def book(trip: Trip, legs: list[Leg], seats: Annotated[int, Field(ge=1)] = 1) -> Trip:
        """Book a trip."""
        return trip.model_copy(update={"days": trip.days * seats + len(legs)})

    provider = ScriptedProvider(
        [
            Reply(
                tool_calls=[
                    ToolCall(
                        name="book",
                        arguments={"trip": {"city": "L", "days": 2}, "legs": [{}], "seats": 0},
                    )
                ]
            ),
            Reply(
                tool_calls=[
                    ToolCall(
                        name="book",
                        arguments={
                            "trip": {"city": "L", "days": 2},
                            "legs": [{"origin": "A", "destination": "B"}],
                        },
                    )
                ]
            ),
            Reply(text="booked"),
        ],
        record=True,
    )
    agent = tether.Agent(name="booker", provider=provider, tools=[book])
    result = await run(agent)
    assert (result.termination, result.output) == (tether.Termination.ANSWERED, "booked")
    bad, good = finished(result, "book")
    assert bad.outcome == "model_error"
    assert "legs[0].origin: Field required" in bad.content
    assert "legs[0].destination: Field required" in bad.content
    assert "seats: Input should be greater than or equal to 1 (got 0)" in bad.content
    assert (good.outcome, json.loads(good.content)) == ("ok", {"city": "L", "days": 3})
    assert result.usage.tool_calls == 2
    schema = book.input_schema
    assert schema["properties"]["seats"] == {"minimum": 1, "type": "integer", "default": 1}
    assert schema["properties"]["legs"]["items"]["required"] == ["origin", "destination"]


async def test_a_pydantic_model_as_deps() -> None:
    """deps may be a Pydantic model: tools read it as ctx.deps."""

    @tether.tool
    async def whoami(ctx: tether.RunContext[Customer]) -> str:
        """Who is asking."""
        return f"{ctx.deps.name} vip={ctx.deps.vip}"

    agent: tether.Agent[Customer] = tether.Agent(
        name="greeter",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="whoami")]), Reply(text="hi")]),
        tools=[whoami],
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q", deps=Customer(name="Ada", vip=True))
    (call,) = finished(result, "whoami")
    assert (call.outcome, call.content) == ("ok", "Ada vip=True")


async def test_an_attrs_class_with_a_pydantic_field_mixes_both() -> None:
    """cattrs reads the attrs class and hands its Pydantic field to Pydantic."""

    @attrs.frozen
    class Plan:
        title: str
        trip: Trip

    agent = typed_agent(
        Plan,
        [
            final({"title": 1, "trip": {"city": "L", "days": 0}}),
            final({"title": "T", "trip": {"city": "L", "days": 1}}),
        ],
    )
    result = await run(agent)
    assert result.output == Plan(title="T", trip=Trip(city="L", days=1))
    (bad, _) = finished(result)
    assert "title: expected str, got int (1)" in bad.content
    assert "trip.days: Input should be greater than 0 (got 0)" in bad.content
    schema = OutputSchema.of(Plan).schema
    assert schema["properties"]["trip"]["properties"]["days"]["exclusiveMinimum"] == 0


# --------------------------------------------------------------------- clear errors


def test_a_recursive_model_is_refused_by_name() -> None:
    """As for attrs classes: a type that refers to itself is a TypeError naming it."""
    with pytest.raises(TypeError, match="Node refers to itself"):
        typed_agent(Node, [])


def test_a_pydantic_v1_model_is_refused_by_name() -> None:
    """pydantic.v1 models: a TypeError saying tether reads Pydantic 2 models."""
    with pytest.raises(TypeError, match="Old is a Pydantic 1 model"):
        typed_agent(Old, [])

    with pytest.raises(TypeError, match="Pydantic 1 model"):

        @tether.tool
        def f(old: Old) -> None: ...


def test_without_pydantic_a_model_is_an_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With Pydantic not importable, a model given as a type is a TypeError naming the extra."""

    class Fresh(BaseModel):  # a type tether has not read yet
        x: int

    monkeypatch.setitem(sys.modules, "pydantic", None)  # import pydantic raises ImportError
    monkeypatch.delitem(sys.modules, "tether.actors._pydantic", raising=False)
    with pytest.raises(TypeError, match=r"pip install 'tether\[pydantic\]'") as info:
        typed_agent(Fresh, [])
    assert "output_type Fresh" in str(info.value)

    def f(x):  # type: ignore[no-untyped-def]
        """F."""

    f.__annotations__ = {"x": Fresh}  # a local class: not by name, as `from __future__` would
    with pytest.raises(TypeError, match=r"tool 'f'.*tether\[pydantic\]"):
        tether.tool(f)

    # attrs classes and the rest keep working through cattrs.
    @attrs.frozen
    class Plain:
        x: int

    assert typed_agent(Plain, []).typed_output is not None


def test_import_tether_and_a_run_without_pydantic_types_do_not_import_pydantic() -> None:
    """Recognising Pydantic's types reads names only: a program that never uses Pydantic
    never imports it, at `import tether` or in a typed run."""
    code = textwrap.dedent(
        """
        import sys, attrs, anyio, tether
        from typing import Annotated
        from tether.providers import Reply, ScriptedProvider, ToolCall

        @attrs.frozen
        class T:
            a: int

        @tether.tool
        def f(t: T, n: Annotated[int, "how many"]) -> T:
            '''F.'''
            return t

        agent = tether.Agent(
            name="x",
            provider=ScriptedProvider([
                Reply(tool_calls=[ToolCall(name="f", arguments={"t": {"a": 1}, "n": 2})]),
                Reply(tool_calls=[ToolCall(name="final_result", arguments={"result": [{"a": 1}]})]),
            ]),
            tools=[f],
            output_type=list[T],
        )

        async def main():
            async with tether.Runtime() as rt:
                result = await rt.run(agent, "q")
            assert result.output == [T(1)], result

        anyio.run(main)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core"))
        print(loaded)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------- elsewhere


async def test_a_durable_runs_pydantic_output_is_stored_and_read_back(tmp_path: Path) -> None:
    """A run store keeps the model's JSON form; another Runtime that knows the agent reads
    the stored result back as the model."""
    agent = typed_agent(Trip, [final({"city": "L", "days": 3})])
    path = tmp_path / "runs.db"
    async with tether.Runtime(store=tether.SQLiteRunStore(path)) as rt:
        result = await rt.run(agent, "q")
    assert result.output == Trip(city="L", days=3)
    async with tether.Runtime(store=tether.SQLiteRunStore(path), agents=[agent]) as other:
        stored = await other.handle(result.run_id).result()
    assert stored.output == Trip(city="L", days=3)
    assert isinstance(stored.output, Trip)


async def test_a_pydantic_typed_sub_agent_answers_its_caller_with_json() -> None:
    """A sub-agent whose output is a model answers its caller with the model's JSON."""
    child = typed_agent(Leg, [final({"origin": "A", "destination": "B"})])
    parent = tether.Agent(
        name="boss",
        provider=ScriptedProvider(
            [
                Reply(tool_calls=[ToolCall(name="typed", arguments={"task": "route"})]),
                Reply(text="done"),
            ]
        ),
        tools=[child.as_tool()],
    )
    result = await run(parent)
    (call,) = of(result.events, ev.ToolCallFinished)
    assert (call.outcome, json.loads(call.content)) == ("ok", {"origin": "A", "destination": "B"})


class Strictly(BaseModel):
    model_config = pydantic.ConfigDict(strict=True)
    color: Color
    when: datetime.date
    count: int


async def test_a_strict_model_is_checked_as_json() -> None:
    """Checks run in Pydantic's JSON mode: a strict model takes an Enum's value and an ISO
    date from JSON, and still refuses "3" for an int."""
    agent = typed_agent(
        Strictly,
        [
            final({"color": "red", "when": "2026-01-02", "count": "3"}),
            final({"color": "red", "when": "2026-01-02", "count": 3}),
        ],
    )
    result = await run(agent)
    assert result.output == Strictly(color=Color.RED, when=datetime.date(2026, 1, 2), count=3)
    bad, _ = finished(result)
    assert bad.content.startswith("invalid final_result: count: Input should be a valid integer")
    assert "color" not in bad.content
    assert "when" not in bad.content


class Span(BaseModel):
    start: int
    end: int

    @pydantic.model_validator(mode="after")
    def ordered(self) -> Span:
        if self.end < self.start:
            raise ValueError("end is before start")
        return self


async def test_a_model_validators_message_goes_back_to_the_model() -> None:
    """A model's own validators are Pydantic's checks too: their message is the problem."""
    agent = typed_agent(Span, [final({"start": 5, "end": 1}), final({"start": 1, "end": 5})])
    result = await run(agent)
    assert result.output == Span(start=1, end=5)
    bad, _ = finished(result)
    assert bad.content.startswith("invalid final_result: Value error, end is before start (got")


def test_a_pydantic_parameters_description_from_field_string_or_docstring() -> None:
    """Field(description=...), a plain string beside the constraints, or the docstring's
    Args: each describes a Pydantic-typed parameter."""

    @tether.tool
    def pick(
        a: Annotated[int, Field(ge=1, description="from Field")],
        b: Annotated[int, "from a string", Field(ge=1)],
        c: Annotated[int, Field(ge=1)],
    ) -> int:
        """Pick one.

        Args:
            c: from the docstring
        """
        return a + b + c

    properties = pick.input_schema["properties"]
    described = {name: schema["description"] for name, schema in properties.items()}
    assert described == {"a": "from Field", "b": "from a string", "c": "from the docstring"}
    assert all(schema["minimum"] == 1 for schema in properties.values())
