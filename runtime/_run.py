"""The Run supervisor: owns the state, the round loop, every transition and the termination.

A run is preparation, a loop of rounds, and assembly (DESIGN §3)::

    preparation:  input policy → memory recall → tool catalogue
    round:        context → model → response policy → tool policy + execution
                  → judgement → decision (round_end policy, ceilings, transition)
    assembly:     output, usage, judgement, termination, events → RunResult

The Run's children (model, tools, judge actors) live in the Run's task group,
inside the Run's cancel scope; they talk to it only through their mailboxes
and the reply channels carried by each request. The Run alone changes the run
state and decides when the run ends. Ceilings are outcomes, not exceptions.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from tether.actors import (
    ActorCrashed,
    ActorFailed,
    ActorRef,
    AttemptStarted,
    GateWaited,
    JudgeActor,
    JudgeCandidate,
    JudgeDone,
    ModelActor,
    ModelCall,
    ModelFailed,
    ReplyChannel,
    RetryScheduled,
    RunTools,
    ToolActor,
    ToolContext,
    ToolDone,
    ToolError,
    ToolInvocation,
    ToolOutput,
    ToolSpec,
    spawn_mailbox,
    supervise,
)
from tether.providers import (
    Message,
    ModelRequest,
    ModelResponse,
    Price,
    StopReason,
    TokenUsage,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
    UsageDelta,
)

from . import _events as ev
from ._budget import Budget, Hit, least
from ._discovery import SEARCH_TOOL, search_catalogue
from ._judging import Candidate, Judgement
from ._limits import Termination, Usage, UsageMeter
from ._policy import PolicyPoint, Verdict, as_check
from ._result import RunResult

if TYPE_CHECKING:
    from ._agent import Agent
    from ._runtime import RuntimeServices

#: The user message that asks a model cut off by ``max_tokens`` to go on.
CONTINUE_PROMPT = "Continue exactly where you stopped, without repeating anything."
REPEAT_NUDGE = (
    "You already made this exact call (same tool, same arguments) in the previous round; "
    "its result is above. Use that result, or call with different arguments."
)


class EventStream:
    """An async iterator over a run's events: replay, then live.

    A plain iterator object rather than an async generator, so a reader may
    stop early (``break``) without leaving a generator to finalize.
    """

    __slots__ = ("_index", "_run")

    def __init__(self, run: Run) -> None:
        self._run = run
        self._index = 0

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ev.Event:
        run = self._run
        if self._index >= len(run.trail):
            await run.wait_for_event(self._index)
            if self._index >= len(run.trail):
                raise StopAsyncIteration
        event = run.trail[self._index]
        self._index += 1
        return event


@attrs.define(kw_only=True)
class Approval:
    """A tool call waiting for the host's answer."""

    call: ToolUseBlock
    reason: str
    answered: anyio.Event = attrs.field(factory=anyio.Event)
    approved: bool | None = None
    note: str | None = None


@attrs.frozen(kw_only=True)
class RunView:
    """A read-only view of a run, given to ``round_end`` policies."""

    run_id: str
    agent: str
    round: int
    usage: Usage
    messages: tuple[Message, ...]
    candidate: str | None
    judgement: Judgement | None


@attrs.frozen
class _Decision:
    kind: str  # "continue", "retry", "complete"
    reason: str
    termination: Termination | None = None


class _Blocked(Exception):
    """A policy blocked the run; carries the reason. Internal control flow."""


