"""A durable run's link to its store: the record, the checkpoints, the tool records (DESIGN §20).

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

A run held by ``Verdict.ask`` parks (:meth:`Durable.park`): its checkpoint is
the state from before that tool round, with the model's message kept apart,
and the run leaves its Runtime (no task, no memory). Answered, it is resumed
and runs that tool round again with the answers given.

A resumed run (:func:`restore`) starts from its claim: the stored events are
its trail's first events, the checkpoint its state, and its first round is the
one that was in flight at the crash. The tool calls of that round whose
results were recorded are answered from the records, not executed again.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

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

from ._discovery import choose_tools
from ._limits import Termination
from ._output import OUTPUT_GIVEN
from ._repeats import RecentCalls, canonical
from ._runstore import Claim, LeaseLost, NewRun, RunStore, RunStoreError, ToolRecord
from ._state import Decision, dump_state, load_state
from ._storedhandle import StoredRun
from ._toolsets import _RunWithToolsets, connect_toolsets

if TYPE_CHECKING:
    from ._agent import Agent
    from ._discovery import ActiveTools
    from ._result import RunResult
    from ._state import RunState
    from ._toolround import Approvals
    from ._trail import Trail


class Run(Protocol):
    """What this module needs of a :class:`~._run.Run` (which imports this module)."""

    id: str
    agent: Agent[Any, Any]
    input: str
    state: RunState
    trail: Trail
    result: RunResult[Any] | None
    _tools: ActiveTools
    _cancel_reason: str | None

    approvals: Approvals

    async def prepare(self) -> Decision | None: ...
    async def _execute_tools(self, response: ModelResponse) -> Decision: ...
    async def _judge_candidate(self, text: str) -> Decision: ...
    async def _decide(self, decision: Decision) -> Decision: ...
    def cancel(self, reason: str) -> None: ...
    def stop(self) -> None: ...
    def let_go(self) -> None: ...


#: How long a run's last write may take when the run is being torn down.
FINISH_TIMEOUT_S = 30.0


class Durable:
    """One run's writes to the store (see the module docstring)."""

    __slots__ = (
        "_claim",
        "_created",
        "_flushed",
        "_lost",
        "_recall_round",
        "_run",
        "_unpark",
        "lease_s",
        "owner",
        "parked",
        "run_id",
        "store",
    )

    def __init__(
        self, store: RunStore, owner: str, lease_s: float, run_id: str, claim: Claim | None = None
    ) -> None:
        self.store, self.owner, self.lease_s, self.run_id = store, owner, lease_s, run_id
        self._claim = claim
        self._created = claim is not None
        self._lost = False
        self._flushed = 0 if claim is None else claim.run.events
        self._run: Run | None = None
        #: The run has left this process: parked in the store, or lost to another owner.
        self.parked = False
        checkpoint = None if claim is None else claim.run.checkpoint
        # A parked run's held tool round, to run again with the answers.
        self._unpark = None if checkpoint is None else checkpoint.get("parked")
        # The round in flight at the crash: its recorded tool results are reused.
        self._recall_round = None if checkpoint is None else int(checkpoint["round"]) + 1

    def recorded(self) -> None:
        """The run's record was created before it began (``Runtime.submit``)."""
        self._created = True

    @property
    def created(self) -> bool:
        """Whether the store has the run's record (its lease is then renewed)."""
        return self._created and not self._lost

    @property
    def resumed(self) -> bool:
        """Whether the run continues from a checkpoint (so it skips preparation)."""
        return self._recall_round is not None

    # --------------------------------------------------------------- the run's path

    async def prepare(self, run: Run) -> Decision | None:
        """Preparation, then the record and the first checkpoint; or the resumed seam."""
        claim, self._run = self._claim, run
        if self.resumed:
            assert claim is not None
            # The agent's tools, and those its searches had found (the Run's own field).
            agent = run.agent
            run._tools = choose_tools(
                agent.tools, agent.discovery, agent.discovery_threshold, agent.typed_output
            )
            # A Run is a _RunWithToolsets (as Run.prepare's own call shows); mypy cannot
            # see its inferred attributes from here, across the import cycle.
            conn = cast("_RunWithToolsets", run)
            if agent.toolsets and (failed := await connect_toolsets(conn)) is not None:
                return failed
            tools = run._tools  # with the toolsets' tools, when the agent has any
            tools.promote(t for t in tools.catalogue if t.name in run.state.found_tools)
            _seam(run, claim)
            if claim.run.cancel is not None:
                run.cancel(claim.run.cancel)
            elif self._unpark is not None:
                return await self._resume_round(run, claim)
            return None
        failed = await run.prepare()
        if failed is not None:
            return failed
        if claim is None and not self._created:
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
                await self.store.create(record, owner=self.owner, lease_s=self.lease_s)
            self._created = True
        elif claim is not None:  # claimed before its first checkpoint: it started over
            _seam(run, claim)
        await self.boundary(run, None)
        return None

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
                control = await self.store.commit(
                    run.id,
                    owner=self.owner,
                    events=events,
                    checkpoint=checkpoint,
                    lease_s=self.lease_s,
                )
        except LeaseLost as lost:
            self.lose(run, lost)
            return
        self._flushed = count
        if control.cancel is not None:
            run.cancel(control.cancel)
        elif control.stop:
            run.stop()

    async def _resume_round(self, run: Run, claim: Claim) -> Decision | None:
        """A parked run answered: its held tool round again, with the answers given."""
        message = load_message(self._unpark)
        self._unpark = None
        run.approvals.given = {a.call_id: (a.approved, a.note) for a in claim.run.answers}
        response = ModelResponse(content=message.content, stop_reason=StopReason.TOOL_USE)
        decision = await run._execute_tools(response)
        if decision is OUTPUT_GIVEN:
            candidate = run.state.candidate or ""
            judged = run.agent.judge is not None
            decision = (
                await run._judge_candidate(candidate)
                if judged
                else Decision.end(Termination.ANSWERED)
            )
        with run.trail.stage("decide"):
            decision = await run._decide(decision)
        await self.boundary(run, decision)
        return decision if decision.termination is not None else None

    async def park(
        self, asks: Sequence[ToolUseBlock], previous: RecentCalls, reserved: int
    ) -> None:
        """Park the run in the store until its held calls are answered; it ends here.

        The checkpoint is the state from before this tool round (the round's
        marks undone), with the model's message kept apart: answered, the run
        runs this tool round again, from the same calls.
        """
        run = self._run
        assert run is not None
        state = run.state
        marks = state.previous_calls, state.usage.tool_calls
        message = state.messages.pop()
        state.previous_calls, state.usage.tool_calls = previous, marks[1] - reserved
        try:
            checkpoint = dump_state(state)
        finally:
            state.messages.append(message)
            state.previous_calls, state.usage.tool_calls = marks
        checkpoint["parked"] = dump_message(message)
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
                )
        except LeaseLost as lost:
            self.lose(run, lost)
            return
        self._flushed = count
        reason = run._cancel_reason
        if reason is None:
            self.parked = True
            run.cancel("parked")  # the run's task ends now; finish() hands it to the store
        else:  # cancelled while it was parking: take it back, and end it here
            with anyio.CancelScope(shield=True):
                await self.store.request(run.id, cancel=reason)
                claim = await self.store.claim(run.id, owner=self.owner, lease_s=self.lease_s)
            if claim is None:
                self.lose(run, LeaseLost("claimed by another Runtime while it was parked"))
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
                await self.store.finish(run.id, owner=self.owner, events=events, result=result)
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
                await self.store.record_tool(self.run_id, owner=self.owner, record=record)
        except LeaseLost as lost:
            if self._run is not None:
                self.lose(self._run, lost)

    async def recall(
        self, round: int, invocations: Sequence[ToolInvocation]
    ) -> tuple[list[ToolInvocation], list[tuple[ToolUseBlock, ToolDone]]]:
        """Split a round's calls into those to run and those answered from records."""
        if round != self._recall_round:
            return list(invocations), []
        self._recall_round = None
        records = await self.store.tool_records(self.run_id, round)
        by_id = {r.call_id: r for r in records}
        by_call = {(r.name, r.arguments): r for r in reversed(records)}
        to_run: list[ToolInvocation] = []
        reused: list[tuple[ToolUseBlock, ToolDone]] = []
        used: set[str] = set()
        for invocation in invocations:
            call = invocation.call
            record = by_id.get(call.id) or by_call.get((call.name, canonical(call.input)))
            if record is None or record.call_id in used:
                to_run.append(invocation)
                continue
            used.add(record.call_id)
            data = record.result
            output = None if data["output"] is None else ToolOutput(**data["output"])
            reused.append(
                (
                    call,
                    ToolDone(
                        call_id=call.id,
                        name=call.name,
                        outcome=data["outcome"],
                        content=data["content"],
                        attempts=int(data["attempts"]),
                        output=output,
                    ),
                )
            )
        return to_run, reused


