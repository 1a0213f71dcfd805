"""Strict checks of a tool's arguments, and the messages a model reads.

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

import enum
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn

from tether.actors._pydantic_kinds import PydanticProblems, uses_pydantic
from tether.actors._schema import (
    _array_parts,
    _display,
    _is_attrs,
    _is_dataclass,
    _is_enum,
    _is_literal,
    _is_record,
    _is_typeddict,
    _is_union,
    _json_kind,
    _literal_value,
    _load_pydantic,
    _mapping_value,
    _NoneType,
    _record_keys,
    _typeddict_keys,
)
from tether.actors._tool_errors import ToolArgumentsInvalid
from tether.providers import MAX_TOOL_ARGUMENT_DEPTH, text_too_deep

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

    def typeddict_hook(cls: Any) -> Callable[[Any, Any], Any]:
        # By hand, not cattrs' own: its required keys miss postponed NotRequired marks.
        keys = _typeddict_keys(cls, typing.get_type_hints(cls, include_extras=True))
        known = {key for key, _, _ in keys}

        def structure_typeddict(obj: Any, _: Any) -> dict[str, Any]:
            if not isinstance(obj, Mapping):
                raise _Mismatch(f"object ({cls.__name__})", obj)
            errors: list[Exception] = []
            result: dict[str, Any] = {}
            for key, hint, required in keys:
                try:
                    if key in obj:
                        result[key] = converter.structure(obj[key], hint)
                    elif required:
                        raise KeyError(key)
                except Exception as exc:
                    note = AttributeValidationNote(f"Structuring key {key!r}", key, hint)
                    exc.__notes__ = [*getattr(exc, "__notes__", []), note]
                    errors.append(exc)
            extra = {key for key in obj if key not in known}
            if extra:
                errors.append(ForbiddenExtraKeysError(None, cls, extra))
            if errors:
                raise ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
            return result

        return structure_typeddict

    def attrs_hook(cls: Any) -> Callable[[Any, Any], Any]:
        # attrs classes and dataclasses alike: cattrs reads both.
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
    converter.register_structure_hook_factory(
        lambda t: _is_attrs(t) or _is_dataclass(t), attrs_hook
    )
    converter.register_structure_hook_factory(_is_typeddict, typeddict_hook)
    # Registered last, so consulted first: a type that involves Pydantic is
    # Pydantic's to check as a whole (its Annotated constraints included).
    converter.register_structure_hook_factory(uses_pydantic, _pydantic_hook)
    return converter


def _pydantic_hook(tp: Any) -> Callable[[Any, Any], Any]:
    validate = _load_pydantic(tp).validate

    def structure_pydantic(obj: Any, _: Any) -> Any:
        return validate(tp, obj)

    return structure_pydantic


_converter = _make_converter()

# A marker between a problem and its path in cattrs.transform_error's
# "{problem} @ {path}" lines. Problems and paths are built from reprs, which
# escape NUL, so the marker cannot occur inside either.
_MARK = "\x00 @ "


# Pydantic's problems, each with its path below the value's: "\x1e" ends a
# path, "\x1f" separates two problems (neither occurs in a cleaned message).
_SUBPATH, _NEXT = "\x1e", "\x1f"


def _clean(text: str) -> str:
    return text.replace("\x00", "\\x00").replace(_SUBPATH, " ").replace(_NEXT, " ")


def _format_problem(exc: BaseException, tp: Any) -> str:
    if isinstance(exc, PydanticProblems):
        entries = (f"{_clean(path)}{_SUBPATH}{_clean(text)}" for path, text in exc.problems)
        return _NEXT.join(entries) + "\x00"
    if isinstance(exc, _Mismatch):
        text = str(exc)
    elif isinstance(exc, KeyError):
        text = "missing required field"
    elif isinstance(exc, ForbiddenExtraKeysError):
        extra = ", ".join(repr(k) for k in sorted(exc.extra_fields))
        accepted = ""
        if _is_record(exc.cl):
            names = [repr(key) for key in _record_keys(exc.cl)]
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
        if _SUBPATH not in problem:
            result.append(f"{path}: {problem}")
            continue
        for entry in problem.split(_NEXT):
            below, _, text = entry.partition(_SUBPATH)
            result.append(f"{path}{below}: {text}")
    return result


# ---------------------------------------------------------------------------
# Parameters and validation
# ---------------------------------------------------------------------------


@attrs.frozen
class _Param:
    name: str
    annotation: Any
    required: bool


# The plan's marker for an ``Any`` parameter: cattrs hands any value back as is.
_ANY: Any = object()


def _fast_type(annotation: Any) -> Any:
    """What lets a value skip the converter for ``annotation``, else ``None``.

    For ``str``, ``int``, ``float`` and ``bool`` (also inside ``Annotated``)
    it is that class: a value of exactly that type is one the converter
    would hand back unchanged (``_structure_scalar``; ``float(x) is x`` for a
    float). ``bool`` is not ``int`` here, nor ``int`` ``float``: such values,
    subclasses and every mistake take the converter's path, so results and
    messages stay the converter's. For ``Any`` it is :data:`_ANY`.
    """
    if typing.get_origin(annotation) is typing.Annotated:
        if uses_pydantic(annotation):
            return None  # Pydantic's constraints: the converter hands it to Pydantic
        annotation = typing.get_args(annotation)[0]
    if annotation is Any:
        return _ANY
    for scalar in (str, int, float, bool):
        if annotation is scalar:
            return scalar
    return None


@attrs.frozen
class _Params:
    """What :meth:`ToolSpec.validate` checks arguments against."""

    params: tuple[_Param, ...]
    #: The parameter that receives the call's ``RunContext`` (not an argument of the model's).
    context: str | None = None
    # Derived once from ``params`` (validation runs once per tool call):
    # ``(name, required, fast type, annotation)`` per parameter.
    _plan: tuple[tuple[str, bool, Any, Any], ...] = attrs.field(init=False, repr=False, eq=False)
    _known: frozenset[str] = attrs.field(init=False, repr=False, eq=False)

    @_plan.default
    def _make_plan(self) -> tuple[tuple[str, bool, Any, Any], ...]:
        return tuple(
            (p.name, p.required, _fast_type(p.annotation), p.annotation) for p in self.params
        )

    @_known.default
    def _make_known(self) -> frozenset[str]:
        return frozenset(param.name for param in self.params)

    def validate(self, tool_name: str, arguments: Any) -> dict[str, Any]:
        if not isinstance(arguments, Mapping):
            if isinstance(arguments, str) and text_too_deep(arguments):
                raise ToolArgumentsInvalid(
                    f"invalid arguments for tool {tool_name!r}: they nest deeper than "
                    f"{MAX_TOOL_ARGUMENT_DEPTH} levels of objects and arrays, the limit for "
                    "tool arguments; send them less deeply nested"
                )
            raise ToolArgumentsInvalid(
                f"invalid arguments for tool {tool_name!r}: arguments must be a JSON object, "
                f"got {_json_kind(arguments)}: {_short(arguments, 200)}"
            )
        problems: list[str] = []
        result: dict[str, Any] = {}
        for name, required, fast, annotation in self._plan:
            if name not in arguments:
                if required:
                    problems.append(f"{name}: missing required argument")
                continue
            try:
                value = arguments[name]
                if fast is _ANY or type(value) is fast:
                    result[name] = value  # what the converter would return (see _fast_type)
                else:
                    result[name] = _converter.structure(value, annotation)
            except Exception as exc:
                problems.extend(_problems(exc, name))
        known = self._known
        unknown = [key for key in arguments if key not in known]
        if unknown:
            listed = ", ".join(repr(key) for key in unknown)
            accepted = ", ".join(repr(param.name) for param in self.params)
            plural = "s" if len(unknown) > 1 else ""
            hint = f"accepted: {accepted}" if accepted else "this tool takes no arguments"
            problems.append(f"unknown argument{plural} {listed} ({hint})")
        if problems:
            raise ToolArgumentsInvalid(
                f"invalid arguments for tool {tool_name!r}: " + "; ".join(problems)
            )
        return result


def _params_from_schema(schema: Mapping[str, Any]) -> _Params:
    """A fallback for a ToolSpec built by hand around an unannotated function."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return _Params(tuple(_Param(str(name), Any, name in required) for name in properties))
