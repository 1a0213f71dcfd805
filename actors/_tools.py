"""The tool actor: argument validation, timeouts, error classes, parallel calls.

The run decides *whether* a call runs (unknown tool, repeat, policy); this
actor runs the ones it is handed and classifies what happens:

- a model mistake (bad arguments, :class:`ToolError`): ``model_error``, an
  is_error result the model can act on;
- a transient failure (:class:`TransientToolError`, ``TimeoutError``,
  ``ConnectionError``, the call's own timeout): retried with backoff up to
  ``max_retries`` times, then ``transient_error`` or ``timeout``;
- a fatal failure (:class:`FatalToolError`, ``PermissionError``, a result that
  cannot be serialized): ``fatal_error``, which ends the run.

A result may hold images: a ``tether.Image``, or a list of ``str`` and
``Image`` parts (its text is the str parts, joined by newlines; the images
follow it in the tool_result).

Anything else is the classifier's call; the default treats it as a model
mistake, so the model sees ``ValueError: ...`` and may try differently.
Calls of one request run concurrently (bounded per run); tools marked
``sequential`` run afterwards, one at a time, in the model's order.
Sync tools run in daemon threads (:mod:`._threads`); on cancellation or
timeout the call is abandoned at once (its slot freed, its late result
discarded), though Python cannot stop the thread itself.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from typing import Any, Literal, Protocol, Self

import anyio
import attrs
import sniffio

from tether.providers import Backoff, Image, ToolUseBlock

from . import _spawn
from ._actor import ActorFailed
from ._channel import ReplyChannel
from ._context import _CONTEXT, RunContext, ToolOutput
from ._threads import ToolThreads
from ._tool_errors import FatalToolError, ToolArgumentsInvalid, ToolError, TransientToolError
from ._toolspec import ToolResultUnserializable, ToolSpec, image_result, serialize_result

#: Results that may carry images (a tether.Image, or a list of str and Image parts).
_MAY_HOLD_IMAGES = (Image, list, tuple)

ErrorClass = Literal["model", "transient", "fatal"]
Classifier = Callable[[BaseException], ErrorClass]
Outcome = Literal["ok", "model_error", "transient_error", "fatal_error", "timeout", "cancelled"]


def default_classifier(exc: BaseException) -> ErrorClass:
    """The default error classes (see docs/guides/tools.md)."""
    if isinstance(exc, ToolError):
        return "model"
    if isinstance(exc, TransientToolError | TimeoutError | ConnectionError):
        return "transient"
    if isinstance(exc, FatalToolError | PermissionError):
        return "fatal"
    return "model"


@attrs.frozen(kw_only=True)
class ToolInvocation:
    call: ToolUseBlock
    spec: ToolSpec


@attrs.frozen(kw_only=True)
class RunTools:
    invocations: tuple[ToolInvocation, ...]
    reply: ReplyChannel[ToolReply]
    #: The run's context for these calls; each call gets it with its ``call_id`` set
    #: (used as it is when that is set already: a batch of one call).
    context: RunContext[Any] | None = None
    #: Asked right before each attempt of each call starts (a durable run's fence: may
    #: it still act?). No: the call is not started, and ends ``cancelled``; the fence
    #: has stopped the run. ``None``: always yes.
    may_act: Callable[[], bool] | None = attrs.field(default=None, eq=False)


@attrs.frozen(kw_only=True)
class ToolDone:
    call_id: str
    name: str
    outcome: Outcome
    content: str
    attempts: int
    #: Set when the tool returned a :class:`ToolOutput`.
    output: ToolOutput | None = None
    #: The images of a result with images (``content`` is then its text).
    images: tuple[Image, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.outcome != "ok"


#: What a :class:`RunTools` reply channel can carry.
ToolReply = ToolDone | ActorFailed


@attrs.frozen(kw_only=True)
class ToolSettings:
    """How a run's tools execute (set on the :class:`~tether.Agent`)."""

    #: Timeout of a call whose tool sets none.
    default_timeout_s: float = 60.0
    #: Calls of one round running at once.
    max_parallel: int = 8
    backoff: Backoff = attrs.field(factory=lambda: Backoff(initial=0.1, cap=5.0))
    classifier: Classifier = default_classifier

    def __attrs_post_init__(self) -> None:
        if not self.default_timeout_s > 0:
            raise ValueError(f"default_timeout_s must be > 0, got {self.default_timeout_s!r}")
        if self.max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {self.max_parallel!r}")


