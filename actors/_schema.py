"""JSON Schema from type hints, and the type introspection it shares.

:func:`json_schema` describes the values of a resolved type hint to a model;
:func:`tool` uses it for a tool's arguments. The helpers that classify an
annotation (``_is_union``, ``_array_parts``, ``_display``, ...) are shared with
the strict argument converter in :mod:`._validate`, so that the schema a model
is shown and the checks its arguments go through agree on every type.

Defaults are shown in their JSON form, made by ``_json_converter``: a cattrs
converter that only unstructures (sets become sorted lists, dates ISO
strings, str-valued Enums their values). :func:`serialize_result` uses it
too, so a tool's result reads the way its defaults do.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import cattrs
import typing_extensions

from tether.actors._pydantic_kinds import pydantic_version, uses_pydantic

__all__ = ["json_schema"]

_NoneType = type(None)


# ---------------------------------------------------------------------------
# Classifying annotations (shared by the schema builder and the converter)
# ---------------------------------------------------------------------------

# Collection types a model can send as a JSON array, and what the tool gets.
_ARRAY_BUILDERS: dict[Any, type] = {
    list: list,
    collections.abc.Sequence: list,
    collections.abc.MutableSequence: list,
    collections.abc.Collection: list,
    collections.abc.Iterable: list,
    tuple: tuple,
    set: set,
    collections.abc.MutableSet: set,
    frozenset: frozenset,
    collections.abc.Set: frozenset,
}
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def _is_attrs(tp: Any) -> bool:
    return isinstance(tp, type) and attrs.has(tp)


def _is_dataclass(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp) and not attrs.has(tp)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and typing_extensions.is_typeddict(tp)


def _is_record(tp: Any) -> bool:
    """An attrs class, a dataclass or a TypedDict: a JSON object with named fields."""
    return _is_attrs(tp) or _is_dataclass(tp) or _is_typeddict(tp)


# Pydantic's types: see ._pydantic_kinds (recognising them) and ._pydantic (reading them).

PYDANTIC_EXTRA = "install tether's pydantic extra (Pydantic 2): pip install 'tether[pydantic]'"


def _load_pydantic(tp: Any) -> Any:
    """The :mod:`._pydantic` module; a :class:`TypeError` naming the extra without it."""
    try:
        import tether.actors._pydantic as support
    except ImportError as exc:
        raise TypeError(
            f"{_display(tp)} is a Pydantic type, and tether reads those with Pydantic 2: "
            f"{PYDANTIC_EXTRA} ({exc})"
        ) from None
    return support


def _record_keys(tp: Any) -> list[str]:
    """The keys a record's JSON object accepts (for error messages)."""
    if _is_attrs(tp):
        return [f.alias or f.name for f in attrs.fields(tp) if f.init]
    if _is_dataclass(tp):
        return [f.name for f in dataclasses.fields(tp) if f.init]
    return list(typing.get_type_hints(tp))


def _array_parts(tp: Any) -> tuple[type, Any] | None:
    """``(what the tool gets, element type)`` for an array type, else ``None``.

    Fixed-length tuples (``tuple[int, str]``) are not arrays here: their JSON
    Schema needs ``prefixItems``, which not every provider accepts.
    """
    origin = typing.get_origin(tp) or tp
    if not isinstance(origin, type) or origin not in _ARRAY_BUILDERS:
        return None
    args = typing.get_args(tp)
    if origin is tuple:
        if not args:
            return (tuple, Any)
        if len(args) == 2 and args[1] is Ellipsis:
            return (tuple, args[0])
        return None
    return (_ARRAY_BUILDERS[origin], args[0] if args else Any)


def _mapping_value(tp: Any) -> tuple[Any, Any] | None:
    """``(key type, value type)`` for a mapping type, else ``None``."""
    origin = typing.get_origin(tp) or tp
    if origin not in _MAPPINGS:
        return None
    args = typing.get_args(tp)
    return (args[0], args[1]) if args else (str, Any)


