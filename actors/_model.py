"""The model actor: provider calls, streaming, and transport retries with backoff.

A :class:`ModelCall` gets replies in parts on its reply channel: provider
deltas (:class:`~tether.providers.TextDelta`, :class:`~tether.providers.ToolCallDelta`,
:class:`~tether.providers.UsageDelta`),
a :class:`RetryScheduled` before each backoff wait and an
:class:`AttemptStarted` after it, a :class:`GateWaited` when
the provider's gate held the call, and last either the
:class:`~tether.providers.ModelResponse` or a :class:`ModelFailed`.

A requester that stops listening (abandons its reply channel) cancels the call:
the next send fails, and the provider's stream is closed. That is how the run
cuts a stream that crossed a ceiling.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import attrs

from tether.providers import (
    HttpPoolLike,
    MalformedResponse,
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderContext,
    ProviderError,
    RateLimited,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    TransientProviderError,
    UsageDelta,
    bound_response,
)

from ._actor import ActorFailed
from ._channel import ReplyChannel
from ._gate import ProviderGate


@attrs.frozen(kw_only=True)
class RetryScheduled:
    error_type: str
    message: str
    attempt: int
    wait_s: float


@attrs.frozen(kw_only=True)
class AttemptStarted:
    """Sent after a backoff wait, as attempt ``attempt`` (2 or more) begins."""

    attempt: int


@attrs.frozen(kw_only=True)
class GateWaited:
    wait_s: float


@attrs.frozen(kw_only=True)
class ModelFailed:
    error: BaseException


#: Everything a :class:`ModelCall`'s reply channel can carry: the closed union
#: the run matches on.
ModelReply = (
    TextDelta
    | ToolCallDelta
    | ReasoningDelta
    | UsageDelta
    | ModelResponse
    | RetryScheduled
    | AttemptStarted
    | GateWaited
    | ModelFailed
    | ActorFailed
)


@attrs.frozen(kw_only=True)
class ModelCall:
    """Call the provider with ``request``, retrying transport errors.

    ``first_attempt`` numbers the first attempt of this call: a call resent
    after the actor crashed goes on counting from where the crash left it.
    ``attempts_before`` are the attempts an earlier provider of a fallback
    chain spent on the same logical call: the numbers go on from there (up to
    ``max_attempts``, which counts them), but this provider's backoff starts
    from its own first attempt.
    """

    request: ModelRequest
    max_attempts: int
    reply: ReplyChannel[ModelReply]
    first_attempt: int = 1
    attempts_before: int = 0
    #: Asked right before each attempt is sent (a durable run's fence: may it still
    #: act?). No: the attempt is not sent, and the call ends unanswered; the fence
    #: has stopped the run. ``None``: always yes.
    may_act: Callable[[], bool] | None = attrs.field(default=None, eq=False)


class ProviderBug(ProviderError):
    """A provider raised something that is not a ProviderError (a parser bug)."""


class ModelActor:
    """Calls one provider for one run; owns the provider attempt count."""

    __slots__ = ("_calls", "_gate", "_http", "_provider", "_run_id")

    def __init__(
        self,
        provider: Provider,
        run_id: str,
        gate: ProviderGate | None,
        http: HttpPoolLike | None,
        first_call: int = 0,
    ) -> None:
        self._provider = provider
        self._run_id = run_id
        self._gate = gate
        self._http = http
        # ProviderContext.call_index of the next request: a resumed run goes on counting.
        self._calls = first_call

    async def handle(self, call: ModelCall) -> None:
        # The whole call (its retries included) in this frame and each attempt in
        # one more: the chain a parked run holds is as short as it can be.
        reply = call.reply
        try:
            attempt = call.first_attempt - 1
            while True:
                attempt += 1
                try:
                    await self._attempt(call)
                    return
                except TransientProviderError as exc:
                    if self._gate is not None and isinstance(exc, RateLimited) and exc.retry_after:
                        # Everyone on this provider waits it out (capped like our own backoff).
                        self._gate.pause(min(exc.retry_after, self._provider.backoff.cap))
                    if attempt >= call.max_attempts:
                        await reply.send(ModelFailed(error=exc))
                        return
                    wait = self._provider.backoff.wait(
                        attempt - call.attempts_before, exc.retry_after
                    )
                    await reply.send(
                        RetryScheduled(
                            error_type=exc.error_type,
                            message=str(exc),
                            attempt=attempt,
                            wait_s=wait,
                        ),
                    )
                    await anyio.sleep(wait)
                    await reply.send(AttemptStarted(attempt=attempt + 1))
                except ProviderError as exc:
                    await reply.send(ModelFailed(error=exc))
                    return
                except anyio.BrokenResourceError:
                    raise
                except Exception as exc:
                    # User code (a provider's parser) failed: a message, never an unwind.
                    bug = ProviderBug(f"provider {self._provider.name!r} raised {exc!r}")
                    bug.__cause__ = exc
                    await reply.send(ModelFailed(error=bug))
                    return
        except anyio.BrokenResourceError:
            pass  # the requester stopped listening: the call is over
        finally:
            reply.close()

    async def _attempt(self, call: ModelCall) -> None:
        """One provider attempt: a gate slot (if any), the stream, each item sent on."""
        ctx = ProviderContext(run_id=self._run_id, call_index=self._calls, http=self._http)
        self._calls += 1
        gate = self._gate
        if gate is not None and not gate.acquire_nowait():
            await gate.acquire()
        try:
            if gate is not None:
                # Checked with the slot held: a run queued for the slot while another
                # run got a 429 must still wait the pause out before sending.
                waited = await gate.wait_open()
                if waited:
                    await call.reply.send(GateWaited(wait_s=waited))
            if call.may_act is not None and not call.may_act():
                return  # fenced: not sent (the run is stopping; see ModelCall.may_act)
            stream = self._provider.stream(call.request, ctx)
            reply = call.reply
            try:
                async for item in stream:
                    if isinstance(item, ModelResponse):
                        # Whatever the provider: no tool input nested too deep enters a history.
                        item = bound_response(item)
                    try:
                        reply.send_nowait(item)
                    except anyio.WouldBlock:
                        await reply.send(item)  # the requester is behind: wait for room
                    if isinstance(item, ModelResponse):
                        return
            finally:
                # What contextlib.aclosing does, without its two extra coroutines a call.
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
            raise MalformedResponse("the provider's stream ended without a response")
        finally:
            if gate is not None:
                gate.release()
