"""The provider error tree.

::

    TetherError
    └── ProviderError
        ├── TransientProviderError    retried by the model actor with backoff
        │   ├── RateLimited           429
        │   ├── Overloaded            529
        │   ├── ServerError           500, 502, 503, 504 and other 5xx
        │   ├── ProviderTimeout       connect, read or first-byte timeout
        │   ├── ConnectionDropped     connection refused, reset or closed
        │   ├── StreamInterrupted     a stream cut off before its end
        │   ├── StreamErrorEvent      an ``error`` event inside a stream
        │   └── MalformedResponse     a body that is not the wire format's shape
        └── FatalProviderError        never retried
            ├── InvalidRequest        400, and a redirect or a body that is not the API
            │   └── ContextWindowExceeded  the prompt is longer than the model's window
            ├── ResponseTooLarge      an answer past the provider's max_response_bytes
            ├── AuthenticationFailed  401
            ├── PermissionDenied      403
            └── NotFound              404

Foreign exceptions (httpx, json) are translated at the provider boundary and
chained (``raise Mapped(...) from exc``); nothing foreign leaks past a provider.
Messages never contain an API key.
"""

from __future__ import annotations

from collections.abc import Mapping


class TetherError(Exception):
    """Base class of every error tether raises."""


class ProviderError(TetherError):
    """A model provider failed to answer."""

    #: HTTP status, when the failure came with one.
    status: int | None = None

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def error_type(self) -> str:
        """The short name used in events (``rate_limited``, ``server_error``, ...)."""
        return _snake(type(self).__name__)


class TransientProviderError(ProviderError):
    """A failure worth retrying: the same request may succeed later."""

    #: Seconds the server asked us to wait (``retry-after``), if it said.
    retry_after: float | None = None

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class RateLimited(TransientProviderError):
    pass


class Overloaded(TransientProviderError):
    pass


class ServerError(TransientProviderError):
    pass


class ProviderTimeout(TransientProviderError, TimeoutError):
    pass


class ConnectionDropped(TransientProviderError, ConnectionError):
    pass


class StreamInterrupted(TransientProviderError):
    pass


class StreamErrorEvent(TransientProviderError):
    pass


class MalformedResponse(TransientProviderError):
    pass


class FatalProviderError(ProviderError):
    """A failure that retrying cannot fix."""


class InvalidRequest(FatalProviderError):
    pass


class ContextWindowExceeded(InvalidRequest):
    """The prompt does not fit the model's context window (OpenAI's
    ``context_length_exceeded``, Anthropic's "prompt is too long").

    The run takes the ``model_context_window_exceeded`` path for it (docs/concepts/round.md):
    it trims once with the agent's context strategy, then ends ``context_exceeded``.
    """


class ResponseTooLarge(FatalProviderError):
    """An answer's body grew past the provider's ``max_response_bytes``."""


class AuthenticationFailed(FatalProviderError):
    pass


class PermissionDenied(FatalProviderError):
    pass


class NotFound(FatalProviderError):
    pass


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def name_errors_by_package(package: str, namespace: Mapping[str, object]) -> None:
    """Give each exception class of ``package``'s ``__all__`` that one of its own
    modules defines the package's name as its module: tracebacks and reprs then
    show ``tether.providers.RateLimited``, which is also where pickle finds it."""
    names = namespace["__all__"]
    assert isinstance(names, list)
    for name in names:
        value = namespace.get(name)  # a name the package imports lazily is not there yet
        if (
            isinstance(value, type)
            and issubclass(value, BaseException)
            and value.__module__.startswith(package + ".")
        ):
            value.__module__ = package