def _display(tp: Any) -> str:
    """A short, Python-flavoured name for a type, for error messages."""
    if tp is None or tp is _NoneType:
        return "None"
    if tp is Any:
        return "Any"
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _display(typing.get_args(tp)[0])
    if origin is Literal or _is_enum(tp):
        return "one of " + ", ".join(repr(v) for v in _allowed_values(tp))
    if _is_union(tp):
        members = typing.get_args(tp)
        if all(_is_literal(m) or _is_enum(m) or m is _NoneType for m in members):
            # "one of 'red', 'green', None" reads better than "... | None".
            return "one of " + ", ".join(repr(v) for m in members for v in _allowed_values(m))
        return " | ".join(_display(a) for a in members)
    if origin is not None:
        args = ", ".join("..." if a is Ellipsis else _display(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', repr(origin))}[{args}]"
    if isinstance(tp, type):
        return tp.__name__
    return repr(tp).removeprefix("typing.")


def _allowed_values(tp: Any) -> list[Any]:
    """The JSON values of a Literal, an Enum or ``None``."""
    if tp is _NoneType:
        return [None]
    if _is_enum(tp):
        return [member.value for member in tp]
    return [_literal_value(v) for v in typing.get_args(tp)]


def _literal_value(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


# ---------------------------------------------------------------------------
# JSON values (defaults shown in a schema, and tools' results)
# ---------------------------------------------------------------------------


def _make_json_converter() -> cattrs.Converter:
    # use_alias=True as for the argument converter: an attrs instance becomes
    # an object with the keys its class's __init__ takes.
    converter = cattrs.Converter(use_alias=True)
    # Sets become (sorted when possible) lists, dates ISO strings, and a
    # str-valued Enum its value (cattrs would hand back the member).
    # By the field's declared type too (``set[str]``, not only ``set``): an attrs
    # instance's fields are unstructured as declared.
    converter.register_unstructure_hook_func(_is_set_type, _unstructure_set)
    converter.register_unstructure_hook(str, _unstructure_str)
    converter.register_unstructure_hook(datetime.date, _isoformat)
    converter.register_unstructure_hook(datetime.time, _isoformat)
    # Pydantic models and dataclasses: Pydantic's own JSON form (by alias, as
    # their schemas show them and their checks read them back).
    converter.register_unstructure_hook_func(
        lambda t: pydantic_version(t) > 0, _unstructure_pydantic
    )
    return converter


def _unstructure_pydantic(value: Any) -> Any:
    return _load_pydantic(type(value)).dump(value, type(value))


def _is_set_type(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    return isinstance(origin, type) and issubclass(origin, set | frozenset)


def _unstructure_set(value: Any) -> list[Any]:
    items = [_json_converter.unstructure(item) for item in value]
    try:
        return sorted(items)
    except TypeError:
        return items


def _unstructure_str(value: str) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _isoformat(value: datetime.date | datetime.time) -> str:
    return value.isoformat()


_json_converter = _make_json_converter()


# ---------------------------------------------------------------------------
# JSON Schema
# ---------------------------------------------------------------------------


def json_schema(annotation: Any) -> dict[str, Any]:
    """The JSON Schema of values of ``annotation``, a resolved type hint.

    Supported: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any``;
    ``list[X]``, ``Sequence[X]``, ``tuple[X, ...]`` (and sets, with
    ``uniqueItems``); ``dict[str, X]`` and ``Mapping[str, X]``; unions,
    ``Optional`` included (``anyOf``); ``Literal`` and ``Enum`` subclasses
    (``enum``, with the JSON type); attrs classes, dataclasses and
    ``TypedDict`` classes (nested objects with ``additionalProperties:
    false``); ``Annotated[X, "description"]``. With the ``pydantic`` extra,
    Pydantic models and whatever Pydantic's ``TypeAdapter`` reads
    (``Annotated[int, Field(gt=0)]``, ...): their schemas are Pydantic's
    (:mod:`._pydantic`).

    Raises :class:`TypeError` naming the type for anything else.
    """
    return _schema(annotation, ())


def _schema(tp: Any, enclosing: tuple[type, ...]) -> dict[str, Any]:
    # Always build a fresh dict: callers add "description" and "default".
    if tp is Any or tp is object:
        return {}
    if tp is None or tp is _NoneType:
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    origin = typing.get_origin(tp)
    if uses_pydantic(tp):
        schema: dict[str, Any] = _load_pydantic(tp).json_schema(tp)
        if origin is typing.Annotated and "description" not in schema:
            # Pydantic reads Field(description=...), not a plain string beside it.
            notes = [m for m in typing.get_args(tp)[1:] if isinstance(m, str)]
            if notes:
                schema["description"] = notes[0]
        return schema
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(tp)
        schema = _schema(base, enclosing)
        notes = [m for m in metadata if isinstance(m, str)]
        if notes:
            schema["description"] = notes[0]
        return schema
    if _is_enum(tp):
        values = [member.value for member in tp]
        if not values:
            raise TypeError(f"enum {tp.__name__} has no members")
        return _enum_schema(values, tp)
    if origin is Literal:
        return _enum_schema([_literal_value(v) for v in typing.get_args(tp)], tp)
    if _is_union(tp):
        return {"anyOf": [_schema(member, enclosing) for member in typing.get_args(tp)]}
    array = _array_parts(tp)
    if array is not None:
        build, element = array
        schema = {"type": "array"}
        items = _schema(element, enclosing)
        if items:
            schema["items"] = items
        if build in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    mapping = _mapping_value(tp)
    if mapping is not None:
        key, value = mapping
        if key is not str:
            raise TypeError(
                f"no JSON schema for {_display(tp)}: JSON object keys are strings, "
                "use dict[str, ...]"
            )
        schema = {"type": "object"}
        value_schema = _schema(value, enclosing)
        if value_schema:
            schema["additionalProperties"] = value_schema
        return schema
    if _is_attrs(tp):
        return _attrs_schema(tp, enclosing)
    if _is_dataclass(tp) or _is_typeddict(tp):
        return _fields_schema(tp, enclosing)
    if origin is tuple:
        raise TypeError(f"no JSON schema for {_display(tp)}: use tuple[X, ...] or list[X]")
    raise TypeError(f"no JSON schema for {_display(tp)}")


def _json_kind(value: Any) -> str:
    """The JSON type name of a Python value (``"string"``, ``"integer"``, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _enum_schema(values: list[Any], tp: Any) -> dict[str, Any]:
    kinds: list[str] = []
    for value in values:
        if value is not None and not isinstance(value, str | int | float):
            raise TypeError(f"{_display(tp)}: value {value!r} is not a JSON scalar")
        kind = _json_kind(value)
        if kind not in kinds:
            kinds.append(kind)
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _attrs_schema(cls: type, enclosing: tuple[type, ...]) -> dict[str, Any]:
    if cls in enclosing:
        # A recursive schema needs $ref/$defs, which providers handle unevenly.
        raise TypeError(f"attrs class {cls.__name__} refers to itself, which is not supported")
    try:
        attrs.resolve_types(cls)
    except Exception as exc:
        raise TypeError(f"cannot resolve the type hints of {cls.__name__}: {exc}") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        if field.type is None:
            raise TypeError(f"field {cls.__name__}.{field.name} has no type annotation")
        try:
            schema = _schema(field.type, (*enclosing, cls))
        except TypeError as exc:
            raise TypeError(f"field {cls.__name__}.{field.name}: {exc}") from None
        note = field.metadata.get("description")
        if isinstance(note, str):
            schema["description"] = note
        # The argument converter is made with use_alias=True, so the keys are what
        # the class's __init__ takes: "x" for a private attribute "_x".
        key = field.alias or field.name
        if field.default is attrs.NOTHING:
            required.append(key)
        elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            _add_default(schema, field.default)
        properties[key] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _typeddict_keys(cls: type, hints: Mapping[str, Any]) -> list[tuple[str, Any, bool]]:
    """A TypedDict's ``(key, type, required)``, its ``Required``/``NotRequired`` marks read.

    The marks are read from the hints too: with postponed annotations (a string
    ``"NotRequired[int]"``) Python 3.11 counts every key as required.
    """
    required = set(getattr(cls, "__required_keys__", hints))
    keys = []
    for key, hint in hints.items():
        while (mark := typing.get_origin(hint)) in _REQUIRED_MARKS:
            (required.add if mark is typing_extensions.Required else required.discard)(key)
            hint = typing.get_args(hint)[0]
        keys.append((key, hint, key in required))
    return keys


_UNSHOWN: Any = object()  # an optional field whose default is not shown
_REQUIRED_MARKS = (typing_extensions.Required, typing_extensions.NotRequired)


def _fields_schema(cls: type, enclosing: tuple[type, ...]) -> dict[str, Any]:
    """A dataclass's or a TypedDict's object schema (as :func:`_attrs_schema` for attrs)."""
    if cls in enclosing:
        raise TypeError(f"class {cls.__name__} refers to itself, which is not supported")
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise TypeError(f"cannot resolve the type hints of {cls.__name__}: {exc}") from exc
    fields: list[tuple[str, Any, Any]] = []  # (key, hint, default or attrs.NOTHING)
    if _is_dataclass(cls):
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            default: Any = attrs.NOTHING
            if field.default is not dataclasses.MISSING:
                default = field.default
            elif field.default_factory is not dataclasses.MISSING:
                default = _UNSHOWN  # a factory: optional, its value not shown
            fields.append((field.name, hints[field.name], default))
    else:
        for key, hint, required in _typeddict_keys(cls, hints):
            fields.append((key, hint, attrs.NOTHING if required else _UNSHOWN))
    properties: dict[str, Any] = {}
    required_keys: list[str] = []
    for key, hint, default in fields:
        try:
            schema = _schema(hint, (*enclosing, cls))
        except TypeError as exc:
            raise TypeError(f"field {cls.__name__}.{key}: {exc}") from None
        if default is attrs.NOTHING:
            required_keys.append(key)
        elif default is not _UNSHOWN:
            _add_default(schema, default)
        properties[key] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": required_keys,
        "additionalProperties": False,
    }


def _add_default(schema: dict[str, Any], default: Any) -> None:
    """Show a default to the model, when it has a JSON form."""
    try:
        text = json.dumps(_json_converter.unstructure(default), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return
    schema["default"] = json.loads(text)  # plain JSON values: a tuple becomes a list
