"""Errors raised by tools and actors.

::

    TetherError
    ├── ToolError                 a model mistake: goes back to the model as an is_error result
    │   └── ToolArgumentsInvalid  the model's arguments failed validation
    ├── TransientToolError        retried with backoff, bounded by Limits.max_tool_retries
    ├── FatalToolError            ends the run ``fatal_tool_error``
    └── ActorError
        └── ActorCrashed          a bug inside an actor; the request in flight failed
"""

from __future__ import annotations

from tether.providers import TetherError


class ToolError(TetherError):
    """Raise from a tool to tell the model what it did wrong; the run goes on."""


class ToolArgumentsInvalid(ToolError):
    """The model's arguments do not match the tool's signature."""


class TransientToolError(TetherError):
    """Raise from a tool for a failure that may pass (a timeout, a dropped connection).

    It is retried with backoff, unless ``retry=False``: then the call ends
    ``transient_error`` at once, for a failure after which running the call
    again could repeat its side effects (a connection lost mid-call).
    """

    def __init__(self, *args: object, retry: bool = True) -> None:
        super().__init__(*args)
        self.retry = retry


class FatalToolError(TetherError):
    """Raise from a tool for a failure that must end the run (bad credentials, permission)."""


class ActorError(TetherError):
    pass


class ActorCrashed(ActorError):
    """An actor failed while handling a request; the request was not replayed.

    ``gave_up`` is true when the actor is down for good: it crashed past its
    :class:`~tether.actors.RestartPolicy`, so no later request will be served.
    """

    def __init__(self, actor: str, traceback: str, *, gave_up: bool = False) -> None:
        super().__init__(f"actor {actor!r} crashed:\n{traceback}")
        self.actor = actor
        self.traceback = traceback
        self.gave_up = gave_up
