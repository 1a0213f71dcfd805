"""Pydantic types (the ``pydantic`` extra), recognised without importing Pydantic.

A type that involves Pydantic (a model, a Pydantic dataclass, Pydantic's or
annotated-types' ``Annotated`` metadata) is described, checked and dumped by
Pydantic itself (:mod:`._pydantic`, imported the first time one is met): the
schema builder (:mod:`._schema`) and the converters (:mod:`._validate`) hand
such a type over whole. Recognising one reads class names and modules only,
so a program that never uses Pydantic never imports it (``import tether``
does not).
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any, Literal

import attrs

__all__ = ["PydanticProblems", "pydantic_object", "pydantic_version", "uses_pydantic"]

_METADATA_PACKAGES = ("pydantic", "annotated_types")


def pydantic_version(tp: Any) -> int:
    """2 for a Pydantic 2 model or dataclass, 1 for a Pydantic 1 model, else 0."""
    if not isinstance(tp, type) or "pydantic" not in sys.modules:
        return 0  # no class can derive from Pydantic's before Pydantic is imported
    for base in tp.__mro__:
        if base.__name__ == "BaseModel":
            if base.__module__ == "pydantic.main":
                return 2 if hasattr(base, "model_json_schema") else 1
            if base.__module__ == "pydantic.v1.main":
                return 1
    if dataclasses.is_dataclass(tp) and "__pydantic_validator__" in vars(tp):
        return 2  # @pydantic.dataclasses.dataclass
    return 0


def uses_pydantic(tp: Any) -> bool:
    """Whether Pydantic, not cattrs, reads ``tp`` as a whole.

    True for a Pydantic model and for a type built of ``list``, unions,
    ``Annotated`` and the like that holds one or that carries Pydantic's (or
    annotated-types') constraints. An attrs class anywhere in it keeps it
    with cattrs (Pydantic cannot read attrs classes): cattrs then hands the
    Pydantic parts it meets to Pydantic, one by one.
    """
    if "pydantic" not in sys.modules and "annotated_types" not in sys.modules:
        return False
    found = False
    stack = [tp]
    while stack:
        node = stack.pop()
        if isinstance(node, type) and attrs.has(node):
            return False
        if pydantic_version(node):
            found = True
            continue
        origin = typing.get_origin(node)
        if origin is typing.Annotated:
            base, *metadata = typing.get_args(node)
            found = found or any(
                type(m).__module__.partition(".")[0] in _METADATA_PACKAGES for m in metadata
            )
            stack.append(base)
        elif origin is not None and origin is not Literal:
            stack.extend(typing.get_args(node))
    return found


def pydantic_object(tp: Any) -> bool:
    """A Pydantic model or dataclass whose JSON form is an object (not a ``RootModel``)."""
    return pydantic_version(tp) == 2 and not getattr(tp, "__pydantic_root_model__", False)


class PydanticProblems(ValueError):
    """Pydantic's ``ValidationError``, as ``(path below the value, message)`` pairs.

    Raised by :mod:`._pydantic`'s checks; the converter's messages
    (``_problems`` in :mod:`._validate`) list each problem at its path.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(problems)
        self.problems = problems

    def __str__(self) -> str:
        return "; ".join(f"{path or '(the value)'}: {message}" for path, message in self.problems)
