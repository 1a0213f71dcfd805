"""One logical model call, as the run sees it: a request to the ModelActor and its replies.

The ModelActor owns transport retries (see docs/concepts/round.md); this side turns its
replies into events and charges, and owns what the actor cannot: a ModelActor
that crashes on a request fails it back here as a transient provider error.
It counts as an attempt and is retried with the provider's backoff on the
restarted actor, which carries on counting attempts where the crash left
them. Past ``max_provider_attempts`` the run ends ``provider_failed``; when
the actor is down for good (past its restart intensity) the run ends
``crashed``.

The reply channel carries a closed union (:data:`~tether.actors.ModelReply`),
matched exhaustively below.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, assert_never

import anyio
import anyio.lowlevel
import attrs

import tether.runtime._events as ev
from tether.actors import (
    ActorCrashed,
    ActorFailed,
    ActorRef,
    AttemptStarted,
    GateWaited,
    ModelCall,
    ModelFailed,
    ModelReply,
    ReplyChannel,
    RetryScheduled,
)
from tether.providers import (
    Backoff,
    ContextWindowExceeded,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    StopReason,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageDelta,
)

from ._accounting import Accounts
from ._estimate import BYTES_PER_TOKEN, estimate_input, estimate_tokens, response_text
from ._limits import Termination
from ._log import provider_retry
from ._state import Decision
from ._trail import Trail

#: No usage charged yet in an attempt (frozen, so one for all; nothing to record).
_NOTHING = TokenUsage()


class _Crashed:
    """The actor died on the call (at attempt ``attempt``)."""

    __slots__ = ("attempt", "error")

    def __init__(self, error: ActorCrashed, attempt: int) -> None:
        self.error = error
        self.attempt = attempt


class ModelClient:
    """Sends a run's model calls to its ModelActor."""

    __slots__ = (
        "_accounts",
        "_actor",
        "_backoff",
        "_before",
        "_max_attempts",
        "_may_act",
        "_trail",
    )

    def __init__(
        self,
        actor: ActorRef[ModelCall],
        *,
        trail: Trail,
        accounts: Accounts,
        max_attempts: int,
        backoff: Backoff,
        may_act: Callable[[], bool] | None = None,
    ) -> None:
        self._actor = actor
        # A durable run's fence, asked before each attempt is sent (ModelCall.may_act).
        self._may_act = may_act
        self._trail = trail
        self._accounts = accounts
        self._max_attempts = max_attempts
        self._backoff = backoff
        #: Attempts an earlier provider of a fallback chain spent on the call in flight.
        self._before = 0

    def close(self) -> None:
        """Close the actor's mailbox: it ends once idle."""
        self._actor.close()

    def call(self, request: ModelRequest) -> Coroutine[Any, Any, ModelResponse | Decision]:
        """The provider's response, or the run's ending when the call cannot give one.

        Not a coroutine function itself: the first attempt's coroutine is the
        call (one frame fewer while it is in flight); a crash retries from there.
        """
        trail, meter = self._trail, self._accounts.meter
        meter.model_calls += 1
        meter.provider_attempts += 1
        trail.note(ev.ModelCallStarted, attempt=1, max_tokens=request.max_tokens)
        return self._send(request, 1)

    async def _after_crash(
        self, request: ModelRequest, crashed: _Crashed
    ) -> ModelResponse | Decision:
        """The actor died on the call: end the run, or retry on the restarted actor."""
        trail, error, attempt = self._trail, crashed.error, crashed.attempt
        trail.add(ev.ChildCrashed(**trail.head(), actor="model", error=error.traceback))
        if error.gave_up:
            why = f"the model actor gave up after repeated crashes; the last:\n{error.traceback}"
            return Decision.end(Termination.CRASHED, why)
        if attempt >= self._max_attempts:
            why = f"ActorCrashed: the model actor crashed on attempt {attempt}:\n"
            why += error.traceback
            return Decision.end(Termination.PROVIDER_FAILED, why)
        wait = self._backoff.wait(attempt - self._before)
        retry = ev.ProviderRetry(
            **trail.head(),
            error_type="actor_crashed",
            attempt=attempt,
            wait_s=wait,
            message="the model actor crashed on this request; it was restarted",
        )
        trail.add(retry)
        provider_retry(retry)
        await anyio.sleep(wait)
        self._accounts.meter.provider_attempts += 1
        trail.add(
            ev.ModelCallStarted(**trail.head(), attempt=attempt + 1, max_tokens=request.max_tokens)
        )
        return await self._send(request, attempt + 1)

    def _finished(self, response: ModelResponse) -> ModelResponse:
        # Its fields are read off the (frozen) response when the event is first read.
        self._trail.note_from(ev.ModelCallFinished, _finished_fields, response)
        return response

    def _failed(self, error: BaseException) -> Decision:
        """The run's ending when the provider failed for good (a hook for the fallback)."""
        return Decision.end(Termination.PROVIDER_FAILED, f"{type(error).__name__}: {error}")

    async def _send(self, request: ModelRequest, first: int) -> ModelResponse | Decision:
        accounts, trail, meter = self._accounts, self._trail, self._accounts.meter
        reply: ReplyChannel[ModelReply] = ReplyChannel(16)
        attempt = first
        # Usage of the current attempt charged so far (reports are cumulative). It
        # is recorded as one UsageCharged per attempt, also when the call is cut
        # short by a ceiling or a cancellation, so usage always equals the charges.
        seen = _NOTHING
        # No usage report yet in this attempt: tether estimates (see _estimate).
        # While a budget applies, streamed text is charged by its estimate as it
        # arrives, so a ceiling can cut a stream that never reports usage.
        reported = False
        estimating = accounts.bounded
        input_estimate: int | None = None
        streamed_bytes = 0
        call = ModelCall(
            request=request,
            max_attempts=self._max_attempts,
            reply=reply,
            first_attempt=first,
            attempts_before=self._before,
            may_act=self._may_act,
        )
        crashed: _Crashed | None = None
        try:
            try:
                await self._actor.send(call)
            except ActorCrashed as gone:
                crashed = _Crashed(gone, attempt)
            while crashed is None:
                # reply.receive(), inlined: no coroutine per item, one frame less parked.
                try:
                    item = reply.receive_nowait()
                except anyio.WouldBlock:
                    item = None  # wait below: a frame parked in a handler keeps the exception
                except anyio.EndOfStream:
                    # Closed unanswered: the actor died with the request (had the
                    # run been cancelled, the checkpoint would raise that instead).
                    await anyio.lowlevel.checkpoint_if_cancelled()
                    stopped = ActorCrashed("model", "the model actor stopped without an answer")
                    crashed = _Crashed(stopped, attempt)
                    break
                if item is None:
                    await reply.wait_receivable()
                    continue
                match item:
                    case TextDelta() | ReasoningDelta():
                        # Thinking tokens are output tokens: reasoning is estimated as text is.
                        if trail.streaming:  # someone reads deltas (else: none is built)
                            _live(trail, item, meter.model_calls - 1, attempt)
                        if estimating:
                            streamed_bytes += len(item.text.encode("utf-8", "replace"))
                            output = -(-streamed_bytes // BYTES_PER_TOKEN)
                            if output > seen.output_tokens:
                                if reported:
                                    inputs = seen.input_tokens
                                elif input_estimate is None:
                                    inputs = input_estimate = estimate_input(request)
                                else:
                                    inputs = input_estimate
                                estimate = attrs.evolve(
                                    seen, input_tokens=inputs, output_tokens=output, estimated=True
                                )
                                accounts.charge_stream(estimate, seen)
                                seen = estimate
                                crossed = accounts.crossed()
                                if crossed is not None:
                                    return Decision.end(crossed)
                    case UsageDelta():
                        reported = True
                        accounts.charge_stream(item.usage, seen)
                        seen = item.usage
                        crossed = accounts.crossed()
                        if crossed is not None:
                            # Abandoning the reply (finally, below) cuts the stream.
                            return Decision.end(crossed)
                    case ModelResponse():
                        item = _counted(item, request, input_estimate)
                        accounts.charge_stream(item.usage, seen)
                        accounts.record("model", item.usage, accounts.cost(item.usage))
                        seen = _NOTHING
                        return self._finished(item)
                    case ToolCallDelta():  # after the common items: they pay no check for it
                        if trail.streaming:
                            _live(trail, item, meter.model_calls - 1, attempt)
                    case RetryScheduled():
                        accounts.record("model", seen, accounts.cost(seen))
                        seen = _NOTHING
                        reported = False
                        streamed_bytes = 0
                        retry = ev.ProviderRetry(
                            **trail.head(),
                            error_type=item.error_type,
                            attempt=item.attempt,
                            wait_s=item.wait_s,
                            message=item.message,
                        )
                        trail.add(retry)
                        provider_retry(retry)
                    case AttemptStarted():
                        attempt = item.attempt
                        meter.provider_attempts += 1
                        trail.add(
                            ev.ModelCallStarted(
                                **trail.head(), attempt=item.attempt, max_tokens=request.max_tokens
                            )
                        )
                    case GateWaited():
                        trail.add(
                            ev.ProviderWait(
                                **trail.head(), wait_s=item.wait_s, reason="provider gate paused"
                            )
                        )
                    case ModelFailed(error=ContextWindowExceeded() as too_long):
                        # docs/concepts/round.md: the prompt is too long, as a stop reason would
                        # say: the run trims once, then ends context_exceeded.
                        return self._finished(_context_exceeded(too_long))
                    case ModelFailed(error=error):
                        return self._failed(error)
                    case ActorFailed():
                        crashed = _Crashed(item.error, attempt)
                    case _:
                        assert_never(item)
        finally:
            reply.abandon()
            if seen is not _NOTHING:
                accounts.record("model", seen, accounts.cost(seen))
        return await self._after_crash(request, crashed)


class HeldModelClient(ModelClient):
    """A run's model calls when it shares a bounded Runtime budget: each call holds
    its output against that budget while in flight (see :mod:`._accounting`).

    A subclass, chosen once per run, so that other runs pay nothing for it.
    """

    __slots__ = ()

    async def call(self, request: ModelRequest) -> ModelResponse | Decision:
        accounts = self._accounts
        held = await accounts.hold(request)
        if isinstance(held, Termination):
            return Decision.end(held)
        try:
            return await super().call(held)
        finally:
            accounts.release()


def _finished_fields(response: ModelResponse) -> dict[str, Any]:
    """The own fields of the ``ModelCallFinished`` that ``response`` ends a call with."""
    return {
        "stop_reason": response.stop_reason.value,
        "usage": response.usage,
        "text": response.text,
        "tool_calls": response.tool_calls,
        "raw_stop_reason": response.raw_stop_reason,
        "model": response.model,
        "reasoning": response.reasoning,
    }


def _live(
    trail: Trail,
    item: TextDelta | ToolCallDelta | ReasoningDelta,
    call_index: int,
    attempt: int,
) -> None:
    """Hand a provider's delta to the run's delta readers, live (docs/guides/streaming.md)."""
    if isinstance(item, TextDelta):
        trail.delta(
            ev.TextDelta(
                **trail.delta_head(), text=item.text, call_index=call_index, attempt=attempt
            )
        )
    elif isinstance(item, ReasoningDelta):
        trail.delta(
            ev.ReasoningDelta(
                **trail.delta_head(), text=item.text, call_index=call_index, attempt=attempt
            )
        )
    else:
        trail.delta(
            ev.ToolCallDelta(
                **trail.delta_head(),
                call_id=item.call_id,
                name=item.name,
                arguments_delta=item.arguments_delta,
                call_index=call_index,
                attempt=attempt,
            )
        )


def _context_exceeded(error: ContextWindowExceeded) -> ModelResponse:
    """The response a refusal for length stands for: no content, its stop reason."""
    return ModelResponse(
        content=(),
        stop_reason=StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED,
        raw_stop_reason=f"{type(error).__name__}: {error}",
    )


def _counted(
    response: ModelResponse, request: ModelRequest, input_estimate: int | None
) -> ModelResponse:
    """``response`` with each count its provider left out (a zero beside an answer)
    estimated, reusing the stream's ``input_estimate``; itself when nothing is missing."""
    usage = response.usage
    has_input = usage.input_tokens or usage.cache_read_tokens or usage.cache_write_tokens
    if (has_input and usage.output_tokens) or not response.content:
        return response
    if has_input:
        input_tokens = usage.input_tokens
    elif input_estimate is None:
        input_tokens = estimate_input(request)
    else:
        input_tokens = input_estimate
    output_tokens = usage.output_tokens or estimate_tokens(response_text(response))
    counted = attrs.evolve(
        usage, input_tokens=input_tokens, output_tokens=output_tokens, estimated=True
    )
    return attrs.evolve(response, usage=counted)
