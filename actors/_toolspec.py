"""Tool definitions: ``@tool``, JSON Schema from type hints, strict argument checks.

A tool is a plain function (sync or async). :func:`tool` reads three things
from it at decoration time, so that a mistake in the tool's definition fails
at import, not in the middle of a run:

- the name (``fn.__name__`` unless given) and the description (the docstring's
  prose, up to its first Google-style section such as ``Args:``);
- a JSON Schema for the arguments, built from the resolved type hints
  (:func:`json_schema`), with per-argument descriptions from the docstring's
  ``Args:`` section or from ``Annotated[T, "description"]``;
- the parameters, used later by :meth:`ToolSpec.validate`.

Validation is deliberately stricter than cattrs' defaults. The arguments come
from a model, and a model that sends ``"5"`` for an ``int`` should be told so
rather than have it quietly coerced: the next call would then be right. So the
module's single converter (never cattrs' global one, which other code may
configure) refuses ``bool`` for ``int``, strings for numbers, and any
non-string for ``str``. It follows JSON Schema where JSON Schema is clear:
``5`` is a valid ``number`` (given to the tool as ``5.0``) and ``5.0`` is a
valid ``integer`` (given as ``5``), since JSON does not tell them apart.

Every problem in one call is reported at once, each with its path
(``point.x``, ``items[2]``, ``tags['a']``), in one :class:`ToolArgumentsInvalid`
the model can act on in a single retry.
"""

from __future__ import annotations

import collections.abc
import copy
import datetime
import enum
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, overload

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.errors import ForbiddenExtraKeysError, IterableValidationError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn

from tether.actors._errors import ToolArgumentsInvalid
from tether.providers import ToolDef

__all__ = [
    "ToolResultUnserializable",
    "ToolSpec",
    "json_schema",
    "serialize_result",
    "tool",
]

_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NoneType = type(None)


class ToolResultUnserializable(TypeError):
    """A tool returned a value that has no JSON form."""


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
# JSON Schema
# ---------------------------------------------------------------------------


def json_schema(annotation: Any) -> dict[str, Any]:
    """The JSON Schema of values of ``annotation``, a resolved type hint.

    Supported: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any``;
    ``list[X]``, ``Sequence[X]``, ``tuple[X, ...]`` (and sets, with
    ``uniqueItems``); ``dict[str, X]`` and ``Mapping[str, X]``; unions,
    ``Optional`` included (``anyOf``); ``Literal`` and ``Enum`` subclasses
    (``enum``, with the JSON type); attrs classes (nested objects with
    ``additionalProperties: false``); ``Annotated[X, "description"]``.

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
        # The converter is made with use_alias=True, so the keys are what
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


def _add_default(schema: dict[str, Any], default: Any) -> None:
    """Show a default to the model, when it has a JSON form."""
    try:
        text = json.dumps(_converter.unstructure(default), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return
    schema["default"] = json.loads(text)  # plain JSON values: a tuple becomes a list


# ---------------------------------------------------------------------------
# The strict converter
# ---------------------------------------------------------------------------


class _Mismatch(ValueError):
    """A value of the wrong JSON type or outside a set of allowed values."""

    def __init__(self, expected: str, value: Any) -> None:
        super().__init__(expected, value)
        self.expected = expected
        self.value = value

    def __str__(self) -> str:
        if self.value is None:
            return f"expected {self.expected}, got None"
        return f"expected {self.expected}, got {type(self.value).__name__} ({_short(self.value)})"


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _same_json_value(expected: Any, got: Any) -> bool:
    """``==`` as JSON sees it: ``True`` is not ``1``, ``"1"`` is not ``1``, ``1.0`` is ``1``."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return isinstance(expected, bool) and isinstance(got, bool) and expected == got
    if isinstance(expected, int | float):
        return isinstance(got, int | float) and expected == got
    if isinstance(expected, str):
        return isinstance(got, str) and expected == got
    return expected is None and got is None


def _structure_enum(obj: Any, cls: type[enum.Enum]) -> enum.Enum:
    for member in cls:
        if _same_json_value(member.value, obj):
            return member
    raise _Mismatch(_display(cls), obj)


