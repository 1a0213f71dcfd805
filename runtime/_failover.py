"""A run's model client, and provider fallback: walking a ``FallbackProvider``'s chain.

:func:`model_client` picks the run's client once, at its start, so that a run
pays only for what its agent uses: a plain :class:`~._modelcall.ModelClient`,
one that holds against the Runtime's budget, or one of those that walks a
chain.

Why the run walks the chain, not the model actor nor the provider: every
provider of a chain must keep what it has alone, which lives in three places.
Its attempts and backoff are a model actor's (see docs/concepts/round.md), so each provider gets
its own actor, with its own gate (concurrency, 429 pauses) and its own request
count (``ProviderContext.call_index``); the next one is spawned on the first
switch, so a run that never falls over pays one actor, as any run. Its price
and its default ``max_tokens`` are the run's accounts': a switch re-clamps the
request at the next provider's price, and re-holds it against the Runtime's
budget, before the same request is sent again. And the events are the run's.
A provider of its own (``FallbackProvider.stream``) could do none of that.

On a switch the run records ``ProviderFallback`` and then a
``ModelCallStarted`` whose attempt number goes on from the last one (so
every consumer that keys on attempts, a delta reader first, sees the call
start over), and stays on the new provider for its later calls. The new
provider still has ``max_provider_attempts`` of its own, and its backoff
starts from its own first attempt. The logical call is still one
model call (``Usage.model_calls``); every request sent is a provider attempt.
When the last provider fails too, the run ends ``provider_failed`` with an
error naming each provider's failure. A response that stops ``refusal``
also goes on to the next provider (docs/concepts/round.md: a fallback is tried before the
run ends ``refusal``); the refused call stays in the trail (its
``ModelCallFinished`` and charge), and ``ProviderFallback.error_type`` says
``refusal``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

import tether.runtime._events as ev
from tether.actors import ActorRef, ModelActor, ModelCall
from tether.providers import (
    FallbackProvider,
    ModelRequest,
    ModelResponse,
    Provider,
    StopReason,
    falls_through,
)

from ._accounting import Accounts
from ._limits import Limits, Termination
from ._log import provider_fallback
from ._modelcall import HeldModelClient, ModelClient
from ._state import Decision
from ._trail import Trail

if TYPE_CHECKING:
    from ._services import RuntimeServices

#: How a run spawns one of its children: a name and the actor's factory.
Spawn = Callable[[str, Callable[[], ModelActor]], ActorRef[ModelCall]]


def model_client(
    provider: Provider,
    run_id: str,
    *,
    services: RuntimeServices,
    spawn: Spawn,
    trail: Trail,
    accounts: Accounts,
    limits: Limits,
    may_act: Callable[[], bool] | None = None,
) -> ModelClient:
    """The run's model client, and its first model actor (spawned now); ``may_act`` is a
    durable run's fence, asked before each attempt is sent (``ModelCall.may_act``)."""
    chain = provider.providers if isinstance(provider, FallbackProvider) else (provider,)

    def actor(target: Provider, first_call: int = 0) -> ActorRef[ModelCall]:
        gate, http = services.gate_for(target), services.http
        # A partial, not a lambda: two tracked objects a run holds, not a closure's seven.
        return spawn("model", functools.partial(ModelActor, target, run_id, gate, http, first_call))

    # A resumed run's requests go on from its checkpoint's count (a scripted provider
    # indexes its script with it); a fresh run's count is 0.
    ref = actor(chain[0], accounts.meter.provider_attempts)
    attempts = limits.max_provider_attempts
    if len(chain) == 1:
        client = HeldModelClient if accounts.holds else ModelClient
        return client(
            ref,
            trail=trail,
            accounts=accounts,
            max_attempts=attempts,
            backoff=provider.backoff,
            may_act=may_act,
        )
    fallback = HeldFallbackModelClient if accounts.holds else FallbackModelClient
    return fallback(
        ref,
        trail=trail,
        accounts=accounts,
        max_attempts=attempts,
        chain=chain,
        spawn=actor,
        may_act=may_act,
    )


def _named(provider: Provider) -> str:
    return f"{provider.name}:{provider.model}"