class ToolActor:
    __slots__ = (
        "_armed",
        "_attempt",
        "_clock",
        "_cut_context",
        "_limiter",
        "_max_retries",
        "_may_act",
        "_run_timeout_s",
        "_settings",
        "_threads",
        "_timeout_scope",
    )

    def __init__(
        self,
        settings: ToolSettings,
        max_retries: int,
        threads: ToolThreads,
        *,
        run_timeout_s: float | None = None,
    ) -> None:
        self._settings = settings
        self._max_retries = max_retries
        # The run's own timeout (Limits.timeout_s): its deadline is at most that far away.
        self._run_timeout_s = run_timeout_s
        # Made on the first round with several calls: most rounds have one.
        self._limiter: anyio.Semaphore | None = None
        self._threads = threads
        # Made in the actor's task (its supervisor calls the factory): the backend is known.
        self._timeout_scope, self._clock = _timeout_scopes()
        # Arms the scope the supervisor serves this actor in (see scope), once made.
        self._armed: _Armed | None = None
        # The attempt in flight in that scope, and its call's context: what cut resumes.
        self._attempt = 0
        self._cut_context: RunContext[Any] | None = None
        # The fence of the request in hand (RunTools.may_act): one request at a time.
        self._may_act: Callable[[], bool] | None = None

    def scope(self) -> _Scope:
        """The cancel scope the actor's supervisor serves it in (``actors._base.Timed``).

        A lone call (the common case) re-arms the scope's deadline for each attempt,
        instead of entering a timeout scope of its own; the deadline is infinite between
        attempts. When it cuts an attempt, the supervisor leaves the scope and calls
        :meth:`cut`, which finishes the call as a timed-out attempt is finished, and
        makes a fresh scope. The calls of a batch keep a timeout scope each.
        """
        life = self._timeout_scope()
        self._armed = _armed(life, self._clock)
        return life

    async def cut(self, request: RunTools) -> None:
        """Finish ``request``, whose lone call's attempt ``self._attempt`` the actor's
        scope cut at its deadline: its timeout outcome, or its retries (each in a
        timeout scope of its own), exactly as :meth:`_execute` goes on after a timeout."""
        self._may_act = request.may_act
        with request.reply, contextlib.suppress(anyio.BrokenResourceError):
            (invocation,) = request.invocations
            context = self._cut_context
            token = _CONTEXT.set(context)
            try:
                done = await self._execute(invocation, context, None, self._attempt)
            finally:
                _CONTEXT.reset(token)
            request.reply.send_nowait(done)

    async def handle(self, request: RunTools) -> None:
        invocations = request.invocations
        armed = self._armed
        self._may_act = request.may_act
        if armed is not None and len(invocations) == 1:
            # The common case: one call, timed by the actor's scope. Not ``with
            # request.reply``: a call the deadline cut is answered by cut, and a
            # reply left open by a cancellation is closed by the supervisor.
            reply = request.reply
            try:
                done = await self._run_one(invocations[0], request.context, armed)
            except Exception:
                reply.close()  # a crash: the supervisor fails the request
                raise
            try:  # noqa: SIM105 (suppress() costs three calls more a round)
                reply.send_nowait(done)
            except anyio.BrokenResourceError:
                pass  # the run stopped listening
            reply.close()
            return
        # A run that stopped listening (it was cancelled) wants no more results:
        # a send that finds the channel abandoned ends the batch quietly.
        with request.reply, contextlib.suppress(anyio.BrokenResourceError):
            if len(invocations) == 1:
                # The common case: one call, nothing to bound or to cancel beside it.
                request.reply.send_nowait(await self._run_one(invocations[0], request.context))
                return
            answered: set[str] = set()
            if self._limiter is None:
                self._limiter = anyio.Semaphore(self._settings.max_parallel)
            limiter = self._limiter
            # A fatal error ends the run: the calls still running are cancelled
            # (and answered ``cancelled``) rather than waited for.
            with anyio.CancelScope() as batch:

                async def run(invocation: ToolInvocation) -> None:
                    async with limiter:
                        done = await self._run_one(invocation, request.context)
                    try:
                        # The reply buffer holds one result per call: this never blocks.
                        request.reply.send_nowait(done)
                    except anyio.BrokenResourceError:
                        batch.cancel("the run stopped listening")
                        return
                    answered.add(done.call_id)
                    if done.outcome == "fatal_error":
                        batch.cancel(f"tool {done.name!r} failed fatally")

                parallel = [i for i in invocations if not i.spec.sequential]
                if parallel:
                    async with anyio.create_task_group() as tg:
                        for invocation in parallel:
                            tg.start_soon(run, invocation)
                for invocation in invocations:
                    if invocation.spec.sequential:
                        await run(invocation)
            if batch.cancel_called:
                for invocation in invocations:
                    if invocation.call.id not in answered:
                        request.reply.send_nowait(_cancelled(invocation))

    async def _run_one(
        self,
        invocation: ToolInvocation,
        context: RunContext[Any] | None,
        armed: _Armed | None = None,
    ) -> ToolDone:
        if context is not None and context.call_id != invocation.call.id:
            context = RunContext(  # not attrs.evolve: it is several times slower
                run_id=context.run_id,
                call_id=invocation.call.id,
                deps=context.deps,
                run_child=context.run_child,
                remaining_tokens=context.remaining_tokens,
                remaining_cost_usd=context.remaining_cost_usd,
                epoch=context.epoch,
                output_sink=context.output_sink,
            )
        token = _CONTEXT.set(context)
        try:
            return await self._execute(invocation, context, armed)
        finally:
            _CONTEXT.reset(token)

    async def _execute(
        self,
        invocation: ToolInvocation,
        context: RunContext[Any] | None,
        armed: _Armed | None = None,
        cut: int = 0,
    ) -> ToolDone:
        """Run one call: its attempts, each bounded by the call's timeout.

        With ``armed``, each attempt re-arms the actor's scope (see :meth:`scope`);
        otherwise each enters a timeout scope of its own. ``cut`` is the attempt the
        actor's scope cut, when :meth:`cut` resumes the call after it.
        """
        call, spec = invocation.call, invocation.spec
        try:
            kwargs = spec.validate(call.input)
        except ToolArgumentsInvalid as exc:
            return _done(call, "model_error", str(exc), 0)
        if spec.context_parameter is not None:
            # A tool that asked for its RunContext (its first parameter) gets it by name.
            kwargs[spec.context_parameter] = context or RunContext(run_id="", call_id=call.id)

        timeout = spec.timeout_s or self._settings.default_timeout_s
        # A run deadline nearer than the call's timeout (and so than every retry's) cancels
        # the call first: its own scope could never fire. No clock read: the deadline is
        # at most the run's timeout away.
        run_timeout = self._run_timeout_s
        bounded = run_timeout is None or run_timeout >= timeout
        if cut:
            message = f"tool {spec.name!r} timed out after {timeout:g}s"
            if cut > self._max_retries:
                return _done(call, "timeout", message, cut)
            await anyio.sleep(self._settings.backoff.wait(cut))
        elif armed is not None and bounded:
            self._cut_context = context
            armed.timeout = timeout
        else:
            armed = None
        attempt = cut
        may_act = self._may_act
        while True:
            if may_act is not None and not may_act():
                return _done(call, "cancelled", FENCED, attempt)
            attempt += 1
            failure: Outcome
            if armed is not None:
                self._attempt = attempt  # what cut resumes from, if this one is cut
            with (
                armed
                if armed is not None
                else self._timeout_scope(deadline=self._clock() + timeout)
                if bounded
                else _NO_TIMEOUT
            ) as scope:
                try:
                    if spec.is_async:
                        value = await spec.fn(**kwargs)
                    else:
                        value = await self._threads.run(functools.partial(spec.fn, **kwargs))
                except Exception as exc:
                    kind = self._classify(exc)
                    message = _describe(exc)
                    if kind == "model":
                        return _done(call, "model_error", message, attempt)
                    if kind == "fatal":
                        return _done(call, "fatal_error", message, attempt)
                    failure = "transient_error"
                    if isinstance(exc, TransientToolError) and not exc.retry:
                        return _done(call, failure, message, attempt)
                else:
                    if isinstance(value, ToolOutput):
                        outcome: Outcome = "model_error" if value.is_error else "ok"
                        return _done(call, outcome, value.content, attempt, value)
                    try:
                        if isinstance(value, _MAY_HOLD_IMAGES) and (parts := image_result(value)):
                            return _done(call, "ok", parts[0], attempt, images=parts[1])
                        content = serialize_result(value)
                    except ToolResultUnserializable as exc:
                        return _done(call, "fatal_error", f"tool {spec.name!r}: {exc}", attempt)
                    return _done(call, "ok", content, attempt)
            if scope.cancelled_caught:
                failure, message = "timeout", f"tool {spec.name!r} timed out after {timeout:g}s"
            if attempt > self._max_retries:
                return _done(call, failure, message, attempt)
            await anyio.sleep(self._settings.backoff.wait(attempt))

    def _classify(self, exc: Exception) -> ErrorClass:
        try:
            kind = self._settings.classifier(exc)
        except Exception:
            return "fatal"  # a broken classifier must not hide a failure as success
        return kind if kind in ("model", "transient", "fatal") else "fatal"


