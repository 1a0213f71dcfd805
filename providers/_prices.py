"""The price table: USD per million tokens per model (``prices.json``).

:func:`price_for` looks a model id up: first exactly, then by the longest
known id that the model id extends with a version suffix only: a date
(``-20250929``, ``-2024-08-06``, ``@20250929``), ``-latest``, or a
``-v1:0``-style revision. So ``claude-sonnet-4-5-20250929`` costs what
``claude-sonnet-4-5`` costs, but ``claude-opus-4-9`` is not priced as
``claude-opus-4`` (a new model may have a new price): it is unknown, and an
unknown model's price is ``None``, never zero.

:func:`context_window_for` looks up a model's context window the same way
(``context_window`` in the table); unknown: ``None``, and nothing is bounded.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from ._types import Price

_V = TypeVar("_V")

_VERSION_SUFFIX = re.compile(
    r"(?:[-@](?:\d{8}|\d{4}-\d{2}-\d{2}|latest))?(?:-v\d+(?::\d+)?)?", re.ASCII
)


def _price(model: str, entry: Any) -> Price:
    if not isinstance(entry, dict):
        raise ValueError(f"prices.json: entry for {model!r} is not an object")

    def field(name: str, required: bool) -> float | None:
        value = entry.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ValueError(f"prices.json: {model!r}.{name} must be a non-negative number")
        return float(value)

    return Price(
        input=field("input", True) or 0.0,
        output=field("output", True) or 0.0,
        cache_read=field("cache_read", False),
        cache_write=field("cache_write", False),
    )


@functools.cache
def _models() -> Mapping[str, Any]:
    from importlib import resources  # here: once, when a price is first looked up

    raw = (
        resources.files(__package__ or "tether.providers")
        .joinpath("prices.json")
        .read_text(encoding="utf-8")
    )
    models: Mapping[str, Any] = json.loads(raw)["models"]
    return models


@functools.cache
def price_table() -> Mapping[str, Price]:
    """Every known model id and its price (loaded once from the package data)."""
    return MappingProxyType({str(k).lower(): _price(str(k), v) for k, v in _models().items()})


@functools.cache
def window_table() -> Mapping[str, int]:
    """Every model id of the table that states its context window, and that window."""
    windows: dict[str, int] = {}
    for model, entry in _models().items():
        window = entry.get("context_window") if isinstance(entry, dict) else None
        if window is None:
            continue
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"prices.json: {model!r}.context_window must be a positive int")
        windows[str(model).lower()] = window
    return MappingProxyType(windows)


def context_window_for(model: str) -> int | None:
    """The context window of ``model`` in tokens, or ``None`` when the table has none."""
    return _lookup(window_table(), model)


def price_for(model: str) -> Price | None:
    """The price of ``model``, or ``None`` when the table does not know it."""
    return _lookup(price_table(), model)


def _lookup(table: Mapping[str, _V], model: str) -> _V | None:
    key = model.strip().lower()
    exact = table.get(key)
    if exact is not None:
        return exact
    best: str | None = None
    for known in table:
        if (
            key.startswith(known)
            and (best is None or len(known) > len(best))
            and _VERSION_SUFFIX.fullmatch(key[len(known) :])
        ):
            best = known
    return None if best is None else table[best]


__all__ = ["context_window_for", "price_for", "price_table", "window_table"]
