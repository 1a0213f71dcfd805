"""What the hosts of a :class:`tether.ray.RayRuntime` share: one coordinator actor.

* **429 pauses.** A host whose provider gate pauses after a 429 with
  retry-after tells the coordinator (:meth:`FleetLink.paused`, a one-way
  call), which tells every other host to pause that endpoint for as long
  (:meth:`~tether._ray_host.Host.pause`). The pause travels as a duration, so
  the hosts' clocks need not agree; it reaches the others a Ray call later
  (about a millisecond on one machine).
* **The budget** over all hosts (``RayRuntime(limits=...)``): see
  :mod:`tether.runtime._fleetbudget` for the slices the hosts lease from the
  ledger the coordinator keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.runtime import Limits, Runtime


class Coordinator:
    """The fleet's one coordinator (a Ray actor; :mod:`tether.ray` makes it one)."""

    def __init__(self, limits: Limits | None) -> None:
        self.limits = limits
        self.hosts: list[Any] = []

    def join(self, hosts: Sequence[Any]) -> None:
        self.hosts = list(hosts)

    def pause(self, origin: int, key: str, seconds: float) -> None:
        for i, host in enumerate(self.hosts):
            if i != origin:
                host.pause.remote(key, seconds)

    def spent(self) -> bool:
        return False

    def status(self) -> dict[str, Any]:
        return {}


class FleetLink:
    """A host's side of the coordinator."""

    def __init__(self, coordinator: Any, index: int) -> None:
        self.coordinator, self.index = coordinator, index

    def before(self, rt: Runtime, limits: Limits | None) -> None:
        """Set up ``rt`` (not entered yet) as a host of the fleet."""

    def after(self, rt: Runtime) -> None:
        """``rt`` is running: pass its gates' pauses to the fleet."""
        assert rt._services is not None
        rt._services.on_gate_pause = self.paused

    def paused(self, key: str, seconds: float) -> None:
        self.coordinator.pause.remote(self.index, key, seconds)


__all__ = ["Coordinator", "FleetLink"]
