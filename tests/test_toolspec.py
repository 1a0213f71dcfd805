"""Tool definitions: schemas from type hints, decoration checks, strict validation."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
import functools
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, Optional

import attrs
import pytest
import typing_extensions
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.actors._schema import _json_converter, _json_kind
from tether.actors._tool_errors import ToolArgumentsInvalid, ToolError
from tether.actors._toolspec import (
    ToolResultUnserializable,
    ToolSpec,
    _copy_schema,
    json_schema,
    serialize_result,
    tool,
)
from tether.actors._validate import (
    _converter,
    _Param,
    _Params,
    _params_from_schema,
    _problems,
    _short,
)
from tether.providers import ToolDef

# Types and tools live at module level: with ``from __future__ import
# annotations`` their hints are strings, resolved against this module.


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Point:
    x: int
    y: float = 0.0
    _tag: str = attrs.field(default="p", metadata={"description": "A label."})


@attrs.frozen
class Shape:
    points: list[Point]
    color: Color | None = None


@attrs.frozen
class Positive:
    n: int = attrs.field(validator=attrs.validators.gt(0))


@attrs.frozen
class Node:
    children: list[Node]


class Opaque:
    pass


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Use it for sums.

    Args:
        a: The first
            addend.
        b (int): The second addend.

    Returns:
        The sum.
    """
    return a + b


@tool(name="draw_shape", terminal=True, timeout_s=5, sequential=True)
async def draw(
    shape: Shape, mode: Literal["fast", "slow"] = "fast", note: str | None = None
) -> str:
    """Draw a shape."""
    return f"{len(shape.points)} {mode} {note}"


def _probe(annotation: Any, *defaults: Any) -> ToolSpec:
    """A one-parameter tool ``probe(value: annotation)``."""

    def probe(value: Any) -> Any:
        return value

    probe.__annotations__ = {"value": annotation}
    probe.__defaults__ = defaults or None
    return tool(probe)


def _error(spec: ToolSpec, arguments: Any) -> str:
    with pytest.raises(ToolArgumentsInvalid) as info:
        spec.validate(arguments)
    return str(info.value)


# --- JSON Schema ------------------------------------------------------------

POINT_SCHEMA = {
    "type": "object",
    "properties": {
        "x": {"type": "integer"},
        "y": {"type": "number", "default": 0.0},
        "tag": {"type": "string", "description": "A label.", "default": "p"},
    },
    "required": ["x"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (type(None), {"type": "null"}),
        (Any, {}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list, {"type": "array"}),
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (Mapping[str, Any], {"type": "object"}),
        (dict, {"type": "object"}),
        (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        (Optional[str], {"anyOf": [{"type": "string"}, {"type": "null"}]}),  # noqa: UP045
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, "a"], {"type": ["integer", "string"], "enum": [1, "a"]}),
        (Literal[True], {"type": "boolean", "enum": [True]}),
        (Color, {"type": "string", "enum": ["red", "green"]}),
        (Level, {"type": "integer", "enum": [1, 2]}),
        (Point, POINT_SCHEMA),
        (Annotated[int, "How many."], {"type": "integer", "description": "How many."}),
        (
            list[dict[str, Point | None]],
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": {"anyOf": [POINT_SCHEMA, {"type": "null"}]},
                },
            },
        ),
    ],
)
def test_json_schema(annotation: Any, expected: dict[str, Any]) -> None:
    """Each supported annotation has its JSON Schema."""
    assert json_schema(annotation) == expected


