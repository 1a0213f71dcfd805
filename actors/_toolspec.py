"""Tool definitions: ``@tool`` and :class:`ToolSpec`.

A tool is a plain function (sync or async). :func:`tool` reads three things
from it at decoration time, so that a mistake in the tool's definition fails
at import, not in the middle of a run:

- the name (``fn.__name__`` unless given) and the description (the docstring's
  prose, up to its first Google-style section such as ``Args:``);
- a JSON Schema for the arguments, built from the resolved type hints
  (:func:`json_schema`, in :mod:`._schema`), with per-argument descriptions
  from the docstring's ``Args:`` section or from ``Annotated[T, "description"]``;
- the parameters, used later by :meth:`ToolSpec.validate`, which checks the
  model's arguments strictly (:mod:`._validate`).

:func:`serialize_result` turns what a tool returns into the text the model reads.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import pickle
import re
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, overload

import attrs

from tether.actors._context import RunContext
from tether.actors._schema import _add_default, _display, _json_converter, _schema, json_schema
from tether.actors._validate import _Param, _Params, _params_from_schema, _short
from tether.providers import Image, ToolDef

__all__ = [
    "ToolResultUnserializable",
    "ToolSpec",
    "json_schema",
    "serialize_result",
    "tool",
]

if sys.version_info >= (3, 13):
    from typing import TypeVar
else:  # TypeVar defaults (PEP 696); typing_extensions comes with anyio below 3.13
    from typing_extensions import TypeVar

#: A tool consumes contexts: a ``ToolSpec[object]`` serves a run of any deps.
DepsT_contra = TypeVar("DepsT_contra", contravariant=True, default=Any)
_D = TypeVar("_D")
_P = ParamSpec("_P")

_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ToolResultUnserializable(TypeError):
    """A tool returned a value that has no JSON form."""


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
    context: str | None = None
    for index, param in enumerate(signature.parameters.values()):
        if _is_run_context(hints.get(param.name)):
            if index != 0:
                raise TypeError(
                    f"tool {name!r}: parameter {param.name!r} is a RunContext; "
                    "the context must be the first parameter"
                )
            if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                raise TypeError(
                    f"tool {name!r}: the RunContext parameter must not be {param.kind.description}"
                )
            context = param.name  # passed by the tool actor, not by the model
            continue
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
    return _Params(tuple(params), context), schema


def _is_run_context(hint: Any) -> bool:
    """``RunContext`` or ``RunContext[...]`` (also inside ``Annotated``)."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint is RunContext or typing.get_origin(hint) is RunContext


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


def _copy_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A deep copy of a schema: pickle's round trip runs in C, where ``copy.deepcopy``
    takes a Python frame per node; ``deepcopy`` for what pickle refuses."""
    try:
        copied: Mapping[str, Any] = pickle.loads(pickle.dumps(schema, pickle.HIGHEST_PROTOCOL))
    except Exception:
        return copy.deepcopy(schema)
    return copied


@attrs.frozen(kw_only=True, eq=False)
class ToolSpec(Generic[DepsT_contra]):
    """A tool the model can call: what it is told, and how to call it.

    Made by :func:`tool`. Built by hand it works too: arguments are then
    checked against ``fn``'s type hints, or only against the names in
    ``input_schema`` when ``fn`` has none.

    Generic in the deps type its ``RunContext`` parameter expects
    (``ToolSpec[Any]`` for a tool that takes none), so that mypy catches a tool
    given to an agent whose runs carry other deps.
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
    # Made once per tool, so once per agent, and shared by all of its runs.
    _definition: ToolDef = attrs.field(init=False, repr=False)

    @_params.default
    def _derive_params(self) -> _Params:
        try:
            params, _ = _analyze(self.fn, self.name, {})
        except TypeError:
            return _params_from_schema(self.input_schema)
        return params

    @property
    def context_parameter(self) -> str | None:
        """The parameter that receives the call's :class:`RunContext`, if the tool has one."""
        return self._params.context

    @_definition.default
    def _derive_definition(self) -> ToolDef:
        return ToolDef(
            name=self.name,
            description=self.description,
            input_schema=_copy_schema(self.input_schema),
        )

    def definition(self) -> ToolDef:
        """What the model is told about this tool: made once, when the spec is, from a
        copy of ``input_schema``, and shared by every request that offers the tool
        (read-only: see :class:`~tether.providers.ToolDef`)."""
        return self._definition

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
) -> ToolSpec[Any]:
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