def _seam(run: Run, claim: Claim) -> None:
    trail = run.trail
    trail.add(
        ev.RunResumed(
            **trail.head(), from_round=run.state.round, previous_owner=claim.previous_owner
        )
    )


def restore(run: Run, claim: Claim, events: Sequence[Any]) -> None:
    """Make a freshly built Run the claimed run: its stored trail, its checkpoint."""
    stored = claim.run
    if stored.checkpoint is None:
        return
    run.trail.restore([ev.load(e) for e in events])
    loaded = load_state(stored.checkpoint)
    state = run.state
    for field in attrs.fields(type(state)):
        if field.name in ("usage", "approvals"):  # the Run's rooms hold these two
            continue
        setattr(state, field.name, getattr(loaded, field.name))
    for field in attrs.fields(type(state.usage)):  # the Accounts hold this meter
        setattr(state.usage, field.name, getattr(loaded.usage, field.name))
    run.trail.round = state.round


async def wait_result(store: RunStore, run_id: str, agent: Agent[Any, Any]) -> RunResult[Any]:
    """The result of a run that left this process (parked), once it has finished."""
    return await StoredRun(store, run_id, {agent.name: agent}, lambda job: None).wait_result()


def dump_result(result: RunResult[Any]) -> dict[str, Any]:
    """A result as the store keeps it: :meth:`RunResult.dump` without the events."""
    data = result.dump()
    del data["events"]
    return data


__all__ = ["Durable", "dump_result", "restore"]