def test_json_schema_nested_attrs() -> None:
    """An attrs class inside an attrs class is a nested closed object."""
    schema = json_schema(Shape)
    assert schema["required"] == ["points"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["points"] == {"type": "array", "items": POINT_SCHEMA}
    assert schema["properties"]["color"]["anyOf"][0] == {"type": "string", "enum": ["red", "green"]}


@pytest.mark.parametrize(
    ("annotation", "fragment"),
    [
        (bytes, "no JSON schema for bytes"),
        (Opaque, "no JSON schema for Opaque"),
        (tuple[int, str], "tuple[int, str]"),
        (dict[int, str], "JSON object keys are strings"),
        (list[bytes], "bytes"),
        (Literal[b"x"], "is not a JSON scalar"),
        (Node, "refers to itself"),
    ],
)
def test_json_schema_unsupported(annotation: Any, fragment: str) -> None:
    """An annotation without a JSON Schema raises TypeError naming the type."""
    with pytest.raises(TypeError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        json_schema(annotation)


# --- @tool ------------------------------------------------------------------


def test_tool_schema_and_description() -> None:
    """@tool takes the name, the docstring's prose and per-argument descriptions."""
    assert add.name == "add"
    assert add.description == "Add two integers.\n\nUse it for sums."
    assert add.input_schema == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first addend."},
            "b": {"type": "integer", "description": "The second addend."},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    assert add.terminal is False
    assert add.sequential is False
    assert add.is_async is False
    assert add.timeout_s is None


def test_tool_with_options() -> None:
    """@tool(...) applies the name and the settings, and detects async functions."""
    assert draw.name == "draw_shape"
    assert (draw.terminal, draw.timeout_s, draw.sequential, draw.is_async) == (True, 5, True, True)
    assert draw.input_schema["required"] == ["shape"]
    assert draw.input_schema["properties"]["mode"] == {
        "type": "string",
        "enum": ["fast", "slow"],
        "default": "fast",
    }


def test_optional_without_default_is_required() -> None:
    """X | None is required when it has no default, optional when it has one."""

    def f(a: int | None, b: int | None = None) -> None:
        """F."""

    spec = tool(f)
    assert spec.input_schema["required"] == ["a"]
    assert spec.input_schema["properties"]["b"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}],
        "default": None,
    }


def test_description_override_and_missing_docstring() -> None:
    """description= beats the docstring; no docstring gives an empty description."""

    def f(a: int) -> None:
        pass

    assert tool(f).description == ""
    assert tool(description="Custom.")(add.fn).description == "Custom."


def test_decorated_function_stays_callable() -> None:
    """A ToolSpec calls through to its function."""
    assert add(2, 3) == 5
    assert add.fn(2, b=3) == 5


def test_definition() -> None:
    """definition() is the ToolDef the provider sends, with a copy of the schema."""
    definition = add.definition()
    assert definition == ToolDef(
        name="add", description=add.description, input_schema=add.input_schema
    )
    definition.input_schema["properties"].clear()  # type: ignore[attr-defined]
    assert add.input_schema["properties"]


class _AsyncCallable:
    async def __call__(self, q: str) -> str:
        return q


class _Methods:
    def lookup(self, key: str) -> str:
        """Look a key up."""
        return key


async def _async_fn(a: int, b: int = 2) -> int:
    return a + b


def _sync_fn(a: int) -> int:
    return a


@pytest.mark.parametrize(
    ("fn", "name", "is_async"),
    [
        (_sync_fn, None, False),
        (_async_fn, None, True),
        (functools.partial(_async_fn, b=3), "partial", True),
        (_AsyncCallable(), "callable", True),
        (_Methods().lookup, None, False),
    ],
)
def test_async_detection(fn: Callable[..., Any], name: str | None, is_async: bool) -> None:
    """Coroutine functions, also behind partials and __call__, are marked async."""
    assert tool(fn, name=name).is_async is is_async


def test_method_tool_skips_self() -> None:
    """A bound method's self is not an argument."""
    spec = tool(_Methods().lookup)
    assert list(spec.input_schema["properties"]) == ["key"]
    assert spec.description == "Look a key up."


def _no_annotation(a, b: int) -> None:  # type: ignore[no-untyped-def]
    pass


def _varargs(*args: int) -> None:
    pass


def _kwargs(**kwargs: int) -> None:
    pass


def _positional(a: int, /) -> None:
    pass


def _bytes_param(data: bytes) -> None:
    pass


