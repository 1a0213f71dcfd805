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

**Store faults; one ending per run (docs/guides/durable.md).** The promise: the end a
caller gets is the end the store holds, and no run id has two.

* *A passing fault is ridden out in the round.* Every write (create, commit,
  record_tool, park, finish), the reads a round needs and the keeper's renewals
  are tried again through :class:`RunStoreUnavailable` with backoff
  (:mod:`._storeretry`), for up to ``lease_s``: past that, the lease the writes
  hold has lapsed anyway. A write of unknown outcome (the answer lost after the
  store committed) is settled by reading back: the same events at the same
  ``seq``, the same result, count as done (see :mod:`._storeretry`).
* *The end counts once the store has it.* The run's end is assembled, written
  (:meth:`Durable.finish`), and only then published (``Run.publish``: the
  result, ``RunFinished`` to the followers and the sink, once; :mod:`._ending`).
  A process killed between the two loses the sink's ``RunFinished`` and the
  caller with it, never duplicates it: the store's end stands, and no Runtime
  resumes a finished run. (Before, a sink got ``RunFinished`` before the store
  had the end, and a crash in between let a resumed run end again.)
* *A fault that outlasts the lease ends the run* ``store_failed``. A round whose
  commit (or tool record, or park) cannot be written stops the run there, so
  it starts no model call or tool call on a state the store does not have; an
  end that cannot be written is replaced. A lease refused (``LeaseLost``) while
  this Runtime's store was failing, on a run nobody else claimed, is the same
  fault, not a loss to another owner (:class:`Faults`). The caller then gets
  ``store_failed`` (the error names the end the run had reached), never an end
  the store may contradict, and the sink gets that ``RunFinished``.
* *The store gets that end.* Still in the run's task (so the Runtime's exit
  waits for it, bounded by :attr:`Durable.owed_s`), the owner writes
  ``store_failed`` as soon as the store takes it: as the owner if its lease
  still holds, else by claiming the run back first (a claim needs the lease to
  have lapsed, as any claimer's, so it is one compare-and-set against any
  other Runtime). The write is lean, to fit a store short of room:
  ``RunFinished`` right after the events the store has (the unrecorded rounds'
  events are not kept; the caller's trail has them) and the result without
  its messages. The SQLite store keeps room for it under a file-size limit
  (``_sqlite._size_limit``).
* *Why no other Runtime resumes a run whose end was reported.* A claimer takes
  only a run whose lease lapsed. The owner reports ``store_failed`` only after
  its writes failed for a whole lease, and then races any claimer with a claim
  of its own: whoever wins, the store gets one end. If another Runtime with
  ``resume=True`` claims it first (the store served it while it refused this
  owner, or in the moment the lease lapsed), the owner's ``store_failed`` write
  finds the run claimed and gives up with a ``RuntimeWarning``, and the run
  may end otherwise there. That is the one case left, and no design can close
  it without a second channel to the claimers: an owner that can write nothing
  cannot tell them anything, and a claimer cannot tell a run whose owner was
  killed (to be resumed) from one whose owner reported ``store_failed`` and
  could not say so. Both stores make it rare: PostgreSQL faults (a dropped
  connection, a restart) pass within a lease for every client alike, and a
  SQLite file is one machine's, where the room kept for ends (and a new run
  refused when the file has no room left for its end) lets the owner record them
  (every one in ``tests/test_full_disk.py``).
