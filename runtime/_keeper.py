"""A Runtime's durable side: its owner id, agents by name, leases, resume (docs/guides/durable.md).

``Runtime(store=..., agents=[...], lease_s=30, resume=False)`` makes one
:class:`Keeper`. It gives each run it starts a :class:`~._durable.Durable`,
and while the Runtime runs, one task of its own (in the Runtime's task group):

* every ``lease_s / 3`` it renews the leases of the runs this Runtime owns
  (one :meth:`~.RunStore.renew` for all of them, each at its epoch, tried
  again through a passing store fault for as long as that can keep a lease:
  until the earliest of their deadlines), moves
  each run's own lease deadline on (see :mod:`._durable`, fencing), hands
  cancel and stop requests made through the store to those runs, and cancels
  a run whose lease was lost (another Runtime has it now);
* at the same pace, it stops the runs whose lease may have lapsed by this
  process's clock (see :mod:`._durable`), even in the middle of a long call,
  without asking the store;
* with ``resume=True``, at the same pace, it claims the claimable runs whose
  agent it knows and continues them here (:meth:`Keeper.resume` does one).

Agents are known by name: those given as ``agents=`` and those of the runs
this Runtime started. A run of an agent it does not know is left claimable.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from tether.providers import dump_messages

from ._agent import Agent
from ._durable import Durable
from ._history import user_message
from ._run import Run
from ._runstore import (
    Claim,
    LeaseLost,
    NewRun,
    RunNotFound,
    RunStore,
    RunStoreError,
    RunStoreUnavailable,
)
from ._storeretry import Faults, retried

if TYPE_CHECKING:
    from ._startcheck import StartChecked


class Keeper:
    """The durable side of one Runtime (see the module docstring)."""

    def __init__(
        self,
        store: RunStore,
        agents: Sequence[Agent[Any, Any]],
        lease_s: float,
        resume: bool,
    ) -> None:
        self.store, self.lease_s, self.resume_all = store, lease_s, resume
        self.agents: dict[str, Agent[Any, Any]] = {}
        for agent in agents:
            if not isinstance(agent, Agent):
                raise TypeError(f"Runtime(agents=...) wants tether.Agents, got {agent!r}")
            if self.agents.setdefault(agent.name, agent) is not agent:
                raise ValueError(
                    f"Runtime(agents=...) has two agents named {agent.name!r}: a resumed run "
                    "finds its agent by name, so names must be unique"
                )
        #: This Runtime's name in the store's leases: host, process, and a random part.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        #: The durable runs this Runtime owns, in flight.
        self.owned: dict[str, tuple[Run, Durable]] = {}
        # When each claim (or submitted record) not yet made a Durable was sent (this
        # process's clock).
        self._claimed_at: dict[str, float] = {}
        self._scope: anyio.CancelScope | None = None
        #: When the store last failed this Runtime (its runs' writes, its renewals).
        self.faults = Faults()

    def durable(self, run_id: str, agent: Agent[Any, Any], *, recorded: bool = False) -> Durable:
        """A new run's link to the store (its agent is known here from now on);
        ``recorded``: :meth:`record` has created its record already."""
        self.agents.setdefault(agent.name, agent)
        durable = Durable(self.store, self.owner, self.lease_s, run_id, faults=self.faults)
        if recorded:
            durable.recorded(self._claimed_at.pop(run_id))
        return durable

    async def record(
        self,
        run_id: str,
        agent: Agent[Any, Any],
        checked: StartChecked,
        parent_run_id: str | None,
    ) -> None:
        """Create a run's record before the run begins (``Runtime.submit``), owned here."""
        self.agents.setdefault(agent.name, agent)
        first = checked.first or user_message(checked.text)
        record = NewRun(
            run_id=run_id,
            agent=agent.name,
            input=checked.text,
            messages=dump_messages([*checked.history, first]),
            parent_run_id=parent_run_id,
            created_at=time.time(),
        )
        sent = anyio.current_time()
        await self.store.create(record, owner=self.owner, lease_s=self.lease_s)
        self._claimed_at[run_id] = sent  # the lease runs from here (Durable.recorded)

    def adopt(self, run: Run, durable: Durable) -> None:
        self.owned[run.id] = (run, durable)

    def forget(self, run_id: str) -> None:
        self.owned.pop(run_id, None)

    # ----------------------------------------------------------------- resuming

    async def claim(self, run_id: str) -> tuple[Agent[Any, Any], Claim, list[Any]]:
        """Claim ``run_id`` for this Runtime; a clear error when it cannot be."""
        if not isinstance(run_id, str) or not run_id:
            raise TypeError(f"resume() wants a run id (a non-empty str), got {run_id!r}")
        stored = await self.store.get(run_id)
        if stored is None:
            raise RunNotFound(f"the run store has no run {run_id!r}")
        if stored.status == "finished":
            raise ValueError(
                f"run {run_id!r} has finished; read its result with rt.handle({run_id!r}).result()"
            )
        agent = self.agents.get(stored.agent)
        if agent is None:
            known = ", ".join(sorted(map(repr, self.agents))) or "none"
            raise ValueError(
                f"run {run_id!r} is a run of agent {stored.agent!r}, which this Runtime does "
                f"not know (it knows {known}); pass it in Runtime(agents=[...]). The run was "
                "left as it was, claimable by a Runtime that knows it"
            )
        sent = anyio.current_time()
        claim = await self.store.claim(run_id, owner=self.owner, lease_s=self.lease_s)
        if claim is None:
            why = (
                f"it is parked, waiting for approval of {', '.join(stored.pending)}"
                if stored.status == "parked"
                else f"{stored.owner!r} holds its lease"
            )
            raise ValueError(f"run {run_id!r} cannot be resumed now: {why}")
        self._claimed_at[run_id] = sent
        try:
            events = [] if claim.run.checkpoint is None else await self.store.events(run_id)
        except BaseException:
            self._claimed_at.pop(run_id, None)
            raise
        return agent, claim, events

    def resumed(self, claim: Claim, events: Sequence[Any]) -> Durable:
        """A claimed run's link to the store, with the point the run goes on from."""
        run_id = claim.run.run_id
        sent = self._claimed_at.pop(run_id, None)
        return Durable(
            self.store,
            self.owner,
            self.lease_s,
            run_id,
            claim,
            events,
            sent,
            faults=self.faults,
        )

    # --------------------------------------------------------------- the task

    async def keep(self, resume: Callable[[str], Any]) -> None:
        """Renew and deliver requests, stop runs whose lease lapsed; with ``resume=True``
        adopt too; until stopped.

        Loops of their own, so that adopting many runs never delays the renewal of
        the leases held already, and a renewal that hangs never delays stopping the
        runs whose lease it failed to renew.
        """
        with anyio.CancelScope() as scope:
            self._scope = scope
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._every, self._renew)
                tg.start_soon(self._every, self._fence)
                if self.resume_all:
                    tg.start_soon(self._every, lambda: self._adopt(resume), True)

    async def _every(self, job: Callable[[], Any], now: bool = False) -> None:
        interval = self.lease_s / 3
        due = anyio.current_time() + (0.0 if now else interval)
        while True:
            # At a fixed rate: a slow job (a renewal that waited for the store) does not
            # push the next one out by its own length; a late one goes at once.
            await anyio.sleep_until(due)
            due = max(due + interval, anyio.current_time())
            try:
                await job()
            except RunStoreError as exc:
                warnings.warn(
                    f"the run store failed; trying again in {interval:g} s ({exc})",
                    RuntimeWarning,
                    stacklevel=1,
                )

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def _renew(self) -> None:
        owned = [(i, pair) for i, pair in self.owned.items() if pair[1].created]
        if not owned:
            return
        ids = [i for i, _ in owned]
        epochs = [durable.epoch for _, (_, durable) in owned]
        sent = anyio.current_time()
        # A passing fault is tried again for as long as a renewal can keep a lease: up to
        # the earliest of the runs' deadlines (and for a third of the lease at least). Not
        # only until the next renewal is due: a fault a little longer than lease_s / 3
        # would then leave the next try for the very moment the leases lapse.
        until = max(sent + self.lease_s / 3, min(durable.deadline for _, (_, durable) in owned))
        try:
            controls = await retried(
                lambda: self.store.renew(self.owner, ids, lease_s=self.lease_s, epochs=epochs),
                within_s=self.lease_s / 3,
                until=until,
            )
        except RunStoreUnavailable:
            self.faults.seen()
            raise
        # Leases that lapsed while the store failed were not lost to another Runtime.
        faulted = self.faults.recent(2 * self.lease_s)
        for (_, (run, durable)), control in zip(owned, controls, strict=True):
            if control.lost and faulted and await durable.still_ours():
                durable.fail(run, "its lease lapsed while the run store failed")
                continue
            if control.lost:
                durable.lose(run, LeaseLost("its lease expired before it was renewed"))
                continue
            durable.renewed(sent)
            if control.cancel is not None:
                run.cancel(control.cancel)
            elif control.stop:
                run.stop()

    async def _fence(self) -> None:
        """Stop the runs whose lease may have lapsed by this process's clock, also in
        the middle of a long call (a tool, a sub-agent's run): clock reads only."""
        for _, durable in list(self.owned.values()):
            if durable.created:
                durable.may_act()  # past its deadline, the run stops (Durable.lose)
        await anyio.lowlevel.checkpoint()

    async def _adopt(self, resume: Callable[[str], Any]) -> None:
        for run_id in await self.store.claimable():
            if run_id in self.owned:
                continue
            try:
                await resume(run_id)
            except (ValueError, KeyError):
                continue  # an unknown agent, or another Runtime was faster: left as it is


__all__ = ["Keeper"]