def _unresolvable(a: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
    pass


def _generator(a: int) -> Any:
    yield a


@pytest.mark.parametrize(
    ("fn", "options", "error", "fragment"),
    [
        (42, {}, TypeError, "needs a function, got int"),
        (Opaque, {}, TypeError, "needs a function"),
        (add, {}, TypeError, "already a tool"),
        (_no_annotation, {}, TypeError, "parameter 'a' has no type annotation"),
        (_varargs, {}, TypeError, r"\*args is not supported"),
        (_kwargs, {}, TypeError, r"\*\*kwargs is not supported"),
        (_positional, {}, TypeError, "positional-only"),
        (_bytes_param, {}, TypeError, r"parameter 'data' \(bytes\): no JSON schema for bytes"),
        (_unresolvable, {}, TypeError, "cannot resolve the type hints"),
        (_generator, {}, TypeError, "generator"),
        (functools.partial(_sync_fn), {}, TypeError, "pass tool"),
        (_sync_fn, {"timeout_s": 0}, ValueError, "timeout_s must be > 0"),
        (_sync_fn, {"timeout_s": -1.5}, ValueError, "timeout_s must be > 0"),
        (_sync_fn, {"name": ""}, ValueError, "must not be empty"),
        (_sync_fn, {"name": "has space"}, ValueError, "invalid tool name"),
        (_sync_fn, {"name": "x" * 65}, ValueError, "invalid tool name"),
        (lambda a: a, {}, ValueError, "invalid tool name '<lambda>'"),
    ],
)
def test_decoration_errors(
    fn: Any, options: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    """A tool that cannot work fails at decoration time with a clear message."""
    with pytest.raises(error, match=fragment):
        tool(fn, **options)


def test_toolspec_built_by_hand() -> None:
    """A hand-built ToolSpec around an unannotated function checks names from its schema."""
    spec = ToolSpec(
        name="raw",
        description="Raw.",
        input_schema={"type": "object", "properties": {"q": {}}, "required": ["q"]},
        fn=lambda **kwargs: kwargs,
        is_async=False,
    )
    assert spec.validate({"q": [1]}) == {"q": [1]}
    assert "q: missing required argument" in _error(spec, {})
    with pytest.raises(ValueError, match="invalid tool name"):
        attrs.evolve(spec, name="a b")
    with pytest.raises(ValueError, match="timeout_s"):
        attrs.evolve(spec, timeout_s=0)


# --- validate: accepted -----------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "value", "expected"),
    [
        (int, 5, 5),
        (int, 5.0, 5),  # JSON Schema: 5.0 is an integer
        (float, 5, 5.0),
        (float, 2.5, 2.5),
        (bool, False, False),
        (str, "5", "5"),
        (None, None, None),
        (int | None, None, None),
        (int | None, 3, 3),
        (int | str, "x", "x"),
        (bool | int, 1, 1),
        (Any, {"any": ["thing"]}, {"any": ["thing"]}),
        (list[int], [1, 2], [1, 2]),
        (Sequence[str], ["a"], ["a"]),
        (tuple[int, ...], [1, 2], (1, 2)),
        (set[str], ["a", "a"], {"a"}),
        (dict[str, float], {"a": 1}, {"a": 1.0}),
        (Literal["a", "b"], "b", "b"),
        (Literal[1, 2], 2, 2),
        (Color, "green", Color.GREEN),
        (Level, 2, Level.HIGH),
        (Point, {"x": 1}, Point(1)),
        (Point, {"x": 1, "y": 2, "tag": "q"}, Point(1, 2.0, "q")),
        (
            Shape,
            {"points": [{"x": 1}], "color": "red"},
            Shape([Point(1)], Color.RED),
        ),
        (Annotated[int, "n"], 4, 4),
    ],
)
def test_validate_accepts(annotation: Any, value: Any, expected: Any) -> None:
    """Valid values are structured to the annotated Python type."""
    result = _probe(annotation).validate({"value": value})
    assert result == {"value": expected}
    assert type(result["value"]) is type(expected)


def test_validate_returns_only_given_arguments() -> None:
    """Defaults are left to Python: only the model's arguments are returned."""
    arguments = draw.validate({"shape": {"points": []}})
    assert arguments == {"shape": Shape([])}


# --- validate: rejected -----------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "value", "message"),
    [
        (int, "5", "value: expected int, got str ('5')"),
        (int, True, "value: expected int, got bool (True)"),
        (int, 5.7, "value: expected int, got float (5.7)"),
        (int, None, "value: expected int, got None"),
        (float, "1.5", "value: expected float, got str ('1.5')"),
        (float, False, "value: expected float, got bool (False)"),
        (str, 5, "value: expected str, got int (5)"),
        (bool, 1, "value: expected bool, got int (1)"),
        (bool, "true", "value: expected bool, got str ('true')"),
        (None, 0, "value: expected None, got int (0)"),
        (int | None, "x", "value: expected int | None, got str ('x')"),
        (int | str, 1.5, "value: expected int | str, got float (1.5)"),
        (list[str], "abc", "value: expected list[str], got str ('abc')"),
        (list[int], [1, "2", 3, "4"], "value[1]: expected int, got str ('2'); value[3]: expected"),
        (dict[str, int], {"a": "x"}, "value['a']: expected int, got str ('x')"),
        (dict[str, int], [1], "value: expected dict[str, int], got list ([1])"),
        (Literal["a", "b"], "c", "value: expected one of 'a', 'b', got str ('c')"),
        (Literal[1], True, "value: expected one of 1, got bool (True)"),
        (Color, "blue", "value: expected one of 'red', 'green', got str ('blue')"),
        (Color, "RED", "value: expected one of 'red', 'green', got str ('RED')"),
        (Color | None, 1, "value: expected one of 'red', 'green', None, got int (1)"),
        (Level, True, "value: expected one of 1, 2, got bool (True)"),
        (Point, "p", "value: expected object (Point), got str ('p')"),
        (Point, {}, "value.x: missing required field"),
        (Point, {"x": "1"}, "value.x: expected int, got str ('1')"),
        (Point, {"x": 1, "z": 2}, "value: unknown field 'z' (accepted: 'x', 'y', 'tag')"),
        (Positive, {"n": 0}, "value: invalid value ("),
    ],
)
def test_validate_rejects(annotation: Any, value: Any, message: str) -> None:
    """Wrong values are refused with the path, the expected and the given type."""
    error = _error(_probe(annotation), {"value": value})
    assert error.startswith("invalid arguments for tool 'probe': ")
    assert message in error