class Run:
    """One run: a supervisor actor. Created by :meth:`Runtime.start`."""

    # Slots: thousands of runs may be parked at once; no per-run __dict__.
    __slots__ = (
        "_approvals",
        "_budgets",
        "_cancel_reason",
        "_candidate",
        "_catalogue",
        "_checks",
        "_done",
        "_error",
        "_forced",
        "_in_flight",
        "_judge",
        "_judgement",
        "_model",
        "_output",
        "_partial",
        "_previous_calls",
        "_price",
        "_results",
        "_round",
        "_round_calls",
        "_scope",
        "_services",
        "_sink",
        "_started",
        "_stop_requested",
        "_system",
        "_termination",
        "_tg",
        "_tool_actor",
        "_tool_defs",
        "_tools",
        "_trimmed",
        "_waiter",
        "agent",
        "events",
        "id",
        "input",
        "messages",
        "meter",
        "parent_run_id",
        "result",
    )

    def __init__(
        self,
        services: RuntimeServices,
        agent: Agent,
        input: str,
        run_id: str,
        parent_run_id: str | None = None,
    ) -> None:
        self.id = run_id
        self.agent = agent
        self.input = input
        self.parent_run_id = parent_run_id
        self.events: list[ev.Event] = []
        self.messages: list[Message] = []
        self.meter = UsageMeter()
        self.result: RunResult | None = None
        # Made when someone waits for the result (most runs are awaited once, at the end).
        self._done: anyio.Event | None = None
        self._services = services
        self._sink = services.sink
        self._round = 0
        self._waiter: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._cancel_reason: str | None = None
        self._error: str | None = None
        self._output: str | None = None
        self._judgement: Judgement | None = None
        self._candidate: str | None = None
        self._partial = ""
        self._trimmed = False
        self._previous_calls = _NO_CALLS
        self._in_flight: dict[str, ToolUseBlock] = {}
        self._approvals: dict[str, Approval] = {}
        self._stop_requested = False
        self._started: float | None = None  # when admitted (anyio.current_time())
        self._termination: Termination | None = None  # decided by the loop
        self._forced: Hit | None = None
        limits = agent.limits
        self._budgets = [
            b
            for b in (
                Budget(max_total_tokens=limits.max_total_tokens, max_cost_usd=limits.max_cost_usd),
                services.budget,
            )
            if b is not None and b.bounded
        ]
        # The calls of the round being executed and their results so far.
        self._round_calls: Sequence[ToolUseBlock] = ()
        self._results: dict[str, ToolResultBlock] = {}
        self._tools: dict[str, ToolSpec] = {t.name: t for t in agent.tools}
        self._catalogue: dict[str, ToolSpec] = {}
        self._tool_defs: tuple[ToolDef, ...] | None = None
        self._checks = [as_check(p) for p in agent.policies]
        self._system = agent.instructions
        # Looked up once: a dated model id is matched against the whole price table.
        self._price = agent.provider.price()
        self._model: ActorRef[Any] | None = None
        self._tool_actor: ActorRef[Any] | None = None
        self._judge: ActorRef[Any] | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    # ------------------------------------------------------------------ events

    def _emit(self, cls: type[ev.Event], **fields: Any) -> None:
        self._push(
            cls(run_id=self.id, seq=len(self.events), round=self._round, at=time.time(), **fields)
        )

    def _push(self, event: ev.Event) -> None:
        self.events.append(event)
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None
        if self._sink is not None:
            self._sink(event)

    @property
    def trail(self) -> Sequence[ev.Event]:
        """Every event so far (once finished, the result's: the run lets go of its own)."""
        return self.events if self.result is None else self.result.events

    def follow(self) -> EventStream:
        """Every event from the first, then live ones, until ``RunFinished``."""
        return EventStream(self)

    async def wait_finished(self) -> None:
        """Wait until the run has its result."""
        if self.result is None:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()

    async def wait_for_event(self, count: int) -> None:
        """Wait until the run has more than ``count`` events or has finished."""
        while self.result is None and len(self.events) <= count:
            if self._waiter is None:
                self._waiter = anyio.Event()
            await self._waiter.wait()

    # ------------------------------------------------------------ cancellation

    def stop(self) -> None:
        """Finish the current round, then end ``cancelled`` with reason "stopped"."""
        self._stop_requested = True

    def pending_approvals(self) -> list[Approval]:
        return [a for a in self._approvals.values() if not a.answered.is_set()]

    def cancel(self, reason: str) -> None:
        if self.result is not None or self._cancel_reason is not None:
            return
        self._cancel_reason = reason or "cancelled"
        if self._scope is not None:
            self._scope.cancel(f"run {self.id}: {self._cancel_reason}")

    # --------------------------------------------------------------- lifecycle

    async def main(self, *, admit: bool = True) -> None:
        """The run's task: wait for admission, run, and always finish exactly once.

        A sub-agent's run passes ``admit=False``: it runs inside its parent's
        slot, so a full Runtime cannot deadlock a parent waiting on its child.

        One cancel scope covers the wait for admission and the execution; the
        run's deadline is set on it once the run is admitted.
        """
        scope = self._scope = anyio.CancelScope()
        try:
            with scope:
                if self._cancel_reason is not None:
                    scope.cancel(f"run {self.id}: {self._cancel_reason}")
                if admit:
                    async with self._services.admission():
                        await self._execute(scope)
                else:
                    await self._execute(scope)
        finally:
            if self.result is None:
                self._conclude(scope.cancelled_caught)

    async def _execute(self, scope: anyio.CancelScope) -> None:
        """Run the loop in the run's task group; it sets ``_termination`` unless cancelled."""
        timeout = self.agent.limits.timeout_s
        self._emit(
            ev.RunStarted,
            agent=self.agent.name,
            input=self.input,
            parent_run_id=self.parent_run_id,
            provider=getattr(self.agent.provider, "name", None),
            model=getattr(self.agent.provider, "model", None),
        )
        self._started = anyio.current_time()
        if timeout is not None:
            scope.deadline = self._started + timeout
        try:
            async with anyio.create_task_group() as tg:
                self._start_children(tg)
                try:
                    # Kept on the run, not returned: a cancellation that lands
                    # while the group exits must not lose the loop's decision.
                    self._termination = await self._loop()
                finally:
                    self._stop_children()
        except Exception:
            self._error = traceback.format_exc()
            self._termination = Termination.CRASHED

    def _conclude(self, caught: bool) -> None:
        """Finish with the loop's termination, or say why the run was cut short."""
        if self._termination is not None:
            self._finish(self._termination, self._error)
        elif self._forced is not None:
            self._finish_forced(self._forced)
        elif self._cancel_reason is not None:
            self._finish(Termination.CANCELLED, self._cancel_reason)
        elif caught and self._started is not None:
            # Nothing else cancels the run's own scope: its deadline passed.
            timeout = float(self.agent.limits.timeout_s or 0)
            used = anyio.current_time() - self._started
            self._emit(ev.CeilingHit, ceiling="timeout_s", limit=timeout, used=used)
            self._finish(Termination.DEADLINE, None)
        else:
            # Cancelled from outside the Runtime (the Runtime's group, a caller).
            self._finish(Termination.CANCELLED, "cancelled from outside")

    def _start_children(self, tg: anyio.abc.TaskGroup) -> None:
        # The model actor starts with the run; the tool and judge actors on first
        # use (many runs never call a tool or are never judged: a parked run costs
        # one child task, not three). start_soon, not start: there is no await
        # between making a mailbox and handing it to its task, so a cancellation
        # cannot strand a stream; the mailbox buffers, so the Run may send at once.
        self._tg = tg
        agent, services = self.agent, self._services
        gate, http = services.gate_for(agent.provider), services.http
        self._model = self._spawn("model", lambda: ModelActor(agent.provider, self.id, gate, http))

    def _spawn(self, name: str, factory: Callable[[], Any]) -> ActorRef[Any]:
        assert self._tg is not None
        ref, box = spawn_mailbox(name, 1)
        self._tg.start_soon(
            supervise, name, factory, box, self.agent.restart, name=f"{self.id}:{name}"
        )
        return ref

    def _tools_actor(self) -> ActorRef[Any]:
        if self._tool_actor is None:
            settings, retries = self.agent.tool_settings, self.agent.limits.max_tool_retries
            threads = self._services.threads
            self._tool_actor = self._spawn("tools", lambda: ToolActor(settings, retries, threads))
        return self._tool_actor

    def _judge_actor(self) -> ActorRef[Any]:
        if self._judge is None:
            judge = self.agent.judge
            assert judge is not None
            self._judge = self._spawn("judge", lambda: JudgeActor(judge, self.id))
        return self._judge

    def _stop_children(self) -> None:
        # Closing a mailbox ends its actor's loop once it is idle; the Run waits
        # for replies before going on, so every actor is idle here unless the run
        # is being cancelled, and then the cancel scope stops them anyway.
        for ref in (self._model, self._tool_actor, self._judge):
            if ref is not None:
                ref.close()

    def _finish_forced(self, hit: Hit) -> None:
        self._emit(ev.CeilingHit, ceiling=hit.ceiling, limit=hit.limit, used=hit.used)
        self._finish(hit.termination, f"the Runtime's budget was spent ({hit.ceiling})")

    def _finish(self, termination: Termination, error: str | None) -> None:
        # A run that ended mid-execution still answers every tool_use it got.
        for call in self._in_flight.values():
            self._settle(call, "cancelled", "the run ended before this call finished", 0)
        self._in_flight.clear()
        self._cancel_undecided("the run ended before this call ran")
        self._close_round_calls()
        output = None
        if termination in (Termination.ANSWERED, Termination.QUALITY_EXHAUSTED):
            output = self._candidate
        elif termination in (Termination.TERMINAL_TOOL, Termination.MAX_CONTINUES):
            output = self._output
        usage = self.meter.freeze()
        self._emit(ev.RunFinished, termination=termination, usage=usage, output=output, error=error)
        judgement = self._judgement
        self.result = RunResult(
            run_id=self.id,
            output=output,
            termination=termination,
            passed=None if judgement is None else judgement.passed,
            judgement=judgement,
            usage=usage,
            messages=tuple(self.messages),
            events=tuple(self.events),
            error=error,
        )
        # A finished run keeps its result, not its machinery: handles may keep
        # thousands of finished runs, and the garbage collector walks them all.
        self.events, self.messages = [], []
        self._scope = self._tg = self._model = self._tool_actor = self._judge = None
        if self._done is not None:
            self._done.set()
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None
        self._services.run_finished(self)

    # -------------------------------------------------------------- the loop

    async def _loop(self) -> Termination:
        self._stage_in("input")
        try:
            await self._check_policies(PolicyPoint.INPUT, self.input)
        except _Blocked as blocked:
            self._stage_out("input")
            return self._blocked(blocked)
        self._stage_out("input")

        self._stage_in("memory")
        await self._recall()
        self._stage_out("memory")

        self._stage_in("tools")
        self._prepare_tools()
        self._stage_out("tools")

        self.messages.append(Message.user(self.input))
        ceiling = self._check_budget()
        if ceiling is not None:
            return ceiling
        while True:
            self._round += 1
            decision = await self._round_body()
            self._stage_in("decide")
            if decision.termination is None or decision.termination.ok:
                try:
                    await self._check_policies(PolicyPoint.ROUND_END, self._view)
                except _Blocked as blocked:
                    decision = _Decision("complete", "policy_blocked", self._blocked(blocked))
            if decision.termination is None:
                ceiling = self._check_budget()
                if ceiling is not None:
                    decision = _Decision("complete", ceiling.value, ceiling)
            if decision.termination is None and self._stop_requested:
                self._error = "stopped"
                decision = _Decision("complete", "stopped", Termination.CANCELLED)
            self._emit(ev.Transition, kind=decision.kind, reason=decision.reason)
            self._stage_out("decide")
            if decision.termination is not None:
                return decision.termination

    async def _round_body(self) -> _Decision:
        self._stage_in("context")
        request = self._build_request()
        self._stage_out("context")

        self._stage_in("model")
        outcome = await self._call_model(request)
        self._stage_out("model")
        if isinstance(outcome, Termination):
            return _Decision("complete", outcome.value, outcome)
        response = outcome
        self.meter.steps += 1
        # The candidate lives for this round only: set from this response.
        self._candidate = None

        if self._checks:
            self._stage_in("policy")
            try:
                await self._check_policies(PolicyPoint.RESPONSE, response)
            except _Blocked as blocked:
                self._stage_out("policy")
                return _Decision("complete", "policy_blocked", self._blocked(blocked))
            self._stage_out("policy")

        stop = response.stop_reason
        calls = response.tool_calls
        if stop is StopReason.MAX_TOKENS:
            if calls:
                # A tool call cut off mid-arguments is never run.
                self._error = f"the response hit max_tokens inside tool call {calls[-1].name!r}"
                return _Decision("complete", "truncated_tool_call", Termination.TRUNCATED_TOOL_CALL)
            return self._continue_text(response)
        if calls:
            return await self._execute_tools(response)
        if stop in (StopReason.END_TURN, StopReason.STOP_SEQUENCE):
            self._candidate = self._partial + response.text
            self._partial = ""
            self.messages.append(Message(role="assistant", content=response.content))
            if self.agent.judge is None:
                return _Decision("complete", "answered", Termination.ANSWERED)
            return await self._judge_candidate()
        if stop is StopReason.PAUSE_TURN:
            self.messages.append(Message(role="assistant", content=response.content))
            return _Decision("continue", "pause_turn")
        if stop is StopReason.REFUSAL:
            self._error = response.text or None
            return _Decision("complete", "refusal", Termination.REFUSAL)
        if stop is StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED:
            trimmed = None if self._trimmed else self.agent.context.trim(self.messages)
            if trimmed is None:
                return _Decision("complete", "context_exceeded", Termination.CONTEXT_EXCEEDED)
            self._trimmed = True
            self.messages[:] = trimmed
            return _Decision("continue", "context_trimmed")
        self._error = f"unknown stop reason {response.raw_stop_reason!r}"
        return _Decision("complete", "unknown_stop_reason", Termination.UNKNOWN_STOP_REASON)

    # ------------------------------------------------------------ preparation

    async def _recall(self) -> None:
        store = self.agent.memory
        if store is None or not self.agent.recall_limit:
            return
        try:
            lessons = await store.recall(self.agent.scope, self.agent.recall_limit)
        except Exception as exc:
            # Lessons help a run; a broken store must not end it.
            self._emit(ev.MemoryFailed, operation="recall", error=f"{type(exc).__name__}: {exc}")
            return
        self._emit(ev.LessonsRecalled, lesson_ids=tuple(lesson.id for lesson in lessons))
        if lessons:
            notes = "\n\n".join(lesson.as_prompt() for lesson in lessons)
            self._system = (
                f"{self._system}\n\nLessons from earlier runs (newest first):\n{notes}".lstrip()
            )

    def _prepare_tools(self) -> None:
        """Choose the active tools: the whole catalogue, or ``search_tools`` first."""
        agent = self.agent
        if agent.discovery == "first" or (
            agent.discovery == "auto" and len(agent.tools) > agent.discovery_threshold
        ):
            self._catalogue = {t.name: t for t in agent.tools}
            self._tools = {SEARCH_TOOL.name: SEARCH_TOOL}
            self._tool_defs = None

    def _search_tools(self, call: ToolUseBlock) -> None:
        """Answer ``search_tools`` and promote what it found for later rounds."""
        try:
            query = SEARCH_TOOL.validate(call.input)["query"]
        except ToolError as exc:
            self._settle(call, "model_error", str(exc), 1)
            return
        found = search_catalogue(self._catalogue.values(), query)
        for spec in found:
            if spec.name not in self._tools:
                self._tools[spec.name] = spec
                self._tool_defs = None
        content = json.dumps(
            [{"name": t.name, "description": t.description} for t in found], ensure_ascii=False
        )
        self._settle(call, "ok", content if found else "no tool matches; try other words", 1)

    # -------------------------------------------------------------- context

    def _build_request(self) -> ModelRequest:
        return ModelRequest(
            system=self._system,
            messages=tuple(self.messages),
            tools=self._tool_definitions(),
            max_tokens=self._clamp_max_tokens(),
        )

    def _tool_definitions(self) -> tuple[ToolDef, ...]:
        # Built once per change of the active tools (discovery), not every round.
        if self._tool_defs is None:
            self._tool_defs = tuple(spec.definition() for spec in self._tools.values())
        return self._tool_defs

    def _clamp_max_tokens(self) -> int | None:
        """The output cap that keeps every budget (the run's, the Runtime's) whole.

        Output is clamped to what the tightest budget has left, in tokens and in
        cost at the model's output price; so a call can overshoot a ceiling only
        by its own input.
        """
        cap: int | None = None
        price = self._price
        for budget in self._budgets:
            left = budget.remaining_tokens()
            if left is not None:
                cap = left if cap is None else min(cap, left)
            money = budget.remaining_cost()
            if money is not None and price is not None and price.output > 0:
                by_cost = int(money * 1_000_000 / price.output)
                cap = by_cost if cap is None else min(cap, by_cost)
        default = getattr(self.agent.provider, "max_tokens", None)
        if cap is not None and isinstance(default, int):
            cap = min(cap, default)
        return cap

    def _check_budget(self) -> Termination | None:
        """End the run when a ceiling is reached, or the budget cannot buy one output token."""
        limits, meter = self.agent.limits, self.meter
        if meter.steps >= limits.max_steps:
            self._emit(ev.CeilingHit, ceiling="max_steps", limit=limits.max_steps, used=meter.steps)
            return Termination.MAX_STEPS
        for budget in self._budgets:
            hit = budget.exhausted()
            if hit is None and budget.max_cost_usd is not None and self._clamp_max_tokens() == 0:
                hit = Hit(
                    f"{budget.name}max_cost_usd",
                    budget.max_cost_usd,
                    budget.cost_usd,
                    Termination.COST_CEILING,
                )
            if hit is not None:
                return self._hit(hit, budget)
        return None

    def _crossed(self) -> Termination | None:
        """The ceiling a charge just pushed past, if any (checked as usage streams in)."""
        for budget in self._budgets:
            hit = budget.crossed()
            if hit is not None:
                return self._hit(hit, budget)
        return None

    def _hit(self, hit: Hit, budget: Budget) -> Termination:
        self._emit(ev.CeilingHit, ceiling=hit.ceiling, limit=hit.limit, used=hit.used)
        if budget is self._services.budget:
            self._services.budget_crossed(self, hit)
        return hit.termination

    def force_end(self, hit: Hit) -> None:
        """End the run now for a ceiling it does not own (the Runtime's budget)."""
        if self.result is not None or self._forced is not None:
            return
        self._forced = hit
        if self._scope is not None:
            self._scope.cancel(f"run {self.id}: the Runtime's budget is spent ({hit.ceiling})")

    def _add(self, input_tokens: int, output_tokens: int, cost: float | None, shared: bool) -> None:
        """Charge the run's usage and budgets; ``shared`` also charges the Runtime's."""
        self.meter.charge(input_tokens, output_tokens, cost)
        for budget in self._budgets:
            if shared or budget is not self._services.budget:
                budget.charge(input_tokens + output_tokens, cost)

    # ---------------------------------------------------------------- model

    async def _call_model(self, request: ModelRequest) -> ModelResponse | Termination:
        assert self._model is not None
        meter, limits = self.meter, self.agent.limits
        reply: ReplyChannel[Any] = ReplyChannel(16)
        meter.model_calls += 1
        meter.provider_attempts += 1
        self._emit(ev.ModelCallStarted, attempt=1, max_tokens=request.max_tokens)
        # Usage of the current attempt charged so far (reports are cumulative). It
        # is recorded as one UsageCharged per attempt, also when the call is cut
        # short by a ceiling or a cancellation, so usage always equals the charges.
        seen = TokenUsage()
        price = self._price
        try:
            await self._model.send(
                ModelCall(request=request, max_attempts=limits.max_provider_attempts, reply=reply)
            )
            while True:
                try:
                    item = await reply.receive()
                except anyio.EndOfStream:
                    break
                if isinstance(item, (UsageDelta, ModelResponse)):
                    self._charge(item.usage, seen, price)
                    seen = item.usage
                    if isinstance(item, ModelResponse):
                        self._charged("model", seen, _cost(price, seen))
                        seen = TokenUsage()
                        self._emit(
                            ev.ModelCallFinished,
                            stop_reason=item.stop_reason.value,
                            usage=item.usage,
                            text=item.text,
                            tool_calls=item.tool_calls,
                            raw_stop_reason=item.raw_stop_reason,
                            model=item.model,
                        )
                        return item
                    crossed = self._crossed()
                    if crossed is not None:
                        # Abandoning the reply (finally, below) cuts the stream.
                        return crossed
                elif isinstance(item, RetryScheduled):
                    self._charged("model", seen, _cost(price, seen))
                    seen = TokenUsage()
                    self._emit(
                        ev.ProviderRetry,
                        error_type=item.error_type,
                        attempt=item.attempt,
                        wait_s=item.wait_s,
                        message=item.message,
                    )
                elif isinstance(item, AttemptStarted):
                    meter.provider_attempts += 1
                    self._emit(
                        ev.ModelCallStarted, attempt=item.attempt, max_tokens=request.max_tokens
                    )
                elif isinstance(item, GateWaited):
                    self._emit(ev.ProviderWait, wait_s=item.wait_s, reason="provider gate paused")
                elif isinstance(item, ModelFailed):
                    error = item.error
                    self._error = f"{type(error).__name__}: {error}"
                    return Termination.PROVIDER_FAILED
                elif isinstance(item, ActorFailed):
                    self._emit(ev.ChildCrashed, actor="model", error=item.error.traceback)
                    self._error = item.error.traceback
                    return Termination.CRASHED
            self._error = "the model actor stopped without an answer"
            return Termination.CRASHED
        finally:
            reply.abandon()
            self._charged("model", seen, _cost(price, seen))

    def _charge(self, usage: TokenUsage, seen: TokenUsage, price: Price | None) -> None:
        """Charge what ``usage`` adds to ``seen`` (usage reports are cumulative)."""
        fresh = max(0, usage.input_tokens - seen.input_tokens)
        output = max(0, usage.output_tokens - seen.output_tokens)
        cache_read = max(0, usage.cache_read_tokens - seen.cache_read_tokens)
        cache_write = max(0, usage.cache_write_tokens - seen.cache_write_tokens)
        input_tokens = fresh + cache_read + cache_write
        if input_tokens or output:
            added = TokenUsage(
                input_tokens=fresh,
                output_tokens=output,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            )
            self._add(input_tokens, output, _cost(price, added), shared=True)

    def _charged(self, source: str, usage: TokenUsage, cost: float | None) -> None:
        """Record one charge as an event; the run's usage is the sum of these."""
        input_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if input_tokens or usage.output_tokens:
            self._emit(
                ev.UsageCharged,
                source=source,
                input_tokens=input_tokens,
                output_tokens=usage.output_tokens,
                cost_usd=cost,
            )

    def _continue_text(self, response: ModelResponse) -> _Decision:
        limits = self.agent.limits
        self._partial += response.text
        if self.meter.continues >= limits.max_continues:
            self._output = self._partial or None
            self._emit(
                ev.CeilingHit,
                ceiling="max_continues",
                limit=limits.max_continues,
                used=self.meter.continues,
            )
            return _Decision("complete", "max_continues", Termination.MAX_CONTINUES)
        self.meter.continues += 1
        self.messages.append(Message(role="assistant", content=response.content))
        self.messages.append(Message.user(CONTINUE_PROMPT))
        return _Decision("continue", "max_tokens")

    # ---------------------------------------------------------------- tools

    async def _execute_tools(self, response: ModelResponse) -> _Decision:
        self.messages.append(Message(role="assistant", content=response.content))
        self._stage_in("execute")
        try:
            return await self._run_calls(response.tool_calls)
        finally:
            self._stage_out("execute")

    async def _run_calls(self, calls: Sequence[ToolUseBlock]) -> _Decision:
        """Decide each call (repeat, unknown, budget, policy, approval), then run the rest.

        Every call is decided before any runs, so a block at a later call stops
        the earlier ones too: no tool call follows a block.
        """
        limits, meter = self.agent.limits, self.meter
        previous = self._previous_calls
        keys = [(c.name, _canonical(c.input)) for c in calls]
        self._previous_calls = frozenset(keys)
        self._round_calls, self._results = calls, {}
        admitted: list[ToolUseBlock] = []
        asks: list[tuple[ToolUseBlock, str]] = []
        budget_hit = False
        for call in calls:
            self._emit(ev.ToolCallStarted, call_id=call.id, name=call.name, arguments=call.input)
        for call, key in zip(calls, keys, strict=True):
            if key in previous:
                self._settle(call, "nudged", REPEAT_NUDGE, 0)
            elif call.name not in self._tools:
                known = ", ".join(sorted(self._tools)) or "none"
                self._settle(
                    call, "model_error", f"unknown tool {call.name!r}; available tools: {known}", 0
                )
            elif limits.max_tool_calls is not None and meter.tool_calls >= limits.max_tool_calls:
                budget_hit = True
                self._settle(
                    call,
                    "denied",
                    f"not run: the run's tool call budget ({limits.max_tool_calls}) is spent",
                    0,
                )
            else:
                try:
                    verdict = await self._check_policies(
                        PolicyPoint.TOOL_CALL, call, call_id=call.id
                    )
                except _Blocked as blocked:
                    self._cancel_undecided("not run: the run was blocked by a policy")
                    self._close_round_calls()
                    return _Decision("complete", "policy_blocked", self._blocked(blocked))
                if verdict.kind == "deny":
                    self._settle(call, "denied", f"denied by policy: {verdict.reason}", 0)
                    continue
                meter.tool_calls += 1  # reserved now, so approvals cannot overspend
                if verdict.kind == "ask":
                    asks.append((call, verdict.reason or "approval required"))
                else:
                    admitted.append(call)
        if asks:
            admitted += await self._await_approvals(asks)
        runnable: list[ToolInvocation] = []
        for call in admitted:
            spec = self._tools[call.name]
            if spec is SEARCH_TOOL:
                self._search_tools(call)
            else:
                runnable.append(ToolInvocation(call=call, spec=spec))
        done = await self._run_tools(runnable) if runnable else []
        self._close_round_calls()
        crossed = self._crossed()
        if crossed is not None:
            return _Decision("complete", crossed.value, crossed)
        fatal = [d for d in done if d.outcome == "fatal_error"]
        if fatal:
            self._error = f"{fatal[0].name}: {fatal[0].content}"
            return _Decision("complete", "fatal_tool_error", Termination.FATAL_TOOL_ERROR)
        for d in done:
            if d.outcome == "ok" and self._tools[d.name].terminal:
                self._output = d.content
                return _Decision("complete", "terminal_tool", Termination.TERMINAL_TOOL)
        if budget_hit:
            self._emit(
                ev.CeilingHit,
                ceiling="max_tool_calls",
                limit=limits.max_tool_calls or 0,
                used=meter.tool_calls,
            )
            return _Decision("complete", "max_tool_calls", Termination.MAX_TOOL_CALLS)
        return _Decision("continue", "tool_use")

    def _cancel_undecided(self, why: str) -> None:
        for call in self._round_calls:
            if call.id not in self._results:
                self._settle(call, "cancelled", why, 0)

    async def _await_approvals(self, asks: list[tuple[ToolUseBlock, str]]) -> list[ToolUseBlock]:
        """Wait (within the run's deadline) for the host to approve or reject each call."""
        for call, reason in asks:
            self._approvals[call.id] = Approval(call=call, reason=reason)
            self._emit(
                ev.ApprovalRequested,
                call_id=call.id,
                name=call.name,
                arguments=call.input,
                reason=reason,
            )
        approved: list[ToolUseBlock] = []
        try:
            for call, _ in asks:
                approval = self._approvals[call.id]
                await approval.answered.wait()
                self._emit(
                    ev.ApprovalAnswered,
                    call_id=call.id,
                    approved=bool(approval.approved),
                    reason=approval.note,
                )
                if approval.approved:
                    approved.append(call)
                else:
                    self.meter.tool_calls -= 1
                    self._settle(call, "denied", f"rejected by the host: {approval.note}", 0)
        finally:
            for call, _ in asks:
                self._approvals.pop(call.id, None)
        return approved

    def answer(self, call_id: str, approved: bool, note: str | None) -> None:
        approval = self._approvals.get(call_id)
        if approval is None:
            waiting = ", ".join(self._approvals) or "none"
            raise KeyError(f"no approval is pending for call {call_id!r} (pending: {waiting})")
        if approval.answered.is_set():
            raise ValueError(f"call {call_id!r} was already answered")
        approval.approved, approval.note = approved, note
        approval.answered.set()

    async def _run_tools(self, invocations: list[ToolInvocation]) -> list[ToolDone]:
        actor = self._tools_actor()
        reply: ReplyChannel[Any] = ReplyChannel(len(invocations) + 1)
        # Calls sent to the tool actor and not answered yet (the run's finish
        # answers them ``cancelled`` if it ends mid-execution).
        pending = self._in_flight = {i.call.id: i.call for i in invocations}
        done: list[ToolDone] = []
        try:
            budgets = self._budgets
            context = ToolContext(
                run_id=self.id,
                services=self._services,
                remaining_tokens=least(b.remaining_tokens() for b in budgets) if budgets else None,
                remaining_cost_usd=least(b.remaining_cost() for b in budgets) if budgets else None,
            )
            await actor.send(RunTools(invocations=tuple(invocations), reply=reply, context=context))
            while True:
                try:
                    item = await reply.receive()
                except anyio.EndOfStream:
                    break
                if isinstance(item, ActorFailed):
                    self._emit(ev.ChildCrashed, actor="tools", error=item.error.traceback)
                    break
                call = pending.pop(item.call_id)
                if item.output is not None:
                    self._charge_tool(call, item.output)
                self._settle(call, item.outcome, item.content, item.attempts)
                done.append(item)
        finally:
            reply.abandon()
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
        return done

    def _charge_tool(self, call: ToolUseBlock, output: ToolOutput) -> None:
        """Charge what a tool reported spending (a sub-agent's usage) to this run.

        A child run already charged the Runtime's budget itself, so only the
        run's own budget is charged here.
        """
        if output.child_run_id is not None:
            self._emit(
                ev.ChildRunFinished,
                call_id=call.id,
                child_run_id=output.child_run_id,
                termination=output.child_termination or "",
            )
        if output.input_tokens or output.output_tokens or output.cost_usd:
            self._add(output.input_tokens, output.output_tokens, output.cost_usd, shared=False)
            usage = TokenUsage(input_tokens=output.input_tokens, output_tokens=output.output_tokens)
            self._charged("subagent", usage, output.cost_usd)

    def _settle(self, call: ToolUseBlock, outcome: str, content: str, attempts: int) -> None:
        is_error = outcome != "ok"
        self._emit(
            ev.ToolCallFinished,
            call_id=call.id,
            name=call.name,
            outcome=outcome,
            is_error=is_error,
            attempts=attempts,
            content=content,
        )
        self._results[call.id] = ToolResultBlock(
            tool_use_id=call.id, content=content, is_error=is_error
        )

    def _close_round_calls(self) -> None:
        """Answer the round's tool calls in the model's order: the pairing rule."""
        if self._round_calls:
            results = tuple(self._results[c.id] for c in self._round_calls)
            self.messages.append(Message(role="user", content=results))
            self._round_calls, self._results = (), {}

    # ---------------------------------------------------------------- judge

    async def _judge_candidate(self) -> _Decision:
        judge = self._judge_actor()
        assert self._candidate is not None
        limits, meter = self.agent.limits, self.meter
        self._stage_in("judge")
        candidate = Candidate(text=self._candidate, question=self.input, round=self._round)
        channel: ReplyChannel[Any] = ReplyChannel(1)
        try:
            await judge.send(JudgeCandidate(candidate=candidate, reply=channel))
            reply = await channel.receive()
        except anyio.EndOfStream:
            reply = ActorFailed(ActorCrashed("judge", "the judge actor stopped without answering"))
        finally:
            channel.abandon()
        if isinstance(reply, ActorFailed):
            self._stage_out("judge")
            self._emit(ev.ChildCrashed, actor="judge", error=reply.error.traceback)
            self._error = reply.error.traceback
            return _Decision("complete", "crashed", Termination.CRASHED)
        assert isinstance(reply, JudgeDone)
        if reply.usage is not None:
            self._add(
                reply.usage.input_tokens
                + reply.usage.cache_read_tokens
                + reply.usage.cache_write_tokens,
                reply.usage.output_tokens,
                reply.cost_usd,
                shared=True,
            )
            self._charged("judge", reply.usage, reply.cost_usd)
        judgement = reply.judgement
        self._judgement = judgement
        self._emit(
            ev.Judged,
            scores=dict(judgement.scores),
            passed=judgement.passed,
            feedback=dict(judgement.feedback),
            candidate_round=self._round,
            error=judgement.error,
        )
        if not judgement.passed:
            await self._store_lesson(judgement)
        self._stage_out("judge")
        if judgement.passed:
            return _Decision("complete", "answered", Termination.ANSWERED)
        if meter.quality_retries >= limits.max_quality_retries:
            return _Decision("complete", "quality_exhausted", Termination.QUALITY_EXHAUSTED)
        meter.quality_retries += 1
        self.messages.append(Message.user(_feedback_prompt(judgement)))
        return _Decision("retry", "judgement_failed")

    async def _store_lesson(self, judgement: Judgement) -> None:
        store = self.agent.memory
        if store is None:
            return
        feedback = judgement.feedback_text() or None
        try:
            lesson = await store.add(
                scope=self.agent.scope,
                question=self.input,
                feedback=feedback,
                answer=None if feedback else self._candidate,
                run_id=self.id,
            )
        except Exception as exc:
            self._emit(ev.MemoryFailed, operation="store", error=f"{type(exc).__name__}: {exc}")
            return
        self._emit(ev.LessonStored, lesson_id=lesson.id)

    # --------------------------------------------------------------- policy

    async def _check_policies(
        self, point: PolicyPoint, subject: Any, call_id: str | None = None
    ) -> Verdict:
        """Run every policy at ``point``; the first verdict other than allow wins.

        A policy that raises blocks the run (fail closed). Raises ``_Blocked``.
        """
        if not self._checks:
            return Verdict.allow()
        if point is PolicyPoint.ROUND_END:
            subject = subject()
        verdict = Verdict.allow()
        for check in self._checks:
            try:
                verdict = await check(point, subject)
            except Exception as exc:
                verdict = Verdict.block(f"policy raised {type(exc).__name__}: {exc}")
            if verdict.kind in ("deny", "ask") and point is not PolicyPoint.TOOL_CALL:
                # Denial and approval apply to a tool call; elsewhere they stop the run.
                verdict = Verdict.block(verdict.reason or verdict.kind)
            if verdict.kind != "allow":
                break
        self._emit(
            ev.PolicyChecked,
            point=point.value,
            verdict=verdict.kind,
            reason=verdict.reason,
            call_id=call_id,
        )
        if verdict.kind == "block":
            raise _Blocked(verdict.reason or "blocked")
        return verdict

    def _view(self) -> RunView:
        return RunView(
            run_id=self.id,
            agent=self.agent.name,
            round=self._round,
            usage=self.meter.freeze(),
            messages=tuple(self.messages),
            candidate=self._candidate,
            judgement=self._judgement,
        )

    def _blocked(self, blocked: _Blocked) -> Termination:
        self._error = f"blocked by policy: {blocked}"
        return Termination.POLICY_BLOCKED

    # --------------------------------------------------------------- stages

    # Stage events are most of a round's events: built directly, no keyword packing.
    def _stage_in(self, stage: ev.Stage) -> None:
        self._push(
            ev.StageEntered(
                run_id=self.id, seq=len(self.events), round=self._round, at=time.time(), stage=stage
            )
        )

    def _stage_out(self, stage: ev.Stage) -> None:
        self._push(
            ev.StageExited(
                run_id=self.id, seq=len(self.events), round=self._round, at=time.time(), stage=stage
            )
        )


def _cost(price: Price | None, usage: TokenUsage) -> float | None:
    return None if price is None else price.cost(usage)


#: No tool calls yet (one shared empty set: ``frozenset()`` makes a new one each time).
_NO_CALLS: frozenset[tuple[str, str]] = frozenset()

# Made once: json.dumps with options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr).encode


def _canonical(arguments: Any) -> str:
    try:
        return _CANONICAL(arguments)
    except (TypeError, ValueError):
        return repr(arguments)


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
