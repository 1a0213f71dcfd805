"""One tool round: admission, policy, approval, execution, pairing, nudges (docs/guides/tools.md).

Every call of the round is decided before any runs (repeat, unknown tool,
the tool-call budget, the ``tool_call`` policy, approval), so a block at a
later call stops the earlier ones too: no tool call follows a block. The
admitted calls go to the ToolActor together; ``search_tools`` is answered
here. Every ``tool_use`` gets exactly one ``tool_result`` with its id, in the
model's order (the pairing rule), also when the round is cut short: the Run
calls :meth:`ToolRound.abort` from its finish.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import anyio
import anyio.lowlevel

import tether.runtime._events as ev
from tether.actors import (
    ActorCrashed,
    ActorFailed,
    ActorRef,
    ChildRunner,
    ReplyChannel,
    RunContext,
    RunTools,
    ToolDone,
    ToolError,
    ToolInvocation,
    ToolReply,
    ToolSpec,
)
from tether.providers import Image, Message, ToolResultBlock, ToolUseBlock

from ._accounting import Accounts
from ._discovery import SEARCH_TOOL, search_catalogue
from ._input import result_text
from ._limits import Limits, Termination
from ._perrun import PerRun
from ._policy import Policies, PolicyPoint, Verdict, blocked
from ._repeats import RecentCalls
from ._resume import Admission
from ._state import Decision, PendingApproval, RunState
from ._trail import Trail
from ._typed import OUTPUT_FIRST, OUTPUT_GIVEN, TypedOutput

REPEAT_NUDGE = (
    "You already made this exact call (same tool, same arguments) in the previous round; "
    "its result is above. Use that result, or call with different arguments."
)


class ToolRecorder(Protocol):
    """Where a durable run keeps its tool results (:class:`~._durable.Durable`), and its
    fence: the lease epoch its tools see (``ctx.idempotency_key``), and whether it may
    still start a call."""

    epoch: int

    def may_act(self) -> bool: ...

    async def record_tool(self, round: int, arguments: Any, item: ToolDone) -> None: ...

    async def recall(
        self, round: int, invocations: Sequence[ToolInvocation]
    ) -> tuple[list[ToolInvocation], list[tuple[ToolUseBlock, ToolDone]]]: ...

    async def park(
        self,
        asks: Sequence[ToolUseBlock],
        previous: RecentCalls,
        reserved: int,
        admission: Admission,
    ) -> None:
        """Park the run until the held calls are answered (it does not come back)."""


class Approvals:
    """The host's answers to held tool calls, and the run's waits for them."""

    __slots__ = ("_answers", "_pending", "given")

    def __init__(self, pending: dict[str, PendingApproval]) -> None:
        self._pending = pending  # the run state's, so a checkpoint holds them
        self._answers: dict[str, tuple[anyio.Event, list[tuple[bool, str | None]]]] = {}
        #: Answers given before the calls were held (a parked run, resumed).
        self.given: dict[str, tuple[bool, str | None]] = {}

    def hold(self, call: ToolUseBlock, reason: str) -> bool:
        """Hold ``call``; whether it was answered already (asked for in an earlier Runtime)."""
        self._pending[call.id] = PendingApproval(call=call, reason=reason)
        self._answers[call.id] = (anyio.Event(), [])
        if call.id in self.given:
            self.answer(call.id, *self.given.pop(call.id))
            return True
        return False

    def waiting(self) -> list[PendingApproval]:
        """The held calls not answered yet."""
        return [p for i, p in self._pending.items() if not self._answers[i][0].is_set()]

    def answer(self, call_id: str, approved: bool, note: str | None) -> None:
        entry = self._answers.get(call_id)
        if entry is None:
            waiting = ", ".join(self._pending) or "none"
            raise KeyError(f"no approval is pending for call {call_id!r} (pending: {waiting})")
        answered, box = entry
        if answered.is_set():
            raise ValueError(f"call {call_id!r} was already answered")
        box.append((approved, note))
        answered.set()

    async def wait(self, call_id: str) -> tuple[bool, str | None]:
        answered, box = self._answers[call_id]
        await answered.wait()
        return box[0]

    def release(self, call_id: str) -> None:
        self._pending.pop(call_id, None)
        self._answers.pop(call_id, None)


class ToolRound:
    """The tool calls of one model response, from admission to their results."""

    __slots__ = (
        "_accounts",
        "_actor",
        "_approvals",
        "_calls",
        "_catalogue",
        "_fence",
        "_held",
        "_in_flight",
        "_limits",
        "_output",
        "_per_run",
        "_policies",
        "_recorder",
        "_results",
        "_run_child",
        "_state",
        "_tools",
        "_trail",
        "found",
    )

    def __init__(
        self,
        calls: Sequence[ToolUseBlock],
        *,
        state: RunState,
        tools: Mapping[str, ToolSpec],
        catalogue: Sequence[ToolSpec],
        limits: Limits,
        trail: Trail,
        accounts: Accounts,
        policies: Policies,
        approvals: Approvals,
        actor: Callable[[], ActorRef[RunTools]],
        run_child: ChildRunner | None,
        per_run: PerRun | None = None,
        output: TypedOutput | None = None,
        recorder: ToolRecorder | None = None,
        held: Admission | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self._calls = calls
        # Asked before each tool attempt (RunTools.may_act): the run's lease, or its parent's.
        self._fence = fence
        # A parked round, answered: how its calls were decided before the park.
        self._held = held
        self._recorder = recorder
        self._output = output
        self._state = state
        self._tools = tools
        self._catalogue = catalogue
        self._limits = limits
        self._trail = trail
        self._accounts = accounts
        self._policies = policies
        self._approvals = approvals
        self._actor = actor
        self._run_child = run_child
        self._per_run = per_run
        self._results: dict[str, ToolResultBlock] = {}
        # Sent to the tool actor and not answered yet.
        self._in_flight: dict[str, ToolUseBlock] = {}
        #: Tools ``search_tools`` found this round (callable from the next).
        self.found: list[ToolSpec] = []

    async def run(self) -> Decision:
        """Decide each call, run the admitted ones, pair every result; the transition.

        Cut short (a cancellation), the round is left for :meth:`abort`.
        """
        calls, limits, meter, trail = self._calls, self._limits, self._accounts.meter, self._trail
        state = self._state
        previous = state.previous_calls
        state.previous_calls = RecentCalls(calls)
        admitted: list[ToolUseBlock] = []
        asks: list[tuple[ToolUseBlock, str]] = []
        budget_hit = won = False
        deciding = calls
        if self._held is not None:  # decided before the park; its events are in the trail
            budget_hit, deciding = self._readmit(self._held, admitted, asks), ()
        for call in deciding:
            trail.note(ev.ToolCallStarted, call_id=call.id, name=call.name, arguments=call.input)
        settled = _NONE_SETTLED  # no allocation in a round without typed output
        if self._output is not None and deciding:  # final_result first (see _output.py)
            settled, won, budget_hit = self._output.check_calls(calls, state, limits.max_tool_calls)
        for call in deciding:
            if settled and call.id in settled:
                outcome, content, attempts = settled[call.id]
                self._settle(call, outcome, content, attempts)
            elif won:
                self._settle(call, "denied", OUTPUT_FIRST, 0)
            elif previous.repeats(call):
                self._settle(call, "nudged", REPEAT_NUDGE, 0)
            elif call.name not in self._tools:
                known = ", ".join(sorted(self._tools)) or "none"
                why = f"unknown tool {call.name!r}; available tools: {known}"
                self._settle(call, "model_error", why, 0)
            elif limits.max_tool_calls is not None and meter.tool_calls >= limits.max_tool_calls:
                budget_hit = True
                why = f"not run: the run's tool call budget ({limits.max_tool_calls}) is spent"
                self._settle(call, "denied", why, 0)
            else:
                policies = self._policies
                verdict = (
                    await policies.check(PolicyPoint.TOOL_CALL, call, call_id=call.id)
                    if policies.active
                    else _ALLOWED  # no policies: no coroutine per call
                )
                if verdict.kind == "block":
                    self.abort("not run: the run was blocked by a policy")
                    return blocked(verdict)
                if verdict.kind == "deny":
                    self._settle(call, "denied", f"denied by policy: {verdict.reason}", 0)
                    continue
                meter.tool_calls += 1  # reserved now, so approvals cannot overspend
                if verdict.kind == "ask":
                    asks.append((call, verdict.reason or "approval required"))
                else:
                    admitted.append(call)
        if asks:
            admitted += await self._await_approvals(asks, previous, admitted, budget_hit)
        runnable: list[ToolInvocation] = []
        for call in admitted:
            spec = self._tools[call.name]
            if spec is SEARCH_TOOL:
                self._search_tools(call)
            else:
                runnable.append(ToolInvocation(call=call, spec=spec))
        reused = _NONE_DONE  # no allocation in a round of a run without a store
        if self._recorder is not None and runnable:  # a durable run: reuse recorded results
            runnable, recalled = await self._recorder.recall(state.round, runnable)
            for call, item in recalled:
                self._take(call, item)
            reused = [item for _, item in recalled]
        done = await self._execute(runnable) if runnable else []
        if isinstance(done, Decision):
            return done
        if reused:
            done = [*reused, *done]
        self.close()
        crossed = self._accounts.crossed()
        if crossed is not None:
            return Decision.end(crossed)
        if won:
            return OUTPUT_GIVEN
        for d in done:
            if d.outcome == "fatal_error":
                return Decision.end(Termination.FATAL_TOOL_ERROR, f"{d.name}: {d.content}")
        for d in done:
            if d.outcome == "ok" and self._tools[d.name].terminal:
                state.output = result_text(d.content, d.images) if d.images else d.content
                return Decision.end(Termination.TERMINAL_TOOL)
        if budget_hit:
            trail.add(
                ev.CeilingHit(
                    **trail.head(),
                    ceiling="max_tool_calls",
                    limit=limits.max_tool_calls or 0,
                    used=meter.tool_calls,
                )
            )
            return Decision.end(Termination.MAX_TOOL_CALLS)
        return Decision("continue", "tool_use")

    # ---------------------------------------------------------------- approval

    async def _await_approvals(
        self,
        asks: list[tuple[ToolUseBlock, str]],
        previous: RecentCalls,
        admitted: list[ToolUseBlock],
        budget_hit: bool,
    ) -> list[ToolUseBlock]:
        """Wait (within the run's deadline) for the host to approve or reject each call.

        A durable run parks instead, unless every call was answered already
        (``previous`` and the calls reserved undo this round's marks in its
        checkpoint, which keeps how the round decided its calls). A call answered
        before it was held was asked for in an earlier Runtime: its request is in
        the trail already, and is not made twice.
        """
        trail, approvals = self._trail, self._approvals
        for call, reason in asks:
            if not approvals.hold(call, reason):
                trail.add(
                    ev.ApprovalRequested(
                        **trail.head(),
                        call_id=call.id,
                        name=call.name,
                        arguments=call.input,
                        reason=reason,
                    )
                )
        if self._recorder is not None and approvals.waiting():
            admission = Admission(
                settled={i: (r.content, r.is_error) for i, r in self._results.items()},
                admitted=tuple(call.id for call in admitted),
                asks=tuple((call.id, reason) for call, reason in asks),
                budget_hit=budget_hit,
            )
            reserved = len(admitted) + len(asks)
            await self._recorder.park([call for call, _ in asks], previous, reserved, admission)
        approved: list[ToolUseBlock] = []
        try:
            for call, _ in asks:
                ok, note = await approvals.wait(call.id)
                trail.add(
                    ev.ApprovalAnswered(**trail.head(), call_id=call.id, approved=ok, reason=note)
                )
                if ok:
                    approved.append(call)
                else:
                    self._accounts.meter.tool_calls -= 1
                    self._settle(call, "denied", f"rejected by the host: {note}", 0)
        finally:
            for call, _ in asks:
                approvals.release(call.id)
        return approved

    def _readmit(
        self,
        held: Admission,
        admitted: list[ToolUseBlock],
        asks: list[tuple[ToolUseBlock, str]],
    ) -> bool:
        """A parked round, answered: its calls as decided before the park (no event: the
        trail has them); whether the tool-call budget had refused one."""
        by_id = {call.id: call for call in self._calls}
        for call_id, (content, is_error) in held.settled.items():
            self._results[call_id] = ToolResultBlock(
                tool_use_id=call_id, content=content, is_error=is_error
            )
        admitted += [by_id[i] for i in held.admitted]
        asks += [(by_id[i], reason) for i, reason in held.asks]
        self._accounts.meter.tool_calls += len(admitted) + len(asks)  # the park undid these
        return held.budget_hit

    # --------------------------------------------------------------- execution

    def _search_tools(self, call: ToolUseBlock) -> None:
        """Answer ``search_tools``; what it found becomes callable in later rounds."""
        try:
            query = SEARCH_TOOL.validate(call.input)["query"]
        except ToolError as exc:
            self._settle(call, "model_error", str(exc), 1)
            return
        found = search_catalogue(self._catalogue, query)
        self.found += found
        content = json.dumps(
            [{"name": t.name, "description": t.description} for t in found], ensure_ascii=False
        )
        self._settle(call, "ok", content if found else "no tool matches; try other words", 1)

    async def _execute(self, invocations: list[ToolInvocation]) -> list[ToolDone] | Decision:
        reply: ReplyChannel[ToolReply] = ReplyChannel(len(invocations) + 1)
        pending = self._in_flight = {i.call.id: i.call for i in invocations}
        trail, accounts = self._trail, self._accounts
        done: list[ToolDone] = []
        # One call (the common round): its own context, which the actor uses as it is.
        call_id = invocations[0].call.id if len(invocations) == 1 else ""
        recorder = self._recorder  # a durable run's: its epoch, and its fence
        epoch = None if recorder is None else recorder.epoch
        if self._per_run is not None:
            context = self._per_run.context(
                call_id, run_child=self._run_child, epoch=epoch, output_sink=self._stream_output
            )
        else:
            tokens, cost = accounts.remaining()
            context = RunContext(
                run_id=trail.run_id,
                call_id=call_id,
                run_child=self._run_child,
                remaining_tokens=tokens,
                remaining_cost_usd=cost,
                epoch=epoch,
                output_sink=self._stream_output,
            )
        gone: ActorCrashed | None = None
        try:
            await self._actor().send(
                RunTools(
                    invocations=tuple(invocations),
                    reply=reply,
                    context=context,
                    may_act=self._fence,
                )
            )
            while pending:  # one answer per call; the end of the stream is not awaited
                # reply.receive(), inlined: no coroutine per item, one frame less parked.
                try:
                    item = reply.receive_nowait()
                except anyio.WouldBlock:
                    item = None  # wait below: a frame parked in a handler keeps the exception
                except anyio.EndOfStream:  # closed by the actor's supervisor
                    await anyio.lowlevel.checkpoint_if_cancelled()
                    break
                if item is None:
                    await reply.wait_receivable()
                    continue
                if isinstance(item, ActorFailed):
                    gone = item.error
                    break
                call = pending.pop(item.call_id)
                self._take(call, item)
                done.append(item)
                if self._recorder is not None:
                    await self._recorder.record_tool(self._state.round, call.input, item)
        except ActorCrashed as down:
            gone = down
        finally:
            reply.abandon()
        if gone is not None:
            trail.add(ev.ChildCrashed(**trail.head(), actor="tools", error=gone.traceback))
        # Calls the actor never answered (it crashed): fail them, never replay them
        # (a tool may have side effects). The supervisor restarts the actor.
        self._in_flight = {}
        for call in pending.values():
            self._settle(
                call,
                "transient_error",
                "the tool executor crashed; the call may not have completed and was not retried",
                0,
            )
        if gone is not None and gone.gave_up:
            self.close()
            why = f"the tools actor gave up after repeated crashes:\n{gone.traceback}"
            return Decision.end(Termination.CRASHED, why)
        return done

    def _stream_output(self, call_id: str, text: str) -> None:
        """A tool call's streamed output, to the run's delta readers (``emit_output``)."""
        trail = self._trail
        if not trail.streaming:  # nobody reads deltas: none is built
            return
        call = self._in_flight.get(call_id)
        trail.delta(
            ev.ToolOutputDelta(
                **trail.delta_head(),
                call_id=call_id,
                name="" if call is None else call.name,
                text=text,
            )
        )

    # ----------------------------------------------------------------- pairing

    def _take(self, call: ToolUseBlock, item: ToolDone) -> None:
        """A finished call: charge what it spent, then settle it."""
        if item.output is not None:
            output, trail = item.output, self._trail
            if output.child_run_id is not None:
                trail.add(
                    ev.ChildRunFinished(
                        **trail.head(),
                        call_id=call.id,
                        child_run_id=output.child_run_id,
                        termination=output.child_termination or "",
                    )
                )
            self._accounts.charge_child(output)
        self._settle(call, item.outcome, item.content, item.attempts, item.images)

    def _settle(
        self,
        call: ToolUseBlock,
        outcome: ev.ToolOutcome,
        content: str,
        attempts: int,
        images: tuple[Image, ...] = (),
    ) -> None:
        is_error = outcome != "ok"
        trail = self._trail
        trail.note(
            ev.ToolCallFinished,
            call_id=call.id,
            name=call.name,
            outcome=outcome,
            is_error=is_error,
            attempts=attempts,
            # The trail keeps text: an image is named by its stand-in, not carried.
            content=result_text(content, images) if images else content,
        )
        self._results[call.id] = ToolResultBlock(
            tool_use_id=call.id, content=content, is_error=is_error, images=images
        )

    def abort(self, why: str) -> None:
        """The round ends early: answer every call still without a result, then pair them."""
        for call in self._in_flight.values():
            self._settle(call, "cancelled", "the run ended before this call finished", 0)
        self._in_flight = {}
        for call in self._calls:
            if call.id not in self._results:
                self._settle(call, "cancelled", why, 0)
        self.close()

    def close(self) -> None:
        """Answer the round's calls in the model's order: the pairing rule."""
        calls = self._calls
        if calls and len(self._results) == len(calls):
            if len(calls) == 1:  # the common round: no generator for one result
                results: tuple[ToolResultBlock, ...] = (self._results[calls[0].id],)
            else:
                results = tuple(self._results[c.id] for c in calls)
            self._state.messages.append(Message(role="user", content=results))
            self._calls = ()


_ALLOWED = Verdict.allow()
_NONE_SETTLED: Mapping[str, tuple[ev.ToolOutcome, str, int]] = {}
_NONE_DONE: Sequence[ToolDone] = ()
