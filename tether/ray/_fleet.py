"""The budget over all hosts of a :class:`tether.ray.RayRuntime` (``limits=``).

One coordinator actor keeps the fleet's :class:`~tether.runtime.BudgetLedger`
(a plain synchronous class: the actor serves one call at a time, so the ledger
needs no lock). Each host's Runtime spends from a
:class:`~tether.runtime.SlicedBudget` that leases slices of it through
a :class:`RayLedgerLink` (one actor call per contact, made by the host's budget
keeper task, never by a run). See :class:`tether.runtime.SlicedBudget` and
:class:`~tether.runtime.BudgetLedger` for the slices, the end of the budget and the bound.

A host that dies is forgotten by the ledger (:meth:`Coordinator.forget`, which
the caller's monitor calls): what it was granted and did not report used counts
as spent, the conservative choice that keeps the bound. A host alive but out of
reach (stopped, partitioned) is forgotten the same way once it has been silent
for the fleet's ``lease_s`` while holding a grant (hosts holding one call at
least every third of it), and a host whose ledger has not answered for
``lease_s`` counts the budget as spent: so neither can keep a run waiting for
a grant longer than about a lease (see docs/guides/ray.md for the bound).
"""

from __future__ import annotations

from typing import Any

import attrs

from tether.ray._bridge import wait_ref
from tether.runtime import BudgetLedger, Grant, Limits, Runtime, SlicedBudget, Spent


class Coordinator:
    """The fleet's ledger, as a Ray actor (:mod:`tether.ray` makes it one)."""

    def __init__(self, limits: Limits, hosts: int, lease_s: float | None = None) -> None:
        self.ledger = BudgetLedger(
            max_total_tokens=limits.max_total_tokens,
            max_cost_usd=limits.max_cost_usd,
            hosts=hosts,
            lease_s=lease_s,
        )

    def take(self, owner: str, tokens: int, cost_usd: float, used: Spent) -> Grant:
        return self.ledger.take(owner, tokens, cost_usd, used)

    def give_back(self, owner: str, tokens: int, cost_usd: float, used: Spent) -> Grant:
        return self.ledger.give_back(owner, tokens, cost_usd, used)

    def forget(self, owner: str) -> None:
        self.ledger.forget(owner)

    def spent(self) -> bool:
        """Nothing is left anywhere: a new run would end on the ceiling at once."""
        return self.ledger.dry()

    def status(self) -> dict[str, Any]:
        return attrs.asdict(self.ledger.status())


@attrs.define
class RayLedgerLink:
    """A host's way to the coordinator (a :class:`~tether.runtime.LedgerLink`)."""

    coordinator: Any
    owner: str

    async def take(self, want_tokens: int, want_cost_usd: float, used: Spent) -> Grant:
        grant: Grant = await wait_ref(
            self.coordinator.take.remote(self.owner, want_tokens, want_cost_usd, used)
        )
        return grant

    async def give_back(self, tokens: int, cost_usd: float, used: Spent) -> Grant:
        grant: Grant = await wait_ref(
            self.coordinator.give_back.remote(self.owner, tokens, cost_usd, used)
        )
        return grant


def join_budget(
    rt: Runtime, coordinator: Any, owner: str, limits: Limits, lease_s: float | None
) -> SlicedBudget:
    """Make ``rt`` (not entered yet) spend the fleet's budget, as ``owner``, with the
    fleet's lease (the ledger's)."""
    budget = rt.share_budget(RayLedgerLink(coordinator, owner), limits)
    budget.lease_s = lease_s
    return budget


__all__ = ["Coordinator", "RayLedgerLink", "join_budget"]
