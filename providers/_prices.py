"""The price table: USD per million tokens per model (``prices.json``).

:func:`price_for` looks a model id up: first exactly, then by the longest
known id that the model id extends with a version suffix only: a date
(``-20250929``, ``-2024-08-06``, ``@20250929``), ``-latest``, or a
``-v1:0``-style revision. So ``claude-sonnet-4-5-20250929`` costs what
``claude-sonnet-4-5`` costs, but ``claude-opus-4-9`` is not priced as
``claude-opus-4`` (a new model may have a new price): it is unknown, and an
unknown model's price is ``None``, never zero.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

from ._types import Price

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
def price_table() -> Mapping[str, Price]:
    """Every known model id and its price (loaded once from the package data)."""
    raw = (
        resources.files(__package__ or "tether.providers")
        .joinpath("prices.json")
        .read_text(encoding="utf-8")
    )
    models = json.loads(raw)["models"]
    return MappingProxyType({str(k).lower(): _price(str(k), v) for k, v in models.items()})


def price_for(model: str) -> Price | None:
    """The price of ``model``, or ``None`` when the table does not know it."""
    table = price_table()
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


__all__ = ["price_for", "price_table"]