def _structure_scalar(obj: Any, cls: Any) -> Any:
    # Registered for str, int, float and bool by class, so cattrs also sends
    # their subclasses here (an IntEnum is an int): hand those to the enum hook.
    if _is_enum(cls):
        return _structure_enum(obj, cls)
    if cls is bool:
        if isinstance(obj, bool):
            return obj
    elif cls is int:
        if isinstance(obj, int) and not isinstance(obj, bool):
            return obj
        if isinstance(obj, float) and obj.is_integer():
            return int(obj)
    elif cls is float:
        if isinstance(obj, int | float) and not isinstance(obj, bool):
            try:
                return float(obj)
            except OverflowError:
                pass
    elif cls is str and isinstance(obj, str):
        return obj
    raise _Mismatch(_display(cls), obj)


def _structure_none(obj: Any, _: Any) -> None:
    if obj is not None:
        raise _Mismatch("None", obj)


def _literal_hook(tp: Any) -> Callable[[Any, Any], Any]:
    literals = typing.get_args(tp)

    def structure_literal(obj: Any, _: Any) -> Any:
        for literal in literals:
            if _same_json_value(_literal_value(literal), obj):
                return literal
        raise _Mismatch(_display(tp), obj)

    return structure_literal


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True, use_alias=True)

    def structure_union(obj: Any, tp: Any) -> Any:
        members = typing.get_args(tp)
        if obj is None and _NoneType in members:
            return None
        others = [m for m in members if m is not _NoneType]
        if len(others) == 1:
            # Optional[X]: keep X's detailed errors (the fields of a nested
            # object), but name the whole union when the value is just wrong.
            try:
                return converter.structure(obj, others[0])
            except _Mismatch:
                raise _Mismatch(_display(tp), obj) from None
        # Members are tried in the declared order; with strict scalars,
        # the first that accepts the value is the only sensible reading.
        for member in others:
            try:
                return converter.structure(obj, member)
            except Exception:
                continue
        raise _Mismatch(_display(tp), obj)

    def array_hook(tp: Any) -> Callable[[Any, Any], Any]:
        parts = _array_parts(tp)
        assert parts is not None
        build, element = parts
        as_list = list[element]  # type: ignore[valid-type]
        structure_items = list_structure_factory(as_list, converter)

        def structure_array(obj: Any, _: Any) -> Any:
            # cattrs would take any iterable, so "abc" would become a list
            # of letters: only a JSON array is an array.
            if not isinstance(obj, list | tuple):
                raise _Mismatch(_display(tp), obj)
            items = structure_items(obj, as_list)
            return items if build is list else build(items)

        return structure_array

    def mapping_hook(tp: Any) -> Callable[[Any, Any], Any]:
        parts = _mapping_value(tp)
        assert parts is not None
        value_type = parts[1]
        structure_value = converter.get_structure_hook(value_type)

        def structure_mapping(obj: Any, _: Any) -> dict[str, Any]:
            if not isinstance(obj, Mapping):
                raise _Mismatch(_display(tp), obj)
            errors: list[Exception] = []
            result: dict[str, Any] = {}
            for key, value in obj.items():
                try:
                    if not isinstance(key, str):
                        raise _Mismatch("a string key", key)
                    result[key] = structure_value(value, value_type)
                except Exception as exc:
                    note = IterableValidationNote(
                        f"Structuring value @ key {key!r}", key, value_type
                    )
                    exc.__notes__ = [*getattr(exc, "__notes__", []), note]
                    errors.append(exc)
            if errors:
                raise IterableValidationError(f"While structuring {tp!r}", errors, tp)
            return result

        return structure_mapping

    def attrs_hook(cls: Any) -> Callable[[Any, Any], Any]:
        structure_fields = make_dict_structure_fn(cls, converter)

        def structure_object(obj: Any, _: Any) -> Any:
            # Without this check a string would fail with "string indices
            # must be integers", which tells the model nothing.
            if not isinstance(obj, Mapping):
                raise _Mismatch(f"object ({cls.__name__})", obj)
            return structure_fields(obj, cls)

        return structure_object

    for scalar in (str, int, float, bool):
        converter.register_structure_hook(scalar, _structure_scalar)
    # Predicate hooks registered later are consulted first.
    converter.register_structure_hook_func(lambda t: t is _NoneType, _structure_none)
    converter.register_structure_hook_func(_is_enum, _structure_enum)
    converter.register_structure_hook_factory(_is_literal, _literal_hook)
    converter.register_structure_hook_func(_is_union, structure_union)
    converter.register_structure_hook_factory(lambda t: _array_parts(t) is not None, array_hook)
    converter.register_structure_hook_factory(lambda t: _mapping_value(t) is not None, mapping_hook)
    converter.register_structure_hook_factory(_is_attrs, attrs_hook)

    # Results: sets become (sorted when possible) lists, dates ISO strings,
    # and a str-valued Enum its value (cattrs would hand back the member).
    converter.register_unstructure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, set | frozenset), _unstructure_set
    )
    converter.register_unstructure_hook(str, _unstructure_str)
    converter.register_unstructure_hook(datetime.date, _isoformat)
    converter.register_unstructure_hook(datetime.time, _isoformat)
    return converter