def test_validate_nested_attrs_errors_have_paths() -> None:
    """Errors deep inside nested attrs classes and lists are all reported with paths."""
    error = _error(
        draw,
        {"shape": {"points": [{"x": 1}, {"x": "1", "z": 3}, "p"], "color": "blue"}},
    )
    assert "shape.points[1].x: expected int, got str ('1')" in error
    assert "shape.points[1]: unknown field 'z'" in error
    assert "shape.points[2]: expected object (Point), got str ('p')" in error
    assert "shape.color: expected one of 'red', 'green', None, got str ('blue')" in error


def test_validate_collects_every_problem() -> None:
    """Problems across all parameters end up in one ToolArgumentsInvalid."""
    error = _error(draw, {"mode": "medium", "note": 3, "extra": 1})
    assert error == (
        "invalid arguments for tool 'draw_shape': "
        "shape: missing required argument; "
        "mode: expected one of 'fast', 'slow', got str ('medium'); "
        "note: expected str | None, got int (3); "
        "unknown argument 'extra' (accepted: 'shape', 'mode', 'note')"
    )


def test_validate_example_message() -> None:
    """The message for a wrong type and a missing argument reads as the model needs it."""
    assert _error(add, {"a": "5"}) == (
        "invalid arguments for tool 'add': a: expected int, got str ('5'); "
        "b: missing required argument"
    )


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"a": 1, "b": 2, "c": 3}, "unknown argument 'c' (accepted: 'a', 'b')"),
        ({"a": 1, "b": 2, "c": 3, "d": 4}, "unknown arguments 'c', 'd' (accepted: 'a', 'b')"),
        ({}, "a: missing required argument; b: missing required argument"),
    ],
)
def test_unknown_and_missing_arguments(arguments: dict[str, Any], fragment: str) -> None:
    """Unknown names are listed with the accepted ones; missing ones are named."""
    assert fragment in _error(add, arguments)