"""

from __future__ import annotations

import math
import random
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

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

from ._ending import Ending, store_failed
from ._limits import Termination
from ._repeats import RecentCalls, canonical
from ._resume import Admission, HeldRound, ResumePoint
from ._runstore import (
    Claim,
    Control,
    LeaseLost,
    NewRun,
    RunStore,
    RunStoreError,
    RunStoreUnavailable,
    ToolRecord,
)
from ._state import Decision, dump_state, load_state
from ._storedhandle import StoredRun
from ._storeretry import FIRST_PAUSE_S, LONGEST_PAUSE_S, Faults, holds_events, retried, same

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
    def publish(self, ending: Ending) -> None: ...
    def stop(self) -> None: ...
    def let_go(self) -> None: ...


T = TypeVar("T")

#: The longest a Runtime goes on trying to record a ``store_failed`` end (its exit waits).
FINISH_TIMEOUT_S = 30.0

#: The share of ``lease_s`` an owner keeps in hand: its deadline is that much before
#: the store's earliest possible expiry, against clocks that run at slightly different
#: rates (the store's wall clock or server clock, the owner's monotonic clock).
LEASE_MARGIN = 0.02


class Durable:
    """One run's writes to the store (see the module docstring)."""

    __slots__ = (
        "_created",
        "_failed",
        "_faults",
        "_flushed",
        "_lost",
        "_recall_round",
        "_run",
        "deadline",
        "epoch",
        "lease_s",
        "owed_s",
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
        faults: Faults | None = None,
    ) -> None:
        self.store, self.owner, self.lease_s, self.run_id = store, owner, lease_s, run_id
        self._faults = Faults() if faults is None else faults
        #: The lease epoch this owner writes with (the fencing token; a new run's is 1).
        self.epoch = 1 if claim is None else claim.epoch
        #: When this owner's lease may lapse, by its own clock: never before the run is in
        #: the store (nobody else can have it), else from when the claim was sent.
        self.deadline = math.inf
        if claim is not None:
            self.deadline = self._until(anyio.current_time() if claimed_at is None else claimed_at)
        self._created = claim is not None
        self._lost = False
        self._failed: str | None = None  # why a write failed past the lease
        #: How long a ``store_failed`` end is offered to the store (see the module docstring).
        self.owed_s = FINISH_TIMEOUT_S
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
        self.deadline = self._until(sent)

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
        if deadline > self.deadline:
            self.deadline = deadline

    def may_act(self) -> bool:
        """Whether the run may start a side effect now (see the module docstring).

        No when a write was refused, or the lease may have lapsed by this owner's
        clock; the run then stops here as :meth:`lose` stops it, or, when the store
        failed this Runtime within the last two leases (the renewals could not get
        through), as :meth:`fail` stops it: ``store_failed``.
        """
        if self._lost or self._failed is not None:
            return False
        if anyio.current_time() < self.deadline:
            return True
        if self._run is not None:
            why = f"its lease of {self.lease_s:g} s may have lapsed: it was not renewed in time"
            if self._faults.recent(2 * self.lease_s):
                self.fail(self._run, f"{why} while the run store failed")
            else:
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
            sent = anyio.current_time()
            try:  # past the lease, it may be stored all the same: finish() sees to it
                await self._write(
                    lambda: _true(
                        self.store.create(record, owner=self.owner, lease_s=self.lease_s)
                    ),
                    self._created_here,
                )
            except RunStoreUnavailable as exc:
                self.fail(run, exc)
                return
            self._created = True
            self.deadline = self._until(sent)
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
            sent = anyio.current_time()
            control = await self._write(
                lambda: self.store.commit(
                    run.id,
                    owner=self.owner,
                    events=events,
                    checkpoint=checkpoint,
                    lease_s=self.lease_s,
                    epoch=self.epoch,
                ),
                lambda: self._committed(events),
            )
        except LeaseLost as lost:
            self.lose(run, lost)
            return
        except RunStoreUnavailable as exc:
            self.fail(run, exc)
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
            await self._write(
                lambda: _true(
                    self.store.park(
                        run.id,
                        owner=self.owner,
                        events=events,
                        checkpoint=checkpoint,
                        pending=[call.id for call in asks],
                        epoch=self.epoch,
                    )
                ),
                lambda: self._parked_here(events),
            )
        except LeaseLost as lost:
            self.lose(run, lost)
            return
        except RunStoreUnavailable as exc:
            self.fail(run, exc)
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
                self.epoch, self.deadline = claim.epoch, self._until(sent)
        await anyio.lowlevel.checkpoint()

    def lose(self, run: Run, why: Exception) -> None:
        """Another owner has the run: stop here, write nothing more; its handles here
        follow it in the store (as for a parked run)."""
        self._lost = self.parked = True
        run.cancel(f"the run store gave this run to another owner ({why})")

    async def finish(self, run: Run, ending: Ending | None) -> None:
        """Store the run's end, then publish it; or declare it ``store_failed``; or let a
        parked run go (see the module docstring). Shielded; bounded by the lease."""
        if self.parked:  # parked, or lost to another owner: it goes on elsewhere
            if run.result is None:
                run.let_go()
            return
        if ending is None:  # published already
            return
        if self._failed is not None:  # a write failed past the lease: the end cannot count
            await self._declare(run, ending, self._failed)
            return
        if not self._created:  # ended before its record was made: nothing to store
            run.publish(ending)
            return
        events = [*run.trail.dumped(self._flushed), ev.dump(ending.event)]
        result = dump_result(ending.result)
        try:
            await self._write(
                lambda: _true(
                    self.store.finish(
                        run.id, owner=self.owner, events=events, result=result, epoch=self.epoch
                    )
                ),
                lambda: self._finished_here(result),
            )
        except LeaseLost as lost:  # another owner goes on with it: follow the store
            self.lose(run, lost)
            run.let_go()
            return
        except RunStoreError as exc:  # past the lease, or a value the store cannot keep
            await self._declare(run, ending, str(exc))
            return
        run.publish(ending)

    # ------------------------------------------------------------------ store faults

    async def _write(
        self,
        op: Callable[[], Awaitable[T]],
        landed: Callable[[], Awaitable[T | None]] | None = None,
    ) -> T:
        """A write, shielded, tried again through passing faults for ``lease_s``.

        A lease that lapsed while the store failed (the write, refused with
        :class:`LeaseLost` within a lease of a fault this Runtime saw, finds the run
        still this owner's: nobody claimed it) is a store fault past the lease, not a
        loss: ``RunStoreUnavailable``."""
        faults = self._faults

        async def tracked() -> T:
            try:
                return await op()
            except RunStoreUnavailable:
                faults.seen()
                raise

        with anyio.CancelScope(shield=True):
            try:
                done = await retried(
                    tracked, within_s=self.lease_s, landed=landed, run_id=self.run_id
                )
            except LeaseLost as lost:
                if faults.recent(2 * self.lease_s) and await self.still_ours():
                    why = f"the lease lapsed while the store failed ({lost})"
                    raise RunStoreUnavailable(why) from lost
                raise
        return done

    async def still_ours(self) -> bool:
        """Whether nobody but this owner has claimed the run (a read; a failing one: yes)."""
        try:
            stored = await retried(
                lambda: self.store.get(self.run_id), within_s=self.lease_s, run_id=self.run_id
            )
        except RunStoreUnavailable:
            return True
        return stored is not None and stored.status == "running" and stored.owner == self.owner

    def fail(self, run: Run, why: Exception | str) -> Decision:
        """A write failed for longer than the lease (or the lease lapsed while the store
        failed, says the keeper): the run stops, and ends ``store_failed``."""
        if self._failed is None:
            self._failed = str(why)
            run.cancel(f"the run store failed: {why}")
        return Decision.end(Termination.STORE_FAILED, self._failed)

    async def _declare(self, run: Run, ending: Ending, why: str) -> None:
        """Publish ``store_failed``, then give the store that end (bounded: see the module
        docstring); the Runtime's exit waits for this, in the run's task."""
        failed = store_failed(ending, why)
        run.publish(failed)
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.owed_s) as scope:
            done = await self._owe(run, failed)
        if scope.cancelled_caught or not done:
            warnings.warn(
                f"run {run.id} ended store_failed and the run store could not record it "
                f"within {self.owed_s:g} s; a Runtime that resumes it may end it otherwise",
                RuntimeWarning,
                stacklevel=1,
            )

    async def _owe(self, run: Run, failed: Ending) -> bool:
        """Record ``failed`` in the store as this owner, claiming the run back once its lease
        lapsed; until it is recorded (``True``) or another Runtime has the run (``False``).

        It writes only what must be kept, to fit a store short of room: the
        ``RunFinished`` event (numbered after the events the store has: those of
        the rounds it could not take are not kept) and the result without its
        messages (the last checkpoint has them, up to the last recorded round)."""
        trail, pause, expired = run.trail, FIRST_PAUSE_S, False
        result = dump_result(attrs.evolve(failed.result, messages=()))
        ending = failed.termination.value
        while True:
            try:
                stored = await self.store.get(run.id)
                if stored is None:
                    return True  # never recorded: nothing to end
                if stored.status == "finished":
                    return bool(stored.result and stored.result["termination"] == ending)
                if stored.status == "parked":  # a park that landed after all: make it claimable
                    await self.store.request(run.id, cancel=failed.result.error)
                    continue
                lapsed, expired = expired or stored.owner != self.owner, False
                if lapsed:
                    claim = await self.store.claim(run.id, owner=self.owner, lease_s=self.lease_s)
                    if claim is None:
                        if stored.owner not in (None, self.owner):
                            return False  # another Runtime holds it
                        raise RunStoreUnavailable("not claimable yet")
                    self.epoch = claim.epoch  # the claim's fencing token: ours now
                    continue  # claimed: read its count again
                if len(trail) <= stored.events:
                    return False  # someone else wrote events past ours
                events = [ev.dump(attrs.evolve(failed.event, seq=stored.events))]
                await self.store.finish(
                    run.id, owner=self.owner, events=events, result=result, epoch=self.epoch
                )
                return True
            except LeaseLost:
                expired = True  # our lease lapsed in the store: claim the run back
                continue
            except (RunStoreError, ValueError):
                pass
            await anyio.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, LONGEST_PAUSE_S)

    async def _committed(self, events: list[dict[str, Any]]) -> Control | None:
        """A commit of unknown outcome: the store's control if it holds ``events``."""
        stored = await self.store.get(self.run_id)
        if stored is None or stored.owner != self.owner or stored.status != "running":
            return None
        if not await holds_events(self.store, self.run_id, events):
            return None
        return Control(run_id=self.run_id, cancel=stored.cancel, stop=stored.stop)

    async def _parked_here(self, events: list[dict[str, Any]]) -> bool | None:
        stored = await self.store.get(self.run_id)
        if stored is None or stored.status not in ("parked", "ready"):
            return None
        return True if await holds_events(self.store, self.run_id, events) else None

    async def _finished_here(self, result: dict[str, Any]) -> bool | None:
        stored = await self.store.get(self.run_id)
        ok = stored is not None and stored.status == "finished" and same(stored.result, result)
        return True if ok else None

    async def _created_here(self) -> bool | None:
        stored = await self.store.get(self.run_id)
        return True if stored is not None and stored.owner == self.owner else None

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
        try:  # a record replaces its call's: trying again is safe as it is
            await self._write(
                lambda: self.store.record_tool(
                    self.run_id, owner=self.owner, record=record, epoch=self.epoch
                )
            )
        except LeaseLost as lost:
            if self._run is not None:
                self.lose(self._run, lost)
        except RunStoreUnavailable as exc:
            if self._run is not None:
                self.fail(self._run, exc)

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
        try:
            records = await retried(
                lambda: self.store.tool_records(self.run_id),
                within_s=self.lease_s,
                run_id=self.run_id,
            )
        except RunStoreUnavailable as exc:
            assert self._run is not None
            self.fail(self._run, exc)
            await anyio.lowlevel.checkpoint()  # the run is cut: no call runs unrecalled
            raise
        by_id: dict[str, ToolRecord] = {}
        by_call: dict[tuple[str, str], list[ToolRecord]] = {}
        for r in records:  # in recording order
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


async def _true(write: Awaitable[None]) -> bool:
    await write
    return True


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
