"""A durable run's link to its store: record, checkpoints, tool records (docs/guides/durable.md).

A run of a ``Runtime(store=...)`` has a :class:`Durable`; a run without a
store has none and pays nothing (the Run checks ``is None`` once per round).
What it writes, and when (see :mod:`._runstore` for the store's side):

* after preparation: the run record (:meth:`~.RunStore.create`), then the
  first checkpoint, round 0, with every event so far;
* at every round boundary that goes on: the events of the round and the
  checkpoint (:func:`~._state.dump_state`), one :meth:`~.RunStore.commit`,
  which also renews the lease and brings back cancel and stop requests;
* each tool call's result as soon as it finishes (:meth:`~.RunStore.record_tool`);
* the last events and the result when the run ends (:meth:`~.RunStore.finish`).

Every write is shielded from cancellation (a cancelled run waits for the write
in progress, bounded by the store's own timeouts), so what the Run believes
is stored is what the store holds. A write refused with :class:`LeaseLost`
means another Runtime owns the run now: the run stops here, writes nothing
more, and leaves the Runtime; its handles here follow it in the store.

**Fencing** (docs/guides/durable.md). Every write carries the run's lease epoch (``1``
for a run this Runtime created, the claim's for a resumed one), so no write
of an earlier ownership lands. And the owner keeps its own view of its lease:
a deadline on its own monotonic clock (``anyio.current_time()``), ``lease_s``
(less :data:`LEASE_MARGIN`) after the moment the last successful create,
claim, commit or renewal was *sent*: the store's lease cannot end before it.
Before each side effect (each attempt of a model call or a tool call) the run
asks :meth:`Durable.may_act`: a clock read and a compare, no store round trip.
Past the deadline, or once a write was refused, the answer is no, and the run
stops as :meth:`Durable.lose` stops it: the Runtime that claims the run goes
on with it, and this one starts nothing more on it. The Runtime's keeper also
asks every ``lease_s / 3`` (:meth:`~._keeper.Keeper.keep`), so a call already
in flight at the deadline (a long tool, a sub-agent's run) is cancelled soon
after it; what it did meanwhile, the tool's ``ctx.idempotency_key`` lets a
service deduplicate.

A run held by ``Verdict.ask`` parks (:meth:`Durable.park`): its checkpoint is
the state from before that tool round, with the model's message and how the
round had decided its calls kept apart, and the run leaves its Runtime (no
task, no memory). Answered, it is resumed and finishes that tool round with
the answers given.

A Durable made from a claim hands its run a :class:`~._resume.ResumePoint`
(:attr:`Durable.point`): the run restores itself from it and goes on through its
own round code. Its first tool round answers the calls whose results were
recorded from the records (:meth:`Durable.recall`), matched by call id in any
round of the run: a recorded call is never executed again.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.lowlevel
import attrs

import tether.runtime._events as ev
from tether.actors import ToolDone, ToolInvocation, ToolOutput
from tether.providers import (
    ModelResponse,
    StopReason,
    ToolUseBlock,
    dump_message,
    dump_messages,
    load_message,
)

from ._repeats import RecentCalls, canonical
from ._resume import Admission, HeldRound, ResumePoint
from ._runstore import Claim, LeaseLost, NewRun, RunStore, RunStoreError, ToolRecord
from ._state import Decision, dump_state, load_state
from ._storedhandle import StoredRun

if TYPE_CHECKING:
    from ._agent import Agent
    from ._result import RunResult
    from ._state import RunState
    from ._trail import Trail


class Run(Protocol):
    """What this module needs of a :class:`~._run.Run` (which imports this module)."""

    id: str
    agent: Agent[Any, Any]
    input: str
    state: RunState
    trail: Trail
    result: RunResult[Any] | None
    #: The reason the run was asked to cancel, once it was.
    cancel_reason: str | None

    def cancel(self, reason: str) -> None: ...
    def stop(self) -> None: ...
    def let_go(self) -> None: ...


#: How long a run's last write may take when the run is being torn down.
FINISH_TIMEOUT_S = 30.0

#: The share of ``lease_s`` an owner keeps in hand: its deadline is that much before
#: the store's earliest possible expiry, against clocks that run at slightly different
#: rates (the store's wall clock or server clock, the owner's monotonic clock).
LEASE_MARGIN = 0.02


class Durable:
    """One run's writes to the store (see the module docstring)."""

    __slots__ = (
        "_created",
        "_deadline",
        "_flushed",
        "_lost",
        "_recall_round",
        "_run",
        "epoch",
        "lease_s",
        "owner",
        "parked",
        "point",
        "run_id",
        "store",
    )

    def __init__(
        self,
        store: RunStore,
        owner: str,
        lease_s: float,
        run_id: str,
        claim: Claim | None = None,
        events: Sequence[Any] = (),
        claimed_at: float | None = None,
    ) -> None:
        self.store, self.owner, self.lease_s, self.run_id = store, owner, lease_s, run_id
        #: The lease epoch this owner writes with (the fencing token; a new run's is 1).
        self.epoch = 1 if claim is None else claim.epoch
        # The lease by this owner's clock: none before the run is in the store (nobody
        # else can have it), else from when the claim was sent.
        self._deadline = math.inf
        if claim is not None:
            self._deadline = self._until(anyio.current_time() if claimed_at is None else claimed_at)
        self._created = claim is not None
        self._lost = False
        self._flushed = 0 if claim is None else claim.run.events
        self._run: Run | None = None
        #: The run has left this process: parked in the store, or lost to another owner.
        self.parked = False
        #: Where a claimed run goes on (``None``: a new run).
        self.point = None if claim is None else resume_point(claim, events)
        # The round whose calls may have recorded results: the first one the run runs.
        self._recall_round = None if self.point is None else self.point.round

    def recorded(self, sent: float) -> None:
        """The run's record was created before it began (``Runtime.submit``), by a
        write sent at ``sent``: the lease runs from then."""
        self._created = True
        self._deadline = self._until(sent)

    @property
    def created(self) -> bool:
        """Whether the store has the run's record (its lease is then renewed)."""
        return self._created and not self._lost

    # ------------------------------------------------------------------- fencing

    def _until(self, sent: float) -> float:
        """The deadline a lease taken or renewed by a write sent at ``sent`` gives."""
        return sent + self.lease_s * (1 - LEASE_MARGIN)

    def renewed(self, sent: float) -> None:
        """A write that renews the lease, sent at ``sent`` (this owner's clock), succeeded."""
        deadline = self._until(sent)
        if deadline > self._deadline:
            self._deadline = deadline

    def may_act(self) -> bool:
        """Whether the run may start a side effect now (see the module docstring).

        No when a write was refused, or the lease may have lapsed by this owner's
        clock; the run then stops here as :meth:`lose` stops it.
        """
        if self._lost:
            return False
        if anyio.current_time() < self._deadline:
            return True
        if self._run is not None:
            why = f"its lease of {self.lease_s:g} s may have lapsed: it was not renewed in time"
            self.lose(self._run, LeaseLost(why))
        return False

    # --------------------------------------------------------------- the run's path

    async def begin(self, run: Run) -> None:
        """After preparation: the record (a new run) and the first checkpoint.

        A run resumed from a checkpoint has both; a run claimed before its first
        checkpoint started over, and writes its first checkpoint now.
        """
        self._run = run
        if self.point is not None and self.point.state is not None:
            return
        if not self._created:
            state = run.state
            record = NewRun(
                run_id=run.id,
                agent=run.agent.name,
                input=run.input,
                messages=dump_messages(state.messages),
                parent_run_id=state.parent_run_id,
                created_at=time.time(),
            )
            with anyio.CancelScope(shield=True):
                sent = anyio.current_time()
                await self.store.create(record, owner=self.owner, lease_s=self.lease_s)
            self._created = True
            self._deadline = self._until(sent)
        await self.boundary(run, None)

    async def boundary(self, run: Run, decision: Decision | None) -> None:
        """A round boundary the run goes on from: commit the round; obey requests."""
        if self._lost or (decision is not None and decision.termination is not None):
            return  # the end is written by finish()
        trail = run.trail
        count = len(trail)
        events = trail.dumped(self._flushed)
        checkpoint = dump_state(run.state)
        try:
            with anyio.CancelScope(shield=True):
                sent = anyio.current_time()
                control = await self.store.commit(
                    run.id,
                    owner=self.owner,
                    events=events,
                    checkpoint=checkpoint,
                    lease_s=self.lease_s,
                    epoch=self.epoch,
                )
        except LeaseLost as lost:
            self.lose(run, lost)
            return
        self.renewed(sent)
        self._flushed = count
        if control.cancel is not None:
            run.cancel(control.cancel)
        elif control.stop:
            run.stop()

    async def park(
        self,
        asks: Sequence[ToolUseBlock],
        previous: RecentCalls,
        reserved: int,
        admission: Admission,
    ) -> None:
        """Park the run in the store until its held calls are answered; it ends here.

        The checkpoint is the state from before this tool round (the round's
        marks undone), with the model's message and ``admission`` kept apart:
        answered, the run finishes this tool round from its approvals on.
        """
        run = self._run
        assert run is not None
        state = run.state
        usage = attrs.evolve(state.usage, tool_calls=state.usage.tool_calls - reserved)
        before = attrs.evolve(
            state, messages=state.messages[:-1], previous_calls=previous, usage=usage
        )
        checkpoint = dump_state(before)  # the run's own state is left as it is
        checkpoint["parked"] = dump_message(state.messages[-1])
        checkpoint["admission"] = admission.dump()
        trail = run.trail
        count = len(trail)
        events = trail.dumped(self._flushed)
        try:
            with anyio.CancelScope(shield=True):
                await self.store.park(
                    run.id,
                    owner=self.owner,
                    events=events,
                    checkpoint=checkpoint,
                    pending=[call.id for call in asks],
                    epoch=self.epoch,
                )
        except LeaseLost as lost:
            self.lose(run, lost)
            return
        self._flushed = count
        reason = run.cancel_reason
        if reason is None:
            self.parked = True
            run.cancel("parked")  # the run's task ends now; finish() hands it to the store
        else:  # cancelled while it was parking: take it back, and end it here
            with anyio.CancelScope(shield=True):
                await self.store.request(run.id, cancel=reason)
                sent = anyio.current_time()
                claim = await self.store.claim(run.id, owner=self.owner, lease_s=self.lease_s)
            if claim is None:
                self.lose(run, LeaseLost("claimed by another Runtime while it was parked"))
            else:  # owned again, at the claim's epoch
                self.epoch, self._deadline = claim.epoch, self._until(sent)
        await anyio.lowlevel.checkpoint()

    def lose(self, run: Run, why: Exception) -> None:
        """Another owner has the run: stop here, write nothing more; its handles here
        follow it in the store (as for a parked run)."""
        self._lost = self.parked = True
        run.cancel(f"the run store gave this run to another owner ({why})")

    async def finish(self, run: Run) -> None:
        """Write the last events and the result (shielded, bounded); or let a parked run go."""
        if self.parked:  # parked, or lost to another owner: it goes on elsewhere
            if run.result is None:
                run.let_go()
            return
        if not self._created or self._lost or run.result is None:
            return
        trail = run.trail
        events = trail.dumped(self._flushed)
        result = dump_result(run.result)
        with anyio.CancelScope(shield=True), anyio.move_on_after(FINISH_TIMEOUT_S):
            try:
                await self.store.finish(
                    run.id, owner=self.owner, events=events, result=result, epoch=self.epoch
                )
            except LeaseLost:
                pass  # another owner goes on with it
            except RunStoreError as exc:
                warnings.warn(
                    f"run {run.id}: its end could not be stored ({exc}); another Runtime "
                    "may resume it once its lease expires",
                    RuntimeWarning,
                    stacklevel=1,
                )

    # ---------------------------------------------------------------- tool records

    async def record_tool(self, round: int, call_arguments: Any, item: ToolDone) -> None:
        """Keep a finished tool call's result now (``ToolRound`` calls this)."""
        if self._lost:
            return
        output = None if item.output is None else attrs.asdict(item.output)
        record = ToolRecord(
            round=round,
            call_id=item.call_id,
            name=item.name,
            arguments=canonical(call_arguments),
            result={
                "outcome": item.outcome,
                "content": item.content,
                "attempts": item.attempts,
                "output": output,
            },
        )
        try:
            with anyio.CancelScope(shield=True):
                await self.store.record_tool(
                    self.run_id, owner=self.owner, record=record, epoch=self.epoch
                )
        except LeaseLost as lost:
            if self._run is not None:
                self.lose(self._run, lost)

    async def recall(
        self, round: int, invocations: Sequence[ToolInvocation]
    ) -> tuple[list[ToolInvocation], list[tuple[ToolUseBlock, ToolDone]]]:
        """Split the first tool round of a resumed run into the calls to run and those
        answered from their records (any other round's calls all run).

        A call's record is the one of its call id, from any round of the run, if it
        is of the same tool and arguments (a provider that numbers its calls anew
        each response does not get another call's result); else, within this round,
        the first unused record of the same tool and arguments (a redone model call
        may give its calls new ids). Each record answers one call.
        """
        if round != self._recall_round:
            return list(invocations), []
        self._recall_round = None
        by_id: dict[str, ToolRecord] = {}
        by_call: dict[tuple[str, str], list[ToolRecord]] = {}
        for r in await self.store.tool_records(self.run_id):  # in recording order
            if r.round == round or by_id.get(r.call_id, r).round != round:
                by_id[r.call_id] = r  # this round's record of the id, else its last
            if r.round == round:
                by_call.setdefault((r.name, r.arguments), []).append(r)
        # By call id first, for every call: a record is its own call's before it may be
        # another's by name and arguments.
        keys = [(i.call.name, canonical(i.call.input)) for i in invocations]
        mine: dict[str, ToolRecord] = {}
        for invocation, key in zip(invocations, keys, strict=True):
            found = by_id.get(invocation.call.id)
            if found is not None and (found.name, found.arguments) == key:
                mine[invocation.call.id] = found
        used = {(r.round, r.call_id) for r in mine.values()}
        to_run: list[ToolInvocation] = []
        reused: list[tuple[ToolUseBlock, ToolDone]] = []
        for invocation, key in zip(invocations, keys, strict=True):
            call = invocation.call
            found = mine.get(call.id)
            if found is None:
                twins = by_call.get(key, ())
                found = next((r for r in twins if (r.round, r.call_id) not in used), None)
                if found is None:
                    to_run.append(invocation)
                    continue
                used.add((found.round, found.call_id))
            reused.append((call, _done(call, found)))
        return to_run, reused