def _unstructure_set(value: Any) -> list[Any]:
    items = [_converter.unstructure(item) for item in value]
    try:
        return sorted(items)
    except TypeError:
        return items


def _unstructure_str(value: str) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _isoformat(value: datetime.date | datetime.time) -> str:
    return value.isoformat()


_converter = _make_converter()

# A marker between a problem and its path in cattrs.transform_error's
# "{problem} @ {path}" lines. Problems and paths are built from reprs, which
# escape NUL, so the marker cannot occur inside either.
_MARK = "\x00 @ "


def _format_problem(exc: BaseException, tp: Any) -> str:
    if isinstance(exc, _Mismatch):
        text = str(exc)
    elif isinstance(exc, KeyError):
        text = "missing required field"
    elif isinstance(exc, ForbiddenExtraKeysError):
        extra = ", ".join(repr(k) for k in sorted(exc.extra_fields))
        accepted = ""
        if _is_attrs(exc.cl):
            names = [repr(f.alias or f.name) for f in attrs.fields(exc.cl) if f.init]
            accepted = f" (accepted: {', '.join(names)})"
        text = f"unknown field{'s' if len(exc.extra_fields) > 1 else ''} {extra}{accepted}"
    else:
        text = f"invalid value ({str(exc) or type(exc).__name__})"
    return text.replace("\x00", "\\x00") + "\x00"


def _problems(exc: BaseException, root: str) -> list[str]:
    lines = cattrs.transform_error(exc, path=root, format_exception=_format_problem)
    result = []
    for line in lines:
        problem, _, path = line.partition(_MARK)
        result.append(f"{path}: {problem}")
    return result


# ---------------------------------------------------------------------------
# Parameters and validation
# ---------------------------------------------------------------------------


@attrs.frozen
class _Param:
    name: str
    annotation: Any
    required: bool


@attrs.frozen
class _Params:
    """What :meth:`ToolSpec.validate` checks arguments against."""

    params: tuple[_Param, ...]

    def validate(self, tool_name: str, arguments: Any) -> dict[str, Any]:
        prefix = f"invalid arguments for tool {tool_name!r}: "
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsInvalid(
                f"{prefix}arguments must be a JSON object, "
                f"got {_json_kind(arguments)}: {_short(arguments, 200)}"
            )
        problems: list[str] = []
        result: dict[str, Any] = {}
        for param in self.params:
            if param.name not in arguments:
                if param.required:
                    problems.append(f"{param.name}: missing required argument")
                continue
            try:
                result[param.name] = _converter.structure(arguments[param.name], param.annotation)
            except Exception as exc:
                problems.extend(_problems(exc, param.name))
        known = {param.name for param in self.params}
        unknown = [key for key in arguments if key not in known]
        if unknown:
            listed = ", ".join(repr(key) for key in unknown)
            accepted = ", ".join(repr(param.name) for param in self.params)
            plural = "s" if len(unknown) > 1 else ""
            hint = f"accepted: {accepted}" if accepted else "this tool takes no arguments"
            problems.append(f"unknown argument{plural} {listed} ({hint})")
        if problems:
            raise ToolArgumentsInvalid(prefix + "; ".join(problems))
        return result


def _params_from_schema(schema: Mapping[str, Any]) -> _Params:
    """A fallback for a ToolSpec built by hand around an unannotated function."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return _Params(tuple(_Param(str(name), Any, name in required) for name in properties))


def _hint_target(fn: Callable[..., Any]) -> Any:
    """The object whose annotations and docstring describe ``fn``'s parameters."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn):
        return fn
    return type(fn).__call__  # a callable object