def _timeout_scopes() -> tuple[Callable[..., _Scope], Callable[[], float]]:
    """The class of a call's timeout scope (made with ``deadline=``) and the clock that
    deadline is on, for the backend running now: what ``anyio.move_on_after`` makes,
    without looking the backend up again for every call.

    - trio: trio's own scope and clock. anyio's trio scopes are trio's behind a
      wrapper; a native one nests with them as one of theirs would and gives
      ``anyio.current_effective_deadline()`` the same deadline.
    - asyncio, on an anyio release in ``_spawn.CHECKED_ANYIO``: anyio's asyncio scope
      class, made directly as its backend's ``create_cancel_scope`` makes it, and the
      loop's clock (anyio's ``current_time`` there).
    - anything else (another anyio, no running loop): ``anyio.CancelScope`` and
      ``anyio.current_time``, the public pair ``move_on_after`` stands for.
    """
    # sniffio's first test, read directly, as _channel does.
    if sniffio.thread_local.name == "trio":
        import trio  # here: only on trio, where it is loaded already

        return trio.CancelScope, trio.current_time
    if _spawn._CHECKED or (_spawn._CHECKED is None and _spawn.anyio_checked()):
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            from anyio._backends._asyncio import CancelScope

            return CancelScope, loop.time
    return anyio.CancelScope, anyio.current_time