def test_unknown_argument_of_tool_without_parameters() -> None:
    """A tool without parameters says so when given arguments."""

    def ping() -> str:
        return "pong"

    spec = tool(ping)
    assert spec.validate({}) == {}
    assert "unknown argument 'x' (this tool takes no arguments)" in _error(spec, {"x": 1})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"a": 1', "arguments must be a JSON object, got string: '{\"a\": 1'"),
        ([1, 2], "arguments must be a JSON object, got array: [1, 2]"),
        (None, "arguments must be a JSON object, got null: None"),
        (7, "arguments must be a JSON object, got integer: 7"),
    ],
)
def test_non_object_arguments(arguments: Any, message: str) -> None:
    """Arguments that are not a JSON object (e.g. unparsable JSON) are refused."""
    assert _error(add, arguments) == f"invalid arguments for tool 'add': {message}"


def test_non_object_arguments_are_truncated() -> None:
    """A long raw argument string is shortened in the message."""
    error = _error(add, "x" * 10_000)
    assert error.endswith("...")
    assert len(error) < 300


def test_arguments_invalid_is_a_tool_error() -> None:
    """Invalid arguments are a model mistake (a ToolError)."""
    with pytest.raises(ToolError):
        add.validate({"a": "1", "b": 2})


# --- properties -------------------------------------------------------------

_NON_INTS = st.one_of(
    st.text(),
    st.booleans(),
    st.none(),
    st.floats().filter(lambda f: not f.is_integer()),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
)


@settings(database=None)
@given(a=st.integers(), b=st.integers())
def test_property_valid_ints_round_trip(a: int, b: int) -> None:
    """Any two ints validate to the same arguments."""
    assert add.validate({"a": a, "b": b}) == {"a": a, "b": b}


@settings(database=None)
@given(a=st.integers(), bad=_NON_INTS)
def test_property_non_ints_are_rejected(a: int, bad: Any) -> None:
    """Anything that is not an int (nor an integral float) is refused, naming b."""
    error = _error(add, {"a": a, "b": bad})
    # a's problems would come first: b's being first means a had none.
    assert error.startswith("invalid arguments for tool 'add': b: expected int, got ")


# --- serialize_result -------------------------------------------------------


class Mood(str, enum.Enum):  # noqa: UP042  # the mixin form, whose str() is not its value
    HAPPY = "happy"


class Size(enum.StrEnum):
    BIG = "big"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain text", "plain text"),
        ("", ""),
        (None, "null"),
        (True, "true"),
        (3, "3"),
        (2.5, "2.5"),
        ([1, "a", None], '[1,"a",null]'),
        ((1, 2), "[1,2]"),
        ({"k": "é"}, '{"k":"é"}'),
        ({3, 1, 2}, "[1,2,3]"),
        (Point(1), '{"x":1,"y":0.0,"tag":"p"}'),
        (Shape([Point(1)], Color.RED), '{"points":[{"x":1,"y":0.0,"tag":"p"}],"color":"red"}'),
        (Color.GREEN, "green"),
        (Mood.HAPPY, "happy"),
        (Size.BIG, "big"),
        ([Mood.HAPPY], '["happy"]'),
        (Level.HIGH, "2"),
        ({"level": Level.LOW}, '{"level":1}'),
        (datetime.date(2024, 5, 1), "2024-05-01"),
        ([datetime.datetime(2024, 5, 1, 12, 30)], '["2024-05-01T12:30:00"]'),
    ],
)
def test_serialize_result(value: Any, expected: str) -> None:
    """Strings pass as is; everything else becomes compact JSON."""
    assert serialize_result(value) == expected


@pytest.mark.parametrize(
    ("value", "type_name"),
    [(Opaque(), "Opaque"), (b"bytes", "bytes"), ({"a": Opaque()}, "dict"), ([object()], "list")],
)
def test_serialize_result_unserializable(value: Any, type_name: str) -> None:
    """A value without a JSON form raises ToolResultUnserializable naming its type."""
    with pytest.raises(ToolResultUnserializable, match=f"value of type {type_name} that cannot"):
        serialize_result(value)


_SENTINEL = Opaque()


