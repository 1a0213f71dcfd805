"""``FallbackProvider``: a chain of providers, each tried when the one before fails.

Inside a Runtime the chain is walked by the run, not by this class (see
``tether.runtime._failover``): each provider in it gets its own model actor,
so its own attempts (``Limits.max_provider_attempts`` each), its own
``backoff``, its own gate (concurrency and 429 pauses) and its own price. This
class holds the chain, answers the protocol's questions for the provider in
front (name, model, price, ``max_tokens``), and says which failures pass on
(:func:`falls_through`).

Its own :meth:`FallbackProvider.stream` serves callers outside a run (an
``LLMJudge``, a script): one attempt per provider, in order, passing on the
same failures, but only before the failing provider yielded anything (a
consumer cannot take back deltas it has already seen).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs

from ._errors import ProviderError, TransientProviderError
from ._types import Backoff, ModelRequest, Price, Provider, ProviderContext, StreamItem


def falls_through(error: BaseException) -> bool:
    """Whether another provider might answer where ``error``'s provider did not.

    Transient failures do (rate limited, overloaded, 5xx, timeouts, dropped
    connections, a stream cut off or malformed), once the provider's attempts
    are spent. Fatal ones do not: a 400 would be as invalid elsewhere, and a
    401, 403 or 404 is a configuration error to hear about, not to hide by
    paying another vendor; nor does a context-window refusal (the run trims).
    """
    return isinstance(error, TransientProviderError)


def describe(provider: Provider) -> str:
    """``name:model``, the way errors and events name a provider of a chain."""
    return f"{provider.name}:{provider.model}"


def _providers(value: Any) -> tuple[Provider, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(
            "FallbackProvider() takes a list of providers, primary first: "
            f"FallbackProvider([primary, secondary]), got {type(value).__name__}"
        )
    chain = tuple(value)
    if len(chain) < 2:
        raise ValueError(
            f"FallbackProvider needs at least two providers (primary first), got {len(chain)}"
        )
    for i, provider in enumerate(chain):
        if isinstance(provider, FallbackProvider):
            raise TypeError(
                f"FallbackProvider: providers[{i}] is itself a FallbackProvider; "
                "list its providers in this chain instead"
            )
        if not callable(getattr(provider, "stream", None)) or not isinstance(
            getattr(provider, "model", None), str
        ):
            raise TypeError(
                f"FallbackProvider: providers[{i}] must implement the Provider protocol "
                f"(model, stream(request, ctx), ...), got {type(provider).__name__}"
            )
    return chain


@attrs.define(eq=False)
class FallbackProvider:
    """Providers tried in order: when one fails with a failure another might not
    have (see :func:`falls_through`) once its attempts are spent, the same
    request goes to the next, and the run records a ``ProviderFallback`` event.

    A run that fell over stays on the provider that answered for the rest of
    its calls (the one that failed would most likely fail again seconds later,
    and cost its attempts and backoff on every round); the next run starts at
    the primary again.
    """

    providers: tuple[Provider, ...] = attrs.field(converter=_providers)
    #: The primary's model (a run's ``RunStarted.model``).
    model: str = attrs.field(init=False)
    #: The primary's backoff (each provider of the chain waits by its own).
    backoff: Backoff = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.model = self.primary.model
        self.backoff = self.primary.backoff

    @property
    def primary(self) -> Provider:
        return self.providers[0]

    @property
    def name(self) -> str:
        """The primary's name (a run's ``RunStarted.provider``)."""
        return self.primary.name

    @property
    def max_tokens(self) -> int | None:
        """The primary's default output cap, when it has one."""
        value = getattr(self.primary, "max_tokens", None)
        return value if isinstance(value, int) else None

    @property
    def context_window(self) -> int | None:
        """The smallest context window the chain's providers state (a request may go to
        any of them, so a history is bounded to fit them all); ``None`` if none states one."""
        windows = [getattr(p, "context_window", None) for p in self.providers]
        stated = [w for w in windows if isinstance(w, int) and not isinstance(w, bool) and w > 0]
        return min(stated) if stated else None

    @property
    def native_output(self) -> bool:
        """Whether every provider of the chain has a native structured-output mode."""
        return all(getattr(p, "native_output", False) is True for p in self.providers)

    def price(self) -> Price | None:
        """The primary's price (each call is charged at its own provider's)."""
        return self.primary.price()

    def gate_key(self) -> str | None:
        # No gate of its own: each provider of the chain has its own.
        return None

    def check_settings(self, settings: object) -> None:
        """``ValueError`` unless every provider of the chain honours ``settings``
        (a request may go to any of them)."""
        for i, provider in enumerate(self.providers):
            check = getattr(provider, "check_settings", None)
            if check is None:
                raise ValueError(
                    f"FallbackProvider: providers[{i}] ({type(provider).__name__}) does not "
                    "say which model settings it honours (it has no check_settings method)"
                )
            check(settings)

    def check_ready(self) -> None:
        """Each provider's ``check_ready``: a missing key is a configuration error to
        hear about (it does not fall through, see :func:`falls_through`)."""
        for provider in self.providers:
            check = getattr(provider, "check_ready", None)
            if check is not None:
                check()

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        """One attempt per provider, in order; see the module's notes."""
        failures: list[str] = []
        for i, provider in enumerate(self.providers):
            sent = False
            stream = provider.stream(request, ctx)
            try:
                async for item in stream:
                    sent = True
                    yield item
                return
            except ProviderError as exc:
                last = i == len(self.providers) - 1
                if sent or last or not falls_through(exc):
                    if failures:
                        exc.add_note("after: " + "; ".join(failures))
                    raise
                failures.append(f"{describe(provider)}: {type(exc).__name__}: {exc}")
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()


__all__ = ["FallbackProvider", "falls_through"]
