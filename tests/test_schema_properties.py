"""Property tests: every supported type's schema validates the values it describes.

Hypothesis draws a type (a tree of scalars, literals, enums, lists, optionals,
mappings and records) together with a strategy for its values, on both of
tether's paths: cattrs' (attrs classes, dataclasses, TypedDicts) and
Pydantic's (models, ``Annotated`` constraints, ``Field`` descriptions). For
each drawn value, the JSON form tether dumps validates against the schema
tether shows the model (checked with ``jsonschema``, draft 2020-12, the draft
Pydantic writes), tether's own check reads it back as the same value, and the
schema passes OpenAI's strict mode exactly when the type has no open keys, no
sets and no defaults.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypedDict

import attrs
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import Field

from tether.actors import OutputSchema
from tether.runtime._typed import _strict_ok

_names = itertools.count()


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@attrs.frozen
class Spec:
    """A type, a strategy for its values, and whether OpenAI's strict mode takes its schema."""

    tp: Any
    values: st.SearchStrategy[Any]
    strict: bool = True


_finite = st.floats(allow_nan=False, allow_infinity=False)
_text = st.text(max_size=8)

_SCALARS = [
    Spec(int, st.integers()),
    Spec(float, _finite),
    Spec(bool, st.booleans()),
    Spec(str, _text),
    Spec(Color, st.sampled_from(Color)),
]

CATTRS_LEAVES = st.sampled_from(
    [
        *_SCALARS,
        Spec(Literal["a", "b", 1], st.sampled_from(["a", "b", 1])),
        Spec(set[int], st.sets(st.integers(), max_size=3), strict=False),
        Spec(tuple[str, ...], st.lists(_text, max_size=3).map(tuple)),
    ]
)

PYDANTIC_LEAVES = st.sampled_from(
    [
        *_SCALARS,
        Spec(Literal["a", "b"], st.sampled_from(["a", "b"])),
        Spec(Annotated[int, Field(ge=-5, le=5)], st.integers(-5, 5)),
        Spec(Annotated[str, Field(max_length=4, description="short")], st.text(max_size=4)),
        Spec(
            Annotated[float, Field(gt=0)],
            st.floats(min_value=0, exclude_min=True, allow_infinity=False),
        ),
    ]
)


def _containers(children: st.SearchStrategy[Spec]) -> st.SearchStrategy[Spec]:
    """list[T], T | None and dict[str, T] of a drawn T."""

    def as_list(s: Spec) -> Spec:
        return Spec(list[s.tp], st.lists(s.values, max_size=3), s.strict)  # type: ignore[name-defined]

    def as_optional(s: Spec) -> Spec:
        return Spec(s.tp | None, st.none() | s.values, s.strict)

    def as_dict(s: Spec) -> Spec:
        values = st.dictionaries(_text, s.values, max_size=3)
        return Spec(dict[str, s.tp], values, strict=False)  # type: ignore[name-defined]

    return st.one_of(children.map(as_list), children.map(as_optional), children.map(as_dict))


def _fields(children: st.SearchStrategy[Spec]) -> st.SearchStrategy[list[Spec]]:
    return st.lists(children, min_size=1, max_size=3)


def _cattrs_record(fields: list[Spec], kind: str) -> Spec:
    name = f"R{next(_names)}"
    names = [f"f{i}" for i in range(len(fields))]
    strict = all(f.strict for f in fields)
    by_name = {n: f.values for n, f in zip(names, fields, strict=True)}
    if kind == "attrs":
        cls: Any = attrs.make_class(
            name, {n: attrs.field(type=f.tp) for n, f in zip(names, fields, strict=True)}
        )
        return Spec(cls, st.builds(cls, **by_name), strict)
    if kind == "dataclass":
        cls = dataclasses.make_dataclass(
            name, [(n, f.tp) for n, f in zip(names, fields, strict=True)]
        )
        return Spec(cls, st.builds(cls, **by_name), strict)
    cls = TypedDict(name, {n: f.tp for n, f in zip(names, fields, strict=True)})  # type: ignore[operator]
    return Spec(cls, st.fixed_dictionaries(by_name), strict)


def _pydantic_record(fields: list[Spec]) -> Spec:
    names = [f"f{i}" for i in range(len(fields))]
    definitions: dict[str, Any] = {
        n: (f.tp, Field(description=f"field {n}")) for n, f in zip(names, fields, strict=True)
    }
    model = pydantic.create_model(f"M{next(_names)}", **definitions)
    values = {n: f.values for n, f in zip(names, fields, strict=True)}
    return Spec(
        model,
        st.fixed_dictionaries(values).map(lambda kw: model(**kw)),
        all(f.strict for f in fields),
    )


def _cattrs_extend(children: st.SearchStrategy[Spec]) -> st.SearchStrategy[Spec]:
    records = st.builds(
        _cattrs_record, _fields(children), st.sampled_from(["attrs", "dataclass", "typeddict"])
    )
    return st.one_of(_containers(children), records)


def _pydantic_extend(children: st.SearchStrategy[Spec]) -> st.SearchStrategy[Spec]:
    return st.one_of(_containers(children), _fields(children).map(_pydantic_record))


CATTRS_TYPES = st.recursive(CATTRS_LEAVES, _cattrs_extend, max_leaves=6)
# At the top a model (or a list of them), so that Pydantic reads the whole type.
PYDANTIC_TYPES = st.recursive(PYDANTIC_LEAVES, _pydantic_extend, max_leaves=6).flatmap(
    lambda s: st.sampled_from([_pydantic_record([s]), _containers_of_model(s)])
)


def _containers_of_model(s: Spec) -> Spec:
    model = _pydantic_record([s])
    return Spec(list[model.tp], st.lists(model.values, max_size=2), model.strict)  # type: ignore[name-defined]


def _check(spec: Spec, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
    output = OutputSchema.of(spec.tp)
    schema = dict(output.schema)
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    assert _strict_ok(schema) is spec.strict, schema
    for _ in range(3):
        value = draw(spec.values)
        dumped = output.dump(value)
        wire = {"result": dumped} if output.wrapped else dumped
        problems = [e.message for e in validator.iter_errors(wire)]
        assert not problems, (spec.tp, wire, problems)
        assert output.validate(wire) == value


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(spec=CATTRS_TYPES, data=st.data())
def test_cattrs_types_schemas_validate_their_values(spec: Spec, data: st.DataObject) -> None:
    """attrs classes, dataclasses, TypedDicts and the rest: dumped values fit the schema."""
    _check(spec, data.draw)


@SETTINGS
@given(spec=PYDANTIC_TYPES, data=st.data())
def test_pydantic_types_schemas_validate_their_values(spec: Spec, data: st.DataObject) -> None:
    """Pydantic models, Annotated constraints and Field descriptions: dumped values fit."""
    _check(spec, data.draw)


@pytest.mark.parametrize(
    "tp",
    [
        pydantic.create_model("WithDefault", x=(int, 3)),
        pydantic.create_model("Open", x=(dict[str, int], ...)),
    ],
)
def test_pydantic_schemas_not_strict_where_openai_would_refuse(tp: Any) -> None:
    """A default or open keys: the schema stays valid, and strict mode is off."""
    schema = OutputSchema.of(tp).schema
    Draft202012Validator.check_schema(schema)
    assert not _strict_ok(schema)