class FallbackModelClient(ModelClient):
    """Model calls on a chain of providers: the next one takes the same request
    when the current one fails for good with a failure another might not have."""

    __slots__ = ("_cap", "_chain", "_failure", "_index", "_spawn")

    def __init__(
        self,
        actor: ActorRef[ModelCall],
        *,
        trail: Trail,
        accounts: Accounts,
        max_attempts: int,
        chain: tuple[Provider, ...],
        spawn: Callable[[Provider], ActorRef[ModelCall]],
        may_act: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(
            actor,
            trail=trail,
            accounts=accounts,
            max_attempts=max_attempts,
            backoff=chain[0].backoff,
            may_act=may_act,
        )
        self._chain = chain
        self._cap = max_attempts
        self._index = 0
        self._spawn = spawn
        self._failure: BaseException | None = None

    @property
    def provider(self) -> Provider:
        """The provider the run's calls go to now."""
        return self._chain[self._index]

    def _failed(self, error: BaseException) -> Decision:
        self._failure = error
        return super()._failed(error)

    async def call(self, request: ModelRequest) -> ModelResponse | Decision:
        trail, meter = self._trail, self._accounts.meter
        meter.model_calls += 1
        failures: list[str] = []
        # Attempts are numbered on across the chain (a delta reader sees the text
        # start over at a new number); each provider still has ``cap`` of its own.
        start, cap = meter.provider_attempts, self._cap
        self._before, self._max_attempts = 0, cap
        while True:
            meter.provider_attempts += 1
            first = self._before + 1
            trail.add(
                ev.ModelCallStarted(**trail.head(), attempt=first, max_tokens=request.max_tokens)
            )
            self._failure = None
            outcome = await self._send(request, first)
            failure, self._failure = self._failure, None
            last = self._index + 1 == len(self._chain)
            if failure is None:
                if (
                    last
                    or not isinstance(outcome, ModelResponse)
                    or outcome.stop_reason is not StopReason.REFUSAL
                ):
                    return outcome  # answered, or ended for a reason of the run's own
                # docs/concepts/round.md: a refusal tries the next provider before the run ends.
                switched = await self._switch(request, "refusal", outcome.text)
            else:
                failures.append(f"{_named(self.provider)}: {type(failure).__name__}: {failure}")
                if last or not falls_through(failure):
                    if len(failures) == 1:
                        return outcome
                    why = f"every provider tried failed: {'; '.join(failures)}"
                    return Decision.end(Termination.PROVIDER_FAILED, why)
                error_type = getattr(failure, "error_type", type(failure).__name__)
                switched = await self._switch(request, error_type, str(failure))
            if isinstance(switched, Decision):
                return switched
            request = switched
            self._before = meter.provider_attempts - start
            self._max_attempts = self._before + cap

    async def _switch(
        self, request: ModelRequest, error_type: str, message: str
    ) -> ModelRequest | Decision:
        """Move to the next provider: its actor, backoff and price; the request re-clamped."""
        old = self.provider
        self._actor.close()  # idle now (it answered): it ends, the run stays on the new one
        self._index += 1
        new = self.provider
        self._actor = self._spawn(new)
        self._backoff = new.backoff
        default_max = getattr(new, "max_tokens", None)
        accounts = self._accounts
        accounts.retarget(new.price(), default_max if isinstance(default_max, int) else None)
        trail = self._trail
        fallback = ev.ProviderFallback(
            **trail.head(),
            from_model=old.model,
            to_model=new.model,
            error_type=error_type,
            from_provider=old.name,
            to_provider=new.name,
            message=message,
        )
        trail.add(fallback)
        provider_fallback(fallback)
        ceiling = accounts.before_call()  # the new price may leave the budget nothing to buy
        if ceiling is not None:
            return Decision.end(ceiling)
        return await self._reclamp(request)

    async def _reclamp(self, request: ModelRequest) -> ModelRequest | Decision:
        cap = self._accounts.clamp()
        return request if cap == request.max_tokens else attrs.evolve(request, max_tokens=cap)


class HeldFallbackModelClient(HeldModelClient, FallbackModelClient):
    """A chain's calls when the run shares a bounded Runtime budget: each holds its
    output (:class:`HeldModelClient`'s ``call``, around the chain's) at the price
    of the provider it goes to."""

    __slots__ = ()

    async def _reclamp(self, request: ModelRequest) -> ModelRequest | Decision:
        accounts = self._accounts
        accounts.release()
        held = await accounts.hold(request)
        return Decision.end(held) if isinstance(held, Termination) else held