def test_defaults_shown_as_json() -> None:
    """Defaults with a JSON form appear in the schema as JSON; others are left out."""

    def f(t: tuple[int, ...] = (1, 2), c: Color = Color.RED, o: Any = _SENTINEL) -> None:
        """F."""

    properties = tool(f).input_schema["properties"]
    assert properties["t"]["default"] == [1, 2]
    assert properties["c"]["default"] == "red"
    assert "default" not in properties["o"]


# --- fast paths agree with the general ones ---------------------------------
# Validation skips the converter for a value of exactly the annotated scalar
# type (or any value for Any); serialize_result skips cattrs and json for an
# int, a bool or None. Each must give what the general path gives, errors
# included.


def _reference_validate(params: _Params, tool_name: str, arguments: Any) -> dict[str, Any]:
    """``_Params.validate`` without its fast paths: every value through the converter."""
    prefix = f"invalid arguments for tool {tool_name!r}: "
    if not isinstance(arguments, Mapping):
        raise ToolArgumentsInvalid(
            f"{prefix}arguments must be a JSON object, "
            f"got {_json_kind(arguments)}: {_short(arguments, 200)}"
        )
    problems: list[str] = []
    result: dict[str, Any] = {}
    for param in params.params:
        if param.name not in arguments:
            if param.required:
                problems.append(f"{param.name}: missing required argument")
            continue
        try:
            result[param.name] = _converter.structure(arguments[param.name], param.annotation)
        except Exception as exc:
            problems.extend(_problems(exc, param.name))
    known = {param.name for param in params.params}
    unknown = [key for key in arguments if key not in known]
    if unknown:
        listed = ", ".join(repr(key) for key in unknown)
        accepted = ", ".join(repr(param.name) for param in params.params)
        plural = "s" if len(unknown) > 1 else ""
        hint = f"accepted: {accepted}" if accepted else "this tool takes no arguments"
        problems.append(f"unknown argument{plural} {listed} ({hint})")
    if problems:
        raise ToolArgumentsInvalid(prefix + "; ".join(problems))
    return result


def _outcome(validate: Callable[[], dict[str, Any]], arguments: Any) -> Any:
    """What a validation did: the values (type, repr, passed through as is) or the error."""
    try:
        result = validate()
    except Exception as exc:
        return ("raised", type(exc), str(exc))
    given = arguments if isinstance(arguments, Mapping) else {}
    return [(k, type(v), _repr(v), v is given.get(k)) for k, v in result.items()]


def _repr(value: Any) -> Any:
    try:
        return repr(value)
    except ValueError:  # an int too long for repr(), maybe in a list: compare it as is
        return ("no repr", value)


class _Text(str):
    pass


class _Int(int):
    pass


class _Float(float):
    pass


_HUGE = 10**5000  # too long for repr() under the default int_max_str_digits

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities included
    st.text(max_size=5),
    st.sampled_from([_HUGE, -_HUGE, 0.0, -0.0, 1e300, 2.0**63, _Text("t"), _Int(3), _Float(2.5)]),
    st.sampled_from([Level.HIGH, Color.RED, Mood.HAPPY, Size.BIG]),
)
_VALUES = st.one_of(
    _SCALARS,
    st.lists(_SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=2), _SCALARS, max_size=2),
)
_ANNOTATIONS = st.sampled_from(
    [
        str,
        int,
        float,
        bool,
        Any,
        Annotated[str, "s"],
        Annotated[int, "n"],
        Annotated[float, "f"],
        Annotated[bool, "b"],
        Annotated[Any, "a"],
        int | None,
        bool | int,
        Level,
        Literal["a", 1],
        list[int],
    ]
)
_NAMES = ("a", "b", "c")


@st.composite
def _params_and_arguments(draw: st.DrawFn) -> tuple[_Params, Any]:
    names = draw(st.lists(st.sampled_from(_NAMES), unique=True, max_size=3))
    params = _Params(tuple(_Param(n, draw(_ANNOTATIONS), draw(st.booleans())) for n in names))
    keys = draw(st.lists(st.sampled_from([*_NAMES, "x", 1]), unique=True, max_size=4))
    arguments = {key: draw(_VALUES) for key in keys}
    wrap = draw(st.sampled_from([dict, types.MappingProxyType, list, lambda _: "{}", None]))
    return params, None if wrap is None else wrap(arguments)


