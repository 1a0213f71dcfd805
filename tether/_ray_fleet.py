"""The budget over all hosts of a :class:`tether.ray.RayRuntime` (``limits=``).

One coordinator actor keeps the ledger; each host leases slices of the budget
from it (see :mod:`tether.runtime._fleetbudget`).
"""

from __future__ import annotations

from typing import Any

from tether.runtime import Limits, Runtime


class Coordinator:
    """The fleet's one coordinator (a Ray actor; :mod:`tether.ray` makes it one)."""

    def __init__(self, limits: Limits | None) -> None:
        self.limits = limits

    def spent(self) -> bool:
        return False

    def status(self) -> dict[str, Any]:
        return {}


def join_budget(rt: Runtime, coordinator: Any, index: int, limits: Limits | None) -> None:
    """Make ``rt`` (not entered yet) spend the fleet's budget through ``coordinator``."""


__all__ = ["Coordinator", "join_budget"]