def _done(call: ToolUseBlock, record: ToolRecord) -> ToolDone:
    """A recorded result as the answer to ``call``."""
    data = record.result
    output = None if data["output"] is None else ToolOutput(**data["output"])
    return ToolDone(
        call_id=call.id,
        name=call.name,
        outcome=data["outcome"],
        content=data["content"],
        attempts=int(data["attempts"]),
        output=output,
    )


def resume_point(claim: Claim, events: Sequence[Any]) -> ResumePoint:
    """Where the claimed run goes on: its checkpoint, its stored events, its held round."""
    stored = claim.run
    checkpoint = stored.checkpoint
    if checkpoint is None:  # claimed before its first checkpoint: it starts over
        return ResumePoint(previous_owner=claim.previous_owner, state=None)
    parked = checkpoint.get("parked")
    held = None
    if parked is not None and stored.cancel is None:
        admission = checkpoint.get("admission")
        held = HeldRound(
            response=ModelResponse(
                content=load_message(parked).content, stop_reason=StopReason.TOOL_USE
            ),
            answers={a.call_id: (a.approved, a.note) for a in stored.answers},
            admission=None if admission is None else Admission.load(admission),
        )
    state = load_state(checkpoint)
    return ResumePoint(
        previous_owner=claim.previous_owner,
        state=state,
        events=[ev.load(e) for e in events],
        # A parked checkpoint is of the held round itself; any other, of the round before.
        round=state.round if parked is not None else state.round + 1,
        cancel=stored.cancel,
        held=held,
    )


async def wait_result(store: RunStore, run_id: str, agent: Agent[Any, Any]) -> RunResult[Any]:
    """The result of a run that left this process (parked), once it has finished."""
    return await StoredRun(store, run_id, {agent.name: agent}, lambda job: None).wait_result()


def dump_result(result: RunResult[Any]) -> dict[str, Any]:
    """A result as the store keeps it: :meth:`RunResult.dump` without the events."""
    data = result.dump()
    del data["events"]
    return data


__all__ = ["Durable", "dump_result", "resume_point"]
