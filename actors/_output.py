"""Typed output: how an ``output_type`` is shown to a model and how its answer is checked.

:class:`OutputSchema` is made once per agent from a resolved type hint: the
kinds ``@tool`` can describe (attrs classes, dataclasses, ``TypedDict``,
Pydantic models and what Pydantic's ``TypeAdapter`` reads, ``list[...]``,
``Literal``, enums, unions of these, and the scalars). A record (attrs class,
dataclass, TypedDict, Pydantic model) is the JSON object itself; any
other type is *wrapped*: the object is ``{"result": <the value>}``, because
a tool's input, and OpenAI's ``json_schema`` response format, must be an
object at the root. The checks are the strict ones tool arguments get
(:mod:`._validate`), so every problem goes back to the model at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from tether.actors._pydantic_kinds import pydantic_object, uses_pydantic
from tether.actors._schema import (
    _display,
    _is_record,
    _json_converter,
    _json_kind,
    _load_pydantic,
    _schema,
)
from tether.actors._tool_errors import ToolArgumentsInvalid
from tether.actors._validate import _converter, _Param, _Params, _problems, _short
from tether.providers import MAX_TOOL_ARGUMENT_DEPTH, text_too_deep

#: The name of the output tool and of the native response format's schema.
OUTPUT_TOOL = "final_result"
#: The key a non-object output type is wrapped in.
WRAP_KEY = "result"

_KINDS = (
    "an attrs class, a dataclass, a TypedDict, a Pydantic model, list[...], a Literal, "
    "an Enum, a scalar (int, float, bool), or a union of these"
)


@attrs.frozen(kw_only=True, eq=False)
class OutputSchema:
    """What a typed output looks like on the wire, and its strict check."""

    #: The output type as given (a resolved type hint).
    type: Any
    #: ``True`` when the wire object is ``{"result": value}`` (a non-record type).
    wrapped: bool
    #: The JSON Schema of the wire object (treat it as read-only).
    schema: Mapping[str, Any]
    _params: _Params | None = None
    #: Pydantic checks and dumps the type as a whole (:mod:`._pydantic`).
    _pydantic: bool = False

    @classmethod
    def of(cls, output_type: Any) -> OutputSchema:
        """The schema of ``output_type``; a :class:`TypeError` names what cannot be described."""
        pydantic = uses_pydantic(output_type)
        try:
            inner = _schema(output_type, ())
        except TypeError as exc:
            # Pydantic's own problems (or its absence) say what to do; the rest get the list.
            advice = "" if pydantic else f"; use {_KINDS}"
            raise TypeError(
                f"output_type {_display(output_type)} cannot be described to a model ({exc})"
                f"{advice}"
            ) from None
        if _is_record(output_type) or pydantic_object(output_type):
            return cls(type=output_type, wrapped=False, schema=inner, pydantic=pydantic)
        schema = {
            "type": "object",
            "properties": {WRAP_KEY: inner},
            "required": [WRAP_KEY],
            "additionalProperties": False,
        }
        params = _Params((_Param(WRAP_KEY, output_type, True),))
        return cls(type=output_type, wrapped=True, schema=schema, params=params, pydantic=pydantic)

    def validate(self, data: Any) -> Any:
        """The typed value of the wire object ``data``; raises :class:`ToolArgumentsInvalid`
        listing every problem."""
        if self._params is not None:
            return self._params.validate(OUTPUT_TOOL, data)[WRAP_KEY]
        if not isinstance(data, Mapping):
            raise ToolArgumentsInvalid(
                f"invalid {OUTPUT_TOOL}: it must be a JSON object, "
                f"got {_json_kind(data)}: {_short(data, 200)}"
            )
        try:
            return _converter.structure(data, self.type)
        except Exception as exc:
            # "$.days: ..." at a field; a problem of the whole object (a model validator's)
            # has no path to show.
            problems = [p.removeprefix("$.").removeprefix("$: ") for p in _problems(exc, "$")]
            raise ToolArgumentsInvalid(f"invalid {OUTPUT_TOOL}: " + "; ".join(problems)) from None

    def parse(self, text: str) -> Any:
        """The typed value of a JSON text (a native structured answer)."""
        if text_too_deep(text):
            # As for tool arguments: json.loads would recurse once per level, and nothing
            # this deep may enter the run's state (docs/guides/typed-output.md;
            # providers/_arguments.py).
            raise ToolArgumentsInvalid(
                f"the answer nests deeper than {MAX_TOOL_ARGUMENT_DEPTH} levels of objects "
                "and arrays, the limit for a structured answer; answer with JSON less "
                "deeply nested that matches the response format"
            )
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise ToolArgumentsInvalid(
                f"the answer is not JSON: {_short(text, 200)}; answer with one JSON object "
                "that matches the response format"
            ) from None
        return self.validate(data)

    def dump(self, value: Any) -> Any:
        """``value`` as plain JSON data (not wrapped); :meth:`load` reads it back."""
        if self._pydantic:
            return _load_pydantic(self.type).dump(value, self.type)
        return _json_converter.unstructure(value)

    def load(self, data: Any) -> Any:
        """The typed value of what :meth:`dump` made (strictly checked)."""
        return _converter.structure(data, self.type)

    def text(self, value: Any) -> str:
        """``value`` as compact JSON text (the candidate's ``text``)."""
        return json.dumps(self.dump(value), ensure_ascii=False, separators=(",", ":"))


def dump_output(value: Any) -> Any:
    """A typed output (or a ``str``) as plain JSON data, as :meth:`OutputSchema.dump` does."""
    return _json_converter.unstructure(value)
