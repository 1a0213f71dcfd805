"""Pydantic types (the ``pydantic`` extra): their schemas, checks and JSON forms.

Imported the first time tether meets a type that involves Pydantic
(:func:`tether.actors._pydantic_kinds.uses_pydantic` recognises one without importing
Pydantic), so a program that never uses Pydantic never pays for it.

- **Schemas** are Pydantic's (``TypeAdapter(T).json_schema()``, the same as
  ``Model.model_json_schema()``), made to read like the ones tether builds for
  attrs classes, which every provider takes: the ``$defs`` are inlined (a
  type that refers to itself is refused, as an attrs class that does is),
  every model's object is closed (``additionalProperties: false``, unless the
  model allows extra keys), and a discriminated union's ``oneOf`` is an
  ``anyOf`` (its members exclude each other anyway) without the OpenAPI
  ``discriminator``. A model whose fields are all required, with no defaults,
  so passes OpenAI's strict mode (see ``_strict_ok`` in
  :mod:`tether.runtime._typed`).
- **Checks** are Pydantic's, in its JSON mode (the data came as JSON), by the
  model's own rules (its lax mode unless its config says ``strict``), and every
  problem comes back with its path and Pydantic's message
  (:class:`PydanticProblems`).
- **JSON forms** are Pydantic's (``dump_python(mode="json", by_alias=True)``),
  so what a tool returns and what a typed run's output dumps to read back.
"""

from __future__ import annotations

import copy
import json
import threading
import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError

from tether.actors._pydantic_kinds import PydanticProblems, pydantic_version

__all__ = ["dump", "json_schema", "validate"]

_lock = threading.Lock()
# Made once per type (a TypeAdapter builds a validator and a serializer).
_adapters: dict[Any, TypeAdapter[Any]] = {}
_schemas: dict[Any, dict[str, Any]] = {}


def _remember(cache: dict[Any, Any], tp: Any, value: Any) -> None:
    try:
        with _lock:
            cache[tp] = value
    except TypeError:  # an unhashable type (Annotated metadata): made again next time
        pass


def _cached(cache: dict[Any, Any], tp: Any) -> Any:
    try:
        return cache.get(tp)
    except TypeError:
        return None


def adapter(tp: Any) -> TypeAdapter[Any]:
    """Pydantic's ``TypeAdapter`` for ``tp``; a :class:`TypeError` when Pydantic cannot read it."""
    made: TypeAdapter[Any] | None = _cached(_adapters, tp)
    if made is not None:
        return made
    if pydantic_version(tp) == 1 or _holds_v1(tp):
        raise TypeError(
            f"{_name(tp)} is a Pydantic 1 model (pydantic.v1): tether reads Pydantic 2 "
            "models; port it to pydantic.BaseModel"
        )
    try:
        made = TypeAdapter(tp)
    except Exception as exc:
        raise TypeError(f"Pydantic cannot read {_name(tp)}: {_first_line(exc)}") from None
    _remember(_adapters, tp, made)
    return made


def _holds_v1(tp: Any) -> bool:
    return any(pydantic_version(a) == 1 or _holds_v1(a) for a in typing.get_args(tp))


def _name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else repr(tp).removeprefix("typing.")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# ---------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------


def json_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema of ``tp``'s values, as Pydantic makes it, inlined and closed.

    A fresh dict each time (callers add ``description`` and ``default``).
    """
    schema: dict[str, Any] | None = _cached(_schemas, tp)
    if schema is None:
        made = adapter(tp)
        try:
            raw = made.json_schema(mode="validation")
        except Exception as exc:  # PydanticInvalidForJsonSchema: a field with no JSON form
            why = _first_line(exc)
            raise TypeError(f"Pydantic has no JSON schema for {_name(tp)}: {why}") from None
        defs = raw.pop("$defs", {})
        schema = _inline(raw, defs, ())
        _remember(_schemas, tp, schema)
    return copy.deepcopy(schema)


_REF = "#/$defs/"


def _inline(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF):
        name = ref.removeprefix(_REF)
        if name in seen:
            # As for attrs classes: a recursive schema needs $ref/$defs, which
            # providers handle unevenly.
            raise TypeError(f"{name} refers to itself, which is not supported")
        target = _inline(defs[name], defs, (*seen, name))
        rest = {k: _inline(v, defs, seen) for k, v in node.items() if k != "$ref"}
        return {**target, **rest}  # a field's own description wins over the model's
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "discriminator":
            continue  # OpenAPI's, not JSON Schema's; its mapping points into $defs
        out["anyOf" if key == "oneOf" else key] = _inline(value, defs, seen)
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


# ---------------------------------------------------------------------------
# Checks and JSON forms
# ---------------------------------------------------------------------------


def validate(tp: Any, data: Any) -> Any:
    """``data`` (JSON values) checked and made a ``tp`` by Pydantic.

    Raises :class:`PydanticProblems` listing every problem.
    """
    checker = adapter(tp)
    try:
        try:
            # In JSON mode, as the data came: a strict model takes "red" for an Enum
            # and "2026-01-02" for a date from JSON, not from Python.
            text = json.dumps(data, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            return checker.validate_python(data)  # not JSON data: Python's rules
        return checker.validate_json(text)
    except ValidationError as exc:
        problems = [
            (_path(error["loc"]), _message(error))
            for error in exc.errors(include_url=False, include_context=False)
        ]
        raise PydanticProblems(problems) from None


def _path(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def _message(error: Any) -> str:
    message = str(error["msg"])
    if error["type"] == "missing":
        return message
    shown = repr(error.get("input"))
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{message} (got {shown})"


def dump(value: Any, tp: Any) -> Any:
    """``value``, a ``tp``, as plain JSON data: Pydantic's JSON form, by alias."""
    return adapter(tp).dump_python(value, mode="json", by_alias=True)