class _Scope(Protocol):
    """What a call's timeout scope offers ``_execute``."""

    @property
    def cancelled_caught(self) -> bool: ...

    @property
    def cancel_called(self) -> bool: ...

    deadline: float

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: Any) -> bool | None: ...


class _Armed:
    """An attempt timed by the actor's scope: entering arms its deadline (``timeout``
    away), leaving disarms it. A cut leaves the actor's scope, so no cancellation is ever
    caught here."""

    __slots__ = ("_clock", "scope", "timeout")
    cancelled_caught = False

    def __init__(self, scope: _Scope, clock: Callable[[], float]) -> None:
        self.scope = scope
        self._clock = clock
        self.timeout = math.inf

    def __enter__(self) -> _Armed:
        self.scope.deadline = self._clock() + self.timeout
        return self

    def __exit__(self, *exc: object) -> None:
        self.scope.deadline = math.inf


class _LazyArmed(_Armed):
    """:class:`_Armed` for anyio's asyncio scope (on an anyio in ``_spawn.CHECKED_ANYIO``),
    without a loop timer per attempt.

    The deadline is the scope's ``_deadline`` (what ``anyio.current_effective_deadline``
    reads). The scope's own timer (``_timeout``, on the loop at ``_timeout_handle``)
    is moved only when the new deadline comes before it, or it has gone off: a timer
    that goes off early finds the later deadline and re-arms itself for it, and one
    that finds the deadline disarmed (infinite) does nothing. So a stream of short
    calls under a 60 s timeout sets one timer a minute, not one a call.
    """

    __slots__ = ("_due",)

    def __init__(self, scope: _Scope, clock: Callable[[], float]) -> None:
        super().__init__(scope, clock)
        # When the scope's timer goes off (or went off): +inf while none is set.
        self._due = math.inf

    def __enter__(self) -> _Armed:
        scope: Any = self.scope
        now = self._clock()
        deadline = scope._deadline = now + self.timeout
        due = self._due
        if deadline < due or due <= now:
            handle = scope._timeout_handle
            if handle is not None:
                handle.cancel()
            scope._timeout()  # anyio's own: cancels at once if due, else sets its timer
            self._due = deadline
        return self

    def __exit__(self, *exc: object) -> None:
        self.scope._deadline = math.inf  # type: ignore[attr-defined]


def _armed(scope: _Scope, clock: Callable[[], float]) -> _Armed:
    """How the actor's scope is armed for an attempt, for the backend running now."""
    if type(scope).__module__ == "anyio._backends._asyncio" and (
        _spawn._CHECKED or (_spawn._CHECKED is None and _spawn.anyio_checked())
    ):
        return _LazyArmed(scope, clock)
    return _Armed(scope, clock)


class _NoTimeout:
    """In place of a call's timeout scope where the run's deadline comes first."""

    __slots__ = ()
    cancelled_caught = False

    def __enter__(self) -> _NoTimeout:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_TIMEOUT = _NoTimeout()


def _done(
    call: ToolUseBlock,
    outcome: Outcome,
    content: str,
    attempts: int,
    output: ToolOutput | None = None,
    images: tuple[Image, ...] = (),
) -> ToolDone:
    return ToolDone(
        call_id=call.id,
        name=call.name,
        outcome=outcome,
        content=content,
        attempts=attempts,
        output=output,
        images=images,
    )


#: A call the fence refused (``RunTools.may_act``): its run may no longer act.
FENCED = "not run: this Runtime may no longer act on the run (its lease may have lapsed)"


def _cancelled(invocation: ToolInvocation) -> ToolDone:
    return _done(
        invocation.call, "cancelled", "cancelled: another call of this round failed fatally", 0
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ToolError | TransientToolError | FatalToolError):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"