class _ToolDecorator(Protocol):
    """What ``@tool(...)`` with options returns: a decorator, typed like :func:`tool`."""

    @overload
    def __call__(self, fn: Callable[Concatenate[RunContext[_D], _P], Any], /) -> ToolSpec[_D]: ...

    @overload
    def __call__(self, fn: Callable[..., Any], /) -> ToolSpec[Any]: ...


@overload
def tool(
    fn: Callable[Concatenate[RunContext[_D], _P], Any],
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    timeout_s: float | None = None,
    sequential: bool = False,
) -> ToolSpec[_D]: ...


@overload
def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    timeout_s: float | None = None,
    sequential: bool = False,
) -> ToolSpec[Any]: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    timeout_s: float | None = None,
    sequential: bool = False,
) -> _ToolDecorator: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    timeout_s: float | None = None,
    sequential: bool = False,
) -> ToolSpec[Any] | _ToolDecorator:
    """Make a tool of a function: ``@tool`` or ``@tool(terminal=True, timeout_s=5)``.

    ``name`` defaults to the function's ``__name__``, ``description`` to its
    docstring (up to the first ``Args:``-style section). ``terminal`` ends the
    run with the tool's result; ``timeout_s`` overrides the runtime's default
    per-call timeout; ``sequential`` keeps the tool out of a round's parallel
    calls. A first parameter annotated ``RunContext[Deps]`` receives the call's
    context (the run's ``deps``, ``run_id``, ``call_id``, remaining budget) and is
    not part of the schema. Every parameter needs a type annotation :func:`json_schema` can
    describe; problems raise :class:`TypeError` or :class:`ValueError` here,
    not when the model first calls the tool.
    """

    def decorate(f: Callable[..., Any]) -> ToolSpec[Any]:
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
    kind = type(value)
    try:
        # The general path below, without its work, for the commonest results:
        # cattrs hands these back as they are, and json.dumps writes an int as
        # its repr (an int too long for str() raises ValueError both ways).
        if kind is int:
            return int.__repr__(value)
        if kind is bool:
            return "true" if value else "false"
        if value is None:
            return "null"
        plain = _json_converter.unstructure(value)
        if isinstance(plain, str):
            return str(plain)
        return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolResultUnserializable(
            f"tool returned a value of type {type(value).__name__} that cannot be "
            f"serialized to JSON ({exc})"
        ) from exc


def image_result(
    value: list[Any] | tuple[Any, ...] | Image,
) -> tuple[str, tuple[Image, ...]] | None:
    """A result with images as its text and its images; ``None`` when it has no image.

    A :class:`~tether.Image`, or a list (or tuple) of ``str`` and ``Image``
    parts: the text parts, joined by newlines, are the result's text, and the
    images follow it (as the providers send them). Raises
    :class:`ToolResultUnserializable` for a list mixing images with anything
    but strings.
    """
    if isinstance(value, Image):
        return "", (value,)
    if not any(isinstance(v, Image) for v in value):
        return None
    texts: list[str] = []
    images: list[Image] = []
    for i, part in enumerate(value):
        if isinstance(part, Image):
            images.append(part)
        elif isinstance(part, str):
            texts.append(part)
        else:
            raise ToolResultUnserializable(
                f"a result with images must be a list of str and tether.Image parts; "
                f"part {i} is a {type(part).__name__} (make it a str, e.g. with json.dumps)"
            )
    return "\n".join(t for t in texts if t), tuple(images)