@settings(database=None, max_examples=500)
@given(case=_params_and_arguments())
def test_property_validate_agrees_with_the_converter(case: tuple[_Params, Any]) -> None:
    """Fast or not, validation returns what the converter alone returns, or its exact error."""
    params, arguments = case
    assert _outcome(lambda: params.validate("t", arguments), arguments) == _outcome(
        lambda: _reference_validate(params, "t", arguments), arguments
    )


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (int, 5),
        (int, True),
        (int, 5.0),
        (int, 5.5),
        (int, _Int(5)),
        (int, Level.LOW),
        (float, 2.5),
        (float, 5),
        (float, float("nan")),
        pytest.param(float, _HUGE, id="float-huge-int"),
        (float, False),
        (bool, True),
        (bool, 1),
        (str, "s"),
        (str, _Text("s")),
        (str, Mood.HAPPY),
        (str, 5),
        (Annotated[int, "n"], True),
        (Annotated[bool, "b"], 0),
        (Any, [1]),
        (Level, 1),
        (Level, True),
    ],
)
def test_validate_scalar_edge_cases_agree(annotation: Any, value: Any) -> None:
    """bool is not an int, an int is a float, subclasses go to the converter: as before."""
    params = _probe(annotation)._params
    arguments = {"value": value}
    assert _outcome(lambda: params.validate("probe", arguments), arguments) == _outcome(
        lambda: _reference_validate(params, "probe", arguments), arguments
    )


class _Flaky(Mapping[str, Any]):
    """A mapping that claims "a" and "b" but fails to give "a", and lists only "b"."""

    def __getitem__(self, key: str) -> Any:
        if key == "a":
            raise ValueError("no a today")
        if key == "b":
            return 2
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in ("a", "b")

    def __iter__(self) -> Any:
        return iter(["b"])

    def __len__(self) -> int:
        return 1


def test_validate_odd_mapping_agrees() -> None:
    """A mapping whose lookups fail, or whose keys and lookups disagree, is handled as before."""
    params = add._params
    arguments = _Flaky()
    assert _outcome(lambda: params.validate("add", arguments), arguments) == _outcome(
        lambda: _reference_validate(params, "add", arguments), arguments
    )
    assert "a: invalid value (no a today)" in _error(add, arguments)


def test_validate_duplicate_parameter_names_still_report_unknown() -> None:
    """Two parameters named alike (a hand-built schema) do not hide an unknown argument."""
    params = _params_from_schema({"properties": {1: {}, "1": {}}})
    assert [p.name for p in params.params] == ["1", "1"]
    arguments = {"1": 0, "x": 1}
    with pytest.raises(ToolArgumentsInvalid, match="unknown argument 'x'"):
        params.validate("t", arguments)
    assert _outcome(lambda: params.validate("t", arguments), arguments) == _outcome(
        lambda: _reference_validate(params, "t", arguments), arguments
    )


def _reference_serialize(value: Any) -> str:
    """serialize_result's general path, for every type."""
    if type(value) is str:
        return value
    plain = _json_converter.unstructure(value)
    if isinstance(plain, str):
        return str(plain)
    return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))


def _serialized(serialize: Callable[[Any], str], value: Any) -> Any:
    try:
        return serialize(value)
    except ToolResultUnserializable as exc:
        # The message ends with the cause's: compare the causes.
        cause = exc.__cause__
        return ("raised", type(cause), str(cause), str(exc).endswith(f"({cause})"))
    except Exception as exc:
        return ("raised", type(exc), str(exc), True)


@settings(database=None, max_examples=500)
@given(value=_SCALARS)
def test_property_serialize_result_fast_path_agrees(value: Any) -> None:
    """Plain scalars serialize exactly as cattrs and json.dumps would (NaN, Infinity, -0.0...)."""
    assert _serialized(serialize_result, value) == _serialized(_reference_serialize, value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        (-0.0, "-0.0"),
        (1e16, "1e+16"),
        (False, "false"),
        (-7, "-7"),
        (_Int(3), "3"),
        (_Float(2.5), "2.5"),
    ],
)
def test_serialize_result_scalars(value: Any, expected: str) -> None:
    """Scalars, and subclasses of them, read as JSON writes them."""
    assert serialize_result(value) == expected == _reference_serialize(value)


