"""The Run supervisor: the loop that moves a run's state from round to round.

A run is preparation, a loop of rounds, and assembly (see docs/concepts/round.md)::

    preparation:  input policy → memory recall → tool catalogue
    round:        context → model → response policy → tool policy + execution
                  → judgement → decision (round_end policy, ceilings, transition)
    assembly:     output, usage, judgement, termination, events → RunResult

The Run holds the :class:`~._state.RunState` and decides every transition.
Each concern lives in a room of its own, and answers with values:

- the event trail and its followers (:mod:`._trail`);
- accounting: charges, the clamp, budgets, ceilings (:mod:`._accounting`);
- a model call and its supervision (:mod:`._modelcall`);
- a tool round: admission, policy, approval, execution, pairing (:mod:`._toolround`);
- judgement and lessons (:mod:`._judgement`);
- policies (:mod:`._policy`).

The Run's children (model, tools, judge actors) live in the Run's task group,
inside the Run's cancel scope; they talk to it only through their mailboxes
and the reply channels carried by each request. Ceilings are outcomes, not
exceptions.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import attrs

import tether.runtime._events as ev
from tether.actors import (
    ActorRef,
    Candidate,
    JudgeActor,
    JudgeCandidate,
    Judgement,
    RunTools,
    ToolActor,
    ToolOutput,
    ToolThreads,
    cancel_scope,
    dump_output,
    spawn,
    spawn_mailbox,
    supervise,
)
from tether.providers import Message, ModelRequest, ModelResponse, StopReason, ToolUseBlock

from ._accounting import Accounts
from ._agent import Agent
from ._budget import Hit, least
from ._discovery import ActiveTools
from ._ending import Ending, assemble
from ._failover import model_client
from ._history import user_message
from ._instructions import resolve
from ._judgement import Judging
from ._limits import Limits, Termination
from ._log import INFO, log, run_ended
from ._modelcall import ModelClient
from ._perrun import NO_EXTRAS, PerRun, RunExtras, prepare
from ._policy import Policies, PolicyPoint, blocked
from ._result import RunResult
from ._state import Decision, PendingApproval, RunState, RunView
from ._toolround import Approvals, ToolRound
from ._toolsets import offer_tools
from ._trail import EventStream, Trail
from ._transcript import Transcript
from ._typed import OUTPUT_GIVEN, add_user_text

if TYPE_CHECKING:
    from ._durable import Durable
    from ._resume import HeldRound, ResumePoint
    from ._services import RuntimeServices

#: The user message that asks a model cut off by ``max_tokens`` to go on.
CONTINUE_PROMPT = "Continue exactly where you stopped, without repeating anything."


#: Failures that cutting a run short can cause in its own loop (a child gone with
#: the cancellation, a provider call broken mid-way): the cut wins over them.
_CUT_FAILURES = frozenset({Termination.CRASHED, Termination.PROVIDER_FAILED})


async def _note_start(run: Run) -> Decision | None:
    """``RunStarted``, the first event of a run's trail (a resumed run's has it already),
    after an instructions function gave the run its system prompt: ``None``, or the
    decision that ends the run when the function failed (see ``_instructions.py``)."""
    agent, state = run.agent, run.state
    text: str | Decision | None = None
    try:
        if not isinstance(agent.instructions, str):
            text = await resolve(agent.instructions, run.per_run.context())
            if isinstance(text, str):
                state.system = text
    finally:  # cancelled in the function too: every run's trail starts so
        run.trail.note(
            ev.RunStarted,
            agent=agent.name,
            input=run.input,
            parent_run_id=state.parent_run_id,
            provider=getattr(agent.provider, "name", None),
            model=getattr(agent.provider, "model", None),
            instructions=text if isinstance(text, str) else None,
        )
    return text if isinstance(text, Decision) else None


class Run:
    """One run: a supervisor actor. Created by :meth:`Runtime.start`."""

    # Slots: thousands of runs may be parked at once; no per-run __dict__.
    __slots__ = (
        "_decision",
        "_done",
        "_durable",
        "_ending",
        "_fence",
        "_first",
        "_forced",
        "_judge",
        "_judging",
        "_model",
        "_scope",
        "_services",
        "_started",
        "_stop_requested",
        "_tg",
        "_tool_actor",
        "_tool_round",
        "_tools",
        "_transcript",
        "accounts",
        "agent",
        "approvals",
        "cancel_reason",
        "id",
        "input",
        "per_run",
        "policies",
        "result",
        "state",
        "trail",
    )

    def __init__(
        self,
        services: RuntimeServices,
        agent: Agent[Any, Any],
        input: str,
        run_id: str,
        parent_run_id: str | None = None,
        first: Message | None = None,
        extras: RunExtras = NO_EXTRAS,
        transcript: Transcript | None = None,
        durable: Durable | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self.id, self._durable = run_id, durable  # with a run store (_durable.py), or None
        # Asked before each model and tool attempt: a durable run's lease (Durable.may_act),
        # or a sub-agent's parent's, whose tool call the child runs in.
        self._fence = fence if durable is None else durable.may_act
        self.agent = agent
        self.input, self._first = input, first  # text form; the parts' message (_input.py)
        self._services = services
        state = self.state = RunState(
            run_id=run_id,
            agent=agent.name,
            input=input,
            # A function's text is set when the run starts (see _instructions.py).
            system=agent.instructions if isinstance(agent.instructions, str) else "",
            parent_run_id=parent_run_id,
        )
        # Looked up once: a dated model id is matched against the whole price table.
        price = agent.provider.price()
        # An unpriced model's cost is unknown (None) whatever the run charged, never zero.
        state.usage.unpriced = price is None
        trail = self.trail = Trail(run_id, services.sink, services.delta_sink)
        self.accounts = Accounts(
            meter=state.usage,
            limits=agent.limits,
            price=price,
            trail=trail,
            shared=services.budget,
            on_shared_hit=services.on_budget_spent(run_id),
            **extras.clamp_args(agent.provider),
        )
        self.per_run = PerRun(run_id, extras, self.accounts)
        self.policies = Policies.of(agent.policies, trail, self.per_run.context)
        self.approvals = Approvals(state.approvals)
        self.result: RunResult[Any] | None = None
        # Made when someone waits for the result (most runs are awaited once, at the end).
        self._done: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        #: The reason the run was asked to cancel, once it was.
        self.cancel_reason: str | None = None
        self._stop_requested = False
        self._started: float | None = None  # when admitted (anyio.current_time())
        self._decision: Decision | None = None  # the loop's, once it has decided
        self._ending: Ending | None = None  # assembled, until published
        self._forced: Hit | None = None
        self._tools = ActiveTools(agent.tools, False, agent.typed_output)
        self._tool_round: ToolRound | None = None
        self._judging: Judging | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._model: ModelClient | None = None
        self._tool_actor: ActorRef[RunTools] | None = None
        self._judge: ActorRef[JudgeCandidate] | None = None
        self._transcript = transcript or Transcript.of(agent)
        if durable is not None and durable.point is not None:  # claimed from the store
            durable.point.restore(state, trail)
        if extras.playback is not None:  # a replayed or forked run (_playback.py)
            extras.playback.bind(self)

    # ------------------------------------------------------------- the handle

    def follow(self) -> EventStream:
        """Every event from the first, then live ones, until ``RunFinished``."""
        return self.trail.follow()

    async def wait_finished(self) -> None:
        """Wait until the run has its result."""
        if self.result is None:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()

    def stop(self) -> None:
        """Finish the current round, then end ``cancelled`` with reason "stopped"."""
        self._stop_requested = True

    def cancel(self, reason: str) -> None:
        if self.result is not None or self.cancel_reason is not None:
            return
        self.cancel_reason = reason or "cancelled"
        self._cut(self.cancel_reason)

    def force_end(self, hit: Hit) -> None:
        """End the run now for a ceiling it does not own (the Runtime's budget)."""
        if self.result is not None or self._forced is not None:
            return
        self._forced = hit
        self._cut(f"the Runtime's budget is spent ({hit.ceiling})")

    def _cut(self, why: str) -> None:
        """Cancel the run's scope, once it has one. Before that, ``main`` cuts a cancel on
        entry, and a spent Runtime budget stops the run at its first ``before_call``."""
        if self._scope is not None:
            cancel_scope(self._scope, f"run {self.id}: {why}")

    def pending_approvals(self) -> list[PendingApproval]:
        return self.approvals.waiting()

    def answer(self, call_id: str, approved: bool, note: str | None) -> None:
        self.approvals.answer(call_id, approved, note)

    # --------------------------------------------------------------- lifecycle

    async def main(self, *, admit: bool = True) -> None:
        """The run's task: wait for admission, run, and always finish exactly once.

        A sub-agent's run passes ``admit=False``: it runs inside its parent's
        slot, so a full Runtime cannot deadlock a parent waiting on its child.

        One task group covers the wait for admission and the execution: its cancel
        scope is the run's (cancelled once, by ``cancel``/``force_end``), and the
        run's deadline is set on it once the run is admitted.
        """
        scope: anyio.CancelScope | None = None
        try:
            async with anyio.create_task_group() as tg:
                scope = self._scope = tg.cancel_scope
                if self.cancel_reason is not None:
                    self._cut(self.cancel_reason)
                if self._transcript is not None:
                    await self._transcript.begin()
                admission = self._services.admission() if admit else None
                if admission is not None:
                    async with admission:
                        await self._execute(tg)
                else:
                    # No context manager to hold while the run lives (no limit on runs).
                    await self._execute(tg)
        except* Exception:
            # Also an error beside a cancellation in one group: the cancellation
            # goes on up to the run's scope, the error ends the run crashed.
            self._decision = Decision.end(Termination.CRASHED, traceback.format_exc())
        finally:
            if self._transcript is not None and self.result is None:
                self._decision = await self._transcript.finish(self._decision)
            if self.result is None and (self._durable is None or not self._durable.parked):
                self._conclude(scope is not None and scope.cancelled_caught)
            if self._durable is not None:  # publishes the end once stored (or lets it go)
                await self._durable.finish(self, self._ending)

    async def _execute(self, tg: anyio.abc.TaskGroup) -> None:
        """Run the loop in the run's task group; it sets ``_decision`` unless cancelled.

        The decision is kept on the run: a cancellation landing as the group exits must not
        lose it. The loop is inline: a coroutine of its own is a frame more per parked run."""
        agent, trail, state, durable = self.agent, self.trail, self.state, self._durable
        self._started = anyio.current_time()
        if agent.limits.timeout_s is not None:
            tg.cancel_scope.deadline = self._started + agent.limits.timeout_s
        if not trail and (failed := await _note_start(self)) is not None:
            self._decision = failed  # the instructions function failed
            return
        self._start_children(tg)
        try:
            point = None if durable is None else durable.point
            held = None if point is None else point.held
            # Awaited at once: a coroutine kept in a local would stay tracked while the run lives.
            failed = await self.prepare(point)
            if failed is None and durable is not None:
                await durable.begin(self)  # the record and the first checkpoint, if not stored
            # A held round's model call was made before the park: its ceilings come after it.
            if failed is None and held is None and (ceiling := self.accounts.before_call()):
                failed = Decision.end(ceiling)
            if failed is not None:
                self._decision = failed
                return
            while True:
                if held is None:
                    state.round = trail.round = state.round + 1
                decision = await self._round(held)  # a parked run finishes its held round first
                held = None
                with trail.stage("decide"):
                    decision = await _decide(self, decision)
                if durable is not None:
                    await durable.boundary(self, decision)
                if decision.termination is not None:
                    self._decision = decision
                    return
        finally:
            self._stop_children()

    def _conclude(self, caught: bool) -> None:
        """Finish with the loop's decision, or say why the run was cut short."""
        decision, accounts = self._decision, self.accounts
        cut = self.cancel_reason is not None or self._forced is not None or caught
        if (
            decision is not None
            and decision.termination is not None
            and not (cut and decision.termination in _CUT_FAILURES)
        ):
            self._finish(decision.termination, decision.error)
        elif self._forced is not None:
            accounts.record_hit(self._forced.ceiling, self._forced.limit, self._forced.used)
            why = f"the Runtime's budget was spent ({self._forced.ceiling})"
            self._finish(self._forced.termination, why)
        elif self.cancel_reason is not None:
            self._finish(Termination.CANCELLED, self.cancel_reason)
        elif caught and self._started is not None:
            # Nothing else cancels the run's own scope: its deadline passed.
            timeout = float(self.agent.limits.timeout_s or 0)
            used = anyio.current_time() - self._started
            accounts.record_hit("timeout_s", timeout, used)
            self._finish(Termination.DEADLINE, None)
        else:
            # Cancelled from outside the Runtime (the Runtime's group, a caller).
            self._finish(Termination.CANCELLED, "cancelled from outside")

    def _finish(self, termination: Termination, error: str | None) -> None:
        """Assembly; published now, or once the run store has the end (see ``_ending``)."""
        tools, self._tool_round = self._tool_round, None
        now = self._durable is None  # no store: the end counts at once
        self._ending = ending = assemble(
            self.id, self.agent, self.state, self.trail, tools, termination, error, now
        )
        if now:
            self._published(ending.result)

    def publish(self, ending: Ending) -> None:
        """The end counts: ``RunFinished``, the result, the waiters woken; exactly once."""
        trail = self.trail
        trail.add(ending.event)
        self._published(attrs.evolve(ending.result, events=trail.finish()))

    def _published(self, result: RunResult[Any]) -> None:
        self.result = result
        if log.isEnabledFor(INFO):  # one cached check per run end when logging is off
            took = None if self._started is None else anyio.current_time() - self._started
            run_ended(result, self.agent.name, took)
        # A finished run keeps its result, not its machinery: handles may keep
        # thousands of finished runs, and the garbage collector walks them all.
        self.state.messages = []
        self._scope = self._tg = self._model = self._tool_actor = self._judge = None
        if self._done is not None:
            self._done.set()
        self._services.run_finished(self.id)

    # -------------------------------------------------------------- children

    def _start_children(self, tg: anyio.abc.TaskGroup) -> None:
        # The model actor starts with the run, the tool and judge actors on first use (a
        # parked run costs one child task, not three). start_soon, with no await before it:
        # a cancellation cannot strand a mailbox, which buffers, so the Run may send at once.
        self._tg = tg
        agent, services = self.agent, self._services
        self._model = model_client(
            agent.provider,
            self.id,
            services=services,
            spawn=self._spawn,
            trail=self.trail,
            accounts=self.accounts,
            limits=agent.limits,
            may_act=self._fence,
        )

    def _spawn(self, name: str, factory: Callable[[], Any]) -> ActorRef[Any]:
        assert self._tg is not None
        ref, box = spawn_mailbox(name, 1)
        spawn(self._tg, supervise, name, factory, box, self.agent.restart, name=f"{self.id}:{name}")
        return ref

    def _tools_actor(self) -> ActorRef[RunTools]:
        if self._tool_actor is None:
            factory = _tool_actor_factory(self.agent, self._services.threads)
            if (playback := self.per_run.playback) is not None:
                factory = playback.tools(factory)
            self._tool_actor = self._spawn("tools", factory)
        return self._tool_actor

    def _judge_actor(self) -> ActorRef[JudgeCandidate]:
        if self._judge is None:
            judge = self.agent.judge
            assert judge is not None
            self._judge = self._spawn("judge", lambda: JudgeActor(judge, self.id))
        return self._judge

    def _judgement(self) -> Judging:
        if self._judging is None:
            self._judging = Judging(
                self.agent, self.per_run, self.trail, self.accounts, self._judge_actor
            )
        return self._judging

    def _stop_children(self) -> None:
        # Closing a mailbox ends its actor's loop once it is idle; the Run waits
        # for replies before going on, so every actor is idle here unless the run
        # is being cancelled, and then the cancel scope stops them anyway.
        if self._model is not None:
            self._model.close()
        for ref in (self._tool_actor, self._judge):
            if ref is not None:
                ref.close()

    # -------------------------------------------------------------- the loop

    async def prepare(self, point: ResumePoint | None = None) -> Decision | None:
        """Preparation (docs/concepts/round.md): ``None``, or the decision to end before round 1.

        A run claimed from a run store (``point``) marks its seam first; resumed
        from a checkpoint, it only offers its tools again (and obeys a cancel
        requested through the store); claimed before one, it starts over.
        """
        state, trail, policies = self.state, self.trail, self.policies
        if point is not None:  # claimed from a run store: its seam
            trail.add(point.seam(trail.head(), state.round))
            if point.state is not None:
                if point.cancel is not None:
                    self.cancel(point.cancel)
                elif point.held is not None:
                    self.approvals.given = dict(point.held.answers)
                return await self._offer_tools()
        with trail.stage("input"):
            verdict = await policies.check(PolicyPoint.INPUT, self.input)
        if verdict.kind == "block":
            return blocked(verdict)
        with trail.stage("memory"):
            if self.agent.memory is not None:
                await self._judgement().recall(state)
            if (kept := self._transcript) is not None and (failed := await kept.load(state, trail)):
                return failed
        with trail.stage("tools"):
            if (failed := await self._offer_tools()) is not None:
                return failed
        state.messages.append(self._first or user_message(self.input))
        return None

    async def _offer_tools(self) -> Decision | None:
        tools = await offer_tools(self.agent, self._services.toolsets, self.state, self.trail)
        if isinstance(tools, Decision):
            return tools
        self._tools = tools
        return None

    async def _round(self, held: HeldRound | None = None) -> Decision:
        """One round (``held``: a parked run's held tool round, answered: its response
        came before the park)."""
        state, trail = self.state, self.trail
        if held is not None:
            response = held.response
        else:
            with trail.stage("context"):
                request = _request(self)
            assert self._model is not None
            # ``with trail.stage("model")`` spelled out: a parked frame holds no bound __exit__.
            trail.stage("model").__enter__()
            try:
                outcome = await self._model.call(request)
            except BaseException as exc:
                trail.__exit__(type(exc), exc, exc.__traceback__)
                raise
            trail.__exit__(None, None, None)
            if isinstance(outcome, Decision):
                return outcome
            response = outcome
            state.usage.steps += 1
            # The candidate lives for this round only: set from this response.
            state.candidate = None
            if self.policies.active:
                with trail.stage("policy"):
                    verdict = await self.policies.check(PolicyPoint.RESPONSE, response)
                if verdict.kind == "block":
                    return blocked(verdict)
        stop, calls = response.stop_reason, response.tool_calls
        if stop is StopReason.MAX_TOKENS:
            if calls:
                # A tool call cut off mid-arguments is never run.
                why = f"the response hit max_tokens inside tool call {calls[-1].name!r}"
                return Decision.end(Termination.TRUNCATED_TOOL_CALL, why)
            return _continue_text(state, self.agent.limits, self.accounts, response)
        if calls:
            decision = await self._execute_tools(response, calls, held)
            if decision is not OUTPUT_GIVEN:
                return decision
        elif stop in (StopReason.END_TURN, StopReason.STOP_SEQUENCE):
            state.candidate = state.partial + response.text
            state.partial = ""
            state.messages.append(Message(role="assistant", content=response.content))
            if (typed := self.agent.typed_output) and (again := typed.text_answer(state)):
                return again
        if calls or stop in (StopReason.END_TURN, StopReason.STOP_SEQUENCE):
            if self.agent.judge is None:
                return Decision.end(Termination.ANSWERED)
            return await self._judge_candidate(state.candidate or "")
        if stop is StopReason.PAUSE_TURN:
            state.messages.append(Message(role="assistant", content=response.content))
            return Decision("continue", "pause_turn")
        if stop is StopReason.REFUSAL:
            return Decision.end(Termination.REFUSAL, response.text or None)
        if stop is StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED:
            trimmed = None if state.trimmed else self.agent.context.trim(state.messages)
            if trimmed is None:
                return Decision.end(Termination.CONTEXT_EXCEEDED)
            state.trimmed = True
            state.messages[:] = trimmed
            return Decision("continue", "context_trimmed")
        why = f"unknown stop reason {response.raw_stop_reason!r}"
        return Decision.end(Termination.UNKNOWN_STOP_REASON, why)

    # ---------------------------------------------------------------- tools

    async def _execute_tools(
        self, response: ModelResponse, calls: tuple[ToolUseBlock, ...], held: HeldRound | None
    ) -> Decision:
        """The round's tool calls (``response.tool_calls``)."""
        self.state.messages.append(Message(role="assistant", content=response.content))
        tool_round = self._tool_round = ToolRound(
            calls,
            state=self.state,
            tools=self._tools.specs,
            catalogue=self._tools.catalogue,
            limits=self.agent.limits,
            trail=self.trail,
            accounts=self.accounts,
            policies=self.policies,
            approvals=self.approvals,
            actor=self._tools_actor,
            run_child=self._run_child,
            per_run=self.per_run,
            output=self.agent.typed_output,
            recorder=self._durable,
            fence=self._fence,
            held=None if held is None else held.admission,
        )
        self.trail.enter("execute")
        try:
            decision = await tool_round.run()
            self._tool_round = None
            return decision
        finally:
            self.state.found_tools += self._tools.promote(tool_round.found)
            self.trail.exit()  # also when the round ends otherwise: its calls are answered

    async def _run_child(self, agent: object, task: str) -> ToolOutput:
        """Run ``agent`` on ``task`` as a child of this run (``ToolContext.run_child``)."""
        return await _run_child(self, self._services, agent, task)

    # ---------------------------------------------------------------- judge

    async def _judge_candidate(self, text: str) -> Decision:
        state = self.state
        with self.trail.stage("judge"):
            value = text if self.agent.typed_output is None else state.candidate_value
            candidate = Candidate(text=text, question=self.input, round=state.round, output=value)
            judged = await self._judgement().judge(candidate)
        return judged if isinstance(judged, Decision) else _judged(state, self.agent.limits, judged)

    def let_go(self) -> None:
        """Parked in the run store (:mod:`._durable`): leave the Runtime, wake the waiters."""
        self._scope = self._tg = self._model = self._tool_actor = self._judge = None
        self.trail.finish()
        if self._done is not None:
            self._done.set()
        self._services.run_finished(self.id)


async def _decide(run: Run, decision: Decision) -> Decision:
    """The round boundary of ``run``: round_end policy, ceilings, a stop request; the transition.

    A cancel requested before the boundary wins over whatever the round
    decided (its reply may have come in the same instant).
    """
    if run.cancel_reason is not None:
        decision = Decision("complete", "cancelled", Termination.CANCELLED, run.cancel_reason)
    if (decision.termination is None or decision.termination.ok) and run.policies.active:
        verdict = await run.policies.check(PolicyPoint.ROUND_END, RunView.of(run.state))
        if verdict.kind == "block":
            decision = blocked(verdict)
    if decision.termination is None:
        ceiling = run.accounts.before_call()
        if ceiling is not None:
            decision = Decision.end(ceiling)
    if decision.termination is None and run._stop_requested:
        decision = Decision("complete", "stopped", Termination.CANCELLED, "stopped")
    trail = run.trail
    trail.note(ev.Transition, kind=decision.kind, reason=decision.reason)
    return decision


def _request(run: Run) -> ModelRequest:
    """The round's model request: the state, the tools offered, the clamp, the settings."""
    request = ModelRequest(
        system=run.state.system,
        messages=tuple(run.state.messages),
        tools=run._tools.definitions(),
        max_tokens=run.accounts.clamp(),
        settings=run.per_run.settings,
        output_format=None if (typed := run.agent.typed_output) is None else typed.format,
    )
    return request if run._transcript is None else run._transcript.bound(request)


def _tool_actor_factory(agent: Agent[Any, Any], threads: ToolThreads) -> Callable[[], ToolActor]:
    settings, limits = agent.tool_settings, agent.limits
    retries, timeout = limits.max_tool_retries, limits.timeout_s
    return lambda: ToolActor(settings, retries, threads, run_timeout_s=timeout)


async def _run_child(
    parent: Run, services: RuntimeServices, agent: object, task: str
) -> ToolOutput:
    """A child run of ``parent`` (see :meth:`Run._run_child`), inside the calling tool."""
    if not isinstance(agent, Agent):
        raise TypeError(f"run_child() wants a tether.Agent, got {type(agent).__name__}")
    tokens, cost = parent.accounts.remaining()
    limits = attrs.evolve(
        agent.limits,
        max_total_tokens=least((agent.limits.max_total_tokens, tokens)),
        max_cost_usd=least((agent.limits.max_cost_usd, cost)),
    )
    extras = prepare(agent, None, parent.per_run.deps)
    child_agent = attrs.evolve(agent, limits=limits)  # the child inherits the deps
    child = Run(
        services,
        child_agent,
        task,
        services.new_run_id(),
        parent.id,
        extras=extras,
        fence=parent._fence,  # a parent that may have lost its lease: the child stops too
    )
    await child.main(admit=False)
    assert child.result is not None
    return _child_output(agent.name, child.result)


def _judged(state: RunState, limits: Limits, judged: Judgement) -> Decision:
    """The transition after a judgement: answered, exhausted, or one more try."""
    state.judgement = judged
    if judged.passed:
        return Decision.end(Termination.ANSWERED)
    if state.usage.quality_retries >= limits.max_quality_retries:
        return Decision.end(Termination.QUALITY_EXHAUSTED)
    state.usage.quality_retries += 1
    add_user_text(state.messages, _feedback_prompt(judged))
    return Decision("retry", "judgement_failed")


def _continue_text(
    state: RunState, limits: Limits, accounts: Accounts, response: ModelResponse
) -> Decision:
    """``max_tokens`` without a tool call: keep the text and ask the model to go on."""
    meter = state.usage
    state.partial += response.text
    if meter.continues >= limits.max_continues:
        state.output = state.partial or None
        accounts.record_hit("max_continues", limits.max_continues, meter.continues)
        return Decision.end(Termination.MAX_CONTINUES)
    meter.continues += 1
    state.messages.append(Message(role="assistant", content=response.content))
    state.messages.append(Message.user(CONTINUE_PROMPT))
    return Decision("continue", "max_tokens")


def _feedback_prompt(judgement: Judgement) -> str:
    lines = judgement.feedback_text()
    if not lines:
        lines = (
            f"- the review could not be completed ({judgement.error})"
            if judgement.error
            else "- no details"
        )
    return (
        "Your previous answer did not pass review.\n"
        f"Reviewer feedback:\n{lines}\n"
        "Write an improved answer that addresses the feedback. "
        "You can still use the tools to investigate further."
    )


def _child_output(name: str, result: RunResult[Any]) -> ToolOutput:
    """A child run's result as its parent's tool result, with what it spent.

    The child ran inside the calling tool, so it lived in the parent's task
    tree; its token and cost ceilings were the tighter of its own and what the
    parent had left.
    """
    content = result.output
    if content is not None and not isinstance(content, str):  # a typed child: its JSON
        content = json.dumps(dump_output(content), ensure_ascii=False)
    if not result.termination.ok or content is None:
        content = (
            f"the sub-agent {name!r} ended {result.termination.value} "
            f"without an accepted answer" + (f": {content}" if content else "")
        )
    return ToolOutput(
        content=content,
        is_error=not result.termination.ok,
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        cost_usd=result.usage.cost_usd,
        child_run_id=result.run_id,
        child_termination=result.termination.value,
    )