def _analyze(
    fn: Callable[..., Any], name: str, arg_docs: Mapping[str, str]
) -> tuple[_Params, dict[str, Any]]:
    """The parameters of ``fn`` and the JSON Schema of its arguments."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"tool {name!r}: cannot read the signature of {fn!r}: {exc}") from exc
    try:
        hints = typing.get_type_hints(_hint_target(fn), include_extras=True)
    except Exception as exc:
        raise TypeError(f"tool {name!r}: cannot resolve the type hints: {exc!r}") from exc

    params: list[_Param] = []
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise TypeError(
                f"tool {name!r}: parameter {star}{param.name} is not supported; "
                "a tool's arguments must be named"
            )
        if param.kind is param.POSITIONAL_ONLY:
            # Tools are called with keyword arguments only.
            raise TypeError(f"tool {name!r}: parameter {param.name!r} is positional-only")
        if param.name not in hints:
            raise TypeError(f"tool {name!r}: parameter {param.name!r} has no type annotation")
        hint = hints[param.name]
        try:
            schema = _schema(hint, ())
        except TypeError as exc:
            raise TypeError(
                f"tool {name!r}: parameter {param.name!r} ({_display(hint)}): {exc}"
            ) from None
        if "description" not in schema and param.name in arg_docs:
            schema["description"] = arg_docs[param.name]
        is_required = param.default is param.empty
        if is_required:
            required.append(param.name)
        else:
            _add_default(schema, param.default)
        properties[param.name] = schema
        params.append(_Param(param.name, hint, is_required))
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return _Params(tuple(params)), schema


# ---------------------------------------------------------------------------
# Docstrings
# ---------------------------------------------------------------------------

_SECTION_RE = re.compile(
    r"(args|arguments|parameters|params|keyword args|keyword arguments|other parameters"
    r"|returns?|yields?|raises|examples?|notes?|attributes|see also|warnings?|warns"
    r"|todo|references)\s*:",
    re.IGNORECASE,
)
_ARG_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
_ARG_ENTRY_RE = re.compile(r"\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:(?P<text>.*)")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """``(description, {argument: description})`` from a cleaned docstring.

    The description is everything before the first Google-style section
    header (``Args:``, ``Returns:``, ...) at the left margin, so a tool can
    explain itself in several paragraphs. Entries of an ``Args:`` section
    look like ``name: text`` or ``name (type): text``; more deeply indented
    lines continue the entry above.
    """
    prose: list[str] = []
    arg_docs: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    entry_indent: int | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION_RE.fullmatch(stripped) if indent == 0 else None
        if header is not None:
            section = header.group(1).lower()
            current, entry_indent = None, None
            continue
        if section is None:
            prose.append(line)
            continue
        if section not in _ARG_SECTIONS or not stripped:
            continue
        if indent == 0:
            section = "end"  # text at the margin ends the section
            continue
        entry = _ARG_ENTRY_RE.fullmatch(stripped)
        if entry is not None and (entry_indent is None or indent <= entry_indent):
            entry_indent = indent
            current = entry.group("name")
            arg_docs[current] = entry.group("text").strip()
        elif current is not None:
            arg_docs[current] = f"{arg_docs[current]} {stripped}".strip()
    return "\n".join(prose).strip(), arg_docs


# ---------------------------------------------------------------------------
# ToolSpec and @tool
# ---------------------------------------------------------------------------


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"a tool name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("a tool name must not be empty")
    if not _NAME_RE.match(name):
        raise ValueError(
            f"invalid tool name {name!r}: use 1 to 64 letters, digits, '_' or '-' "
            "(providers reject anything else)"
        )


def _check_timeout(timeout_s: object) -> None:
    if timeout_s is None:
        return
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise TypeError(f"timeout_s must be a number or None, got {type(timeout_s).__name__}")
    if not timeout_s > 0:  # also catches NaN
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")


@attrs.frozen(kw_only=True, eq=False)
class ToolSpec:
    """A tool the model can call: what it is told, and how to call it.

    Made by :func:`tool`. Built by hand it works too: arguments are then
    checked against ``fn``'s type hints, or only against the names in
    ``input_schema`` when ``fn`` has none.
    """

    name: str = attrs.field(validator=lambda _s, _a, value: _check_name(value))
    description: str
    #: JSON Schema object for the arguments; treat it as read-only.
    input_schema: Mapping[str, Any]
    fn: Callable[..., Any]
    is_async: bool
    #: The run ends with this tool's result as the answer.
    terminal: bool = False
    #: ``None`` uses the runtime's default timeout.
    timeout_s: float | None = attrs.field(
        default=None, validator=lambda _s, _a, value: _check_timeout(value)
    )
    #: Run after the round's parallel calls, one at a time.
    sequential: bool = False
    _params: _Params = attrs.field(init=False, repr=False)

    @_params.default
    def _derive_params(self) -> _Params:
        try:
            params, _ = _analyze(self.fn, self.name, {})
        except TypeError:
            return _params_from_schema(self.input_schema)
        return params

    def definition(self) -> ToolDef:
        """What the model is told about this tool (a copy the provider may change)."""
        return ToolDef(
            name=self.name,
            description=self.description,
            input_schema=copy.deepcopy(self.input_schema),
        )

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The keyword arguments to call ``fn`` with, from the model's ``arguments``.

        Only the arguments the model gave are returned; Python fills in the
        defaults. Raises :class:`ToolArgumentsInvalid` listing every problem.
        """
        return self._params.validate(self.name, arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function, so a decorated function stays usable as one."""
        return self.fn(*args, **kwargs)


def _make_spec(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    terminal: bool,
    timeout_s: float | None,
    sequential: bool,
) -> ToolSpec:
    if isinstance(fn, ToolSpec):
        raise TypeError(f"{fn.name!r} is already a tool; use attrs.evolve() to change its settings")
    if isinstance(fn, type) or not callable(fn):
        raise TypeError(f"@tool needs a function, got {type(fn).__name__}: {_short(fn)}")
    if name is None:
        name = getattr(fn, "__name__", None)
        if not isinstance(name, str):
            raise TypeError(f"{_short(fn)} has no __name__: pass tool(..., name=...)")
    _check_name(name)
    _check_timeout(timeout_s)
    target = _hint_target(fn)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise TypeError(f"tool {name!r}: generator functions cannot be tools")
    doc_description, arg_docs = _parse_docstring(inspect.getdoc(target) or "")
    _, schema = _analyze(fn, name, arg_docs)
    return ToolSpec(
        name=name,
        description=doc_description if description is None else description,
        input_schema=schema,
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target),
        terminal=terminal,
        timeout_s=timeout_s,
        sequential=sequential,
    )


@overload
def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    timeout_s: float | None = None,
    sequential: bool = False,
) -> ToolSpec: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    timeout_s: float | None = None,
    sequential: bool = False,
) -> Callable[[Callable[..., Any]], ToolSpec]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    timeout_s: float | None = None,
    sequential: bool = False,
) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
    """Make a tool of a function: ``@tool`` or ``@tool(terminal=True, timeout_s=5)``.

    ``name`` defaults to the function's ``__name__``, ``description`` to its
    docstring (up to the first ``Args:``-style section). ``terminal`` ends the
    run with the tool's result; ``timeout_s`` overrides the runtime's default
    per-call timeout; ``sequential`` keeps the tool out of a round's parallel
    calls. Every parameter needs a type annotation :func:`json_schema` can
    describe; problems raise :class:`TypeError` or :class:`ValueError` here,
    not when the model first calls the tool.
    """

    def decorate(f: Callable[..., Any]) -> ToolSpec:
        return _make_spec(
            f,
            name=name,
            description=description,
            terminal=terminal,
            timeout_s=timeout_s,
            sequential=sequential,
        )

    return decorate if fn is None else decorate(fn)


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


def serialize_result(value: Any) -> str:
    """The text of a tool's result, as the model will read it.

    A ``str`` is passed as is (so is anything whose JSON form is a string,
    such as a str-valued Enum member). Everything else becomes compact JSON
    after cattrs' unstructuring: attrs instances become objects, Enums their
    values, sets lists, dates ISO strings. ``None`` becomes ``"null"``
    rather than ``""``: it is what JSON calls nothing, and some providers
    reject an empty tool result. Non-finite floats are written as ``NaN`` or
    ``Infinity``, which the model reads fine though strict JSON has no such
    values. Raises :class:`ToolResultUnserializable` for anything else.
    """
    if type(value) is str:
        return value
    try:
        plain = _converter.unstructure(value)
        if isinstance(plain, str):
            return str(plain)
        return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolResultUnserializable(
            f"tool returned a value of type {type(value).__name__} that cannot be "
            f"serialized to JSON ({exc})"
        ) from exc