def test_serialize_result_int_too_long() -> None:
    """An int longer than str() allows is unserializable, as json.dumps finds it."""
    with pytest.raises(ToolResultUnserializable, match=r"type int .*Exceeds the limit"):
        serialize_result(_HUGE)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=12,
)


def _containers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in _containers(v))]
    if isinstance(value, list | tuple):
        return [value, *(c for v in value for c in _containers(v))]
    return []


def _assert_same_copy(original: Any, copied: Any, expected: Any) -> None:
    """``copied`` is what deepcopy made (``expected``), sharing no container with ``original``."""
    assert repr(copied) == repr(expected)
    assert [type(c) for c in _containers(copied)] == [type(c) for c in _containers(expected)]
    assert not {id(c) for c in _containers(copied)} & {id(c) for c in _containers(original)}


def test_definition_is_made_once_from_a_copy_of_the_schema() -> None:
    """A tool's definition is made once (every run of its agent shares it), from a copy
    of its schema: a request never holds the spec's own dicts."""
    definition = draw.definition()
    assert draw.definition() is definition
    assert definition.input_schema == draw.input_schema
    _assert_same_copy(draw.input_schema, definition.input_schema, copy.deepcopy(draw.input_schema))


def test_definition_copies_shared_parts_tuples_and_what_pickle_refuses() -> None:
    """The copy keeps deepcopy's shape (shared parts, tuples), also for a part pickle refuses."""

    class Local:  # a local class: pickle refuses it, deepcopy copies it
        pass

    shared = {"type": "integer"}
    plain: dict[str, Any] = {"type": "object", "properties": {"a": shared, "b": shared}}
    plain["enum"] = (1, 2)
    for schema in (plain, {**plain, "x-local": Local()}):
        copied = _copy_schema(schema)
        expected = copy.deepcopy(schema)
        assert copied is not schema
        assert copied["properties"]["a"] is copied["properties"]["b"]
        assert copied["properties"]["a"] is not shared
        assert type(copied["enum"]) is tuple
        assert repr({k: v for k, v in copied.items() if k != "x-local"}) == repr(
            {k: v for k, v in expected.items() if k != "x-local"}
        )
    assert type(copied["x-local"]) is Local
    assert copied["x-local"] is not schema["x-local"]


# ---------------------------------------------------------------------------
# Dataclasses and TypedDicts (also what Agent(output_type=...) accepts)
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Point:
    x: int
    y: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)


class _Movie(typing.TypedDict):
    title: str
    year: typing_extensions.NotRequired[int]


def test_dataclass_and_typeddict_parameters_have_object_schemas() -> None:
    """A dataclass and a TypedDict are closed objects; defaults shown, factories optional."""
    assert json_schema(_Point) == {
        "type": "object",
        "properties": {
            "x": {"type": "integer"},
            "y": {"type": "integer", "default": 0},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["x"],
        "additionalProperties": False,
    }
    assert json_schema(_Movie) == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["title"],
        "additionalProperties": False,
    }


def test_dataclass_and_typeddict_arguments_are_validated_strictly() -> None:
    """Every problem in a dataclass or TypedDict argument is reported with its path."""

    @tool
    def place(p: _Point, m: _Movie) -> str:
        """Place."""
        return f"{p} {m}"

    assert place.validate({"p": {"x": 1}, "m": {"title": "Up"}}) == {
        "p": _Point(x=1),
        "m": {"title": "Up"},
    }
    with pytest.raises(ToolArgumentsInvalid) as info:
        place.validate({"p": {"x": "1", "z": 2}, "m": {"year": "x"}})
    text = str(info.value)
    assert "p.x: expected int, got str ('1')" in text
    assert "p: unknown field 'z' (accepted: 'x', 'y', 'tags')" in text
    assert "m.title: missing required field" in text
    assert "m.year: expected int, got str ('x')" in text
