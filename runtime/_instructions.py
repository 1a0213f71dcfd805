"""Dynamic instructions: ``Agent(instructions=fn)``, ``fn(ctx) -> str``, sync or async.

Decisions:

- The function is called once per run, when the run starts (after admission,
  before the input policy), with the run's :class:`~tether.RunContext` (its
  ``deps``, ``run_id``, budget). Its text is the run's system prompt, which the
  memory stage extends with recalled lessons as it does a static one.
- The text is recorded in ``RunStarted.instructions`` (``None`` for a static
  ``str``: the agent has it) and, on a durable run, in every checkpoint (the
  run state's ``system``): a run resumed from a checkpoint does not call the
  function again. A run claimed before its first checkpoint starts over, and
  calls it then.
- A function that raises, or returns something other than a ``str``, ends the
  run ``crashed`` before any model call, with an error that names the function
  (the user's code, not the provider's). A sync function runs on the event loop:
  keep it quick, or make it async.
- A static ``str`` costs nothing: no call, no await.
"""

from __future__ import annotations

import inspect
import traceback
from typing import Any

from tether.actors import RunContext

from ._limits import Termination
from ._state import Decision


async def resolve(function: Any, ctx: RunContext[Any]) -> str | Decision:
    """``function(ctx)``'s text, or the decision that ends the run when it fails."""
    name = getattr(function, "__qualname__", None) or repr(function)
    try:
        value = function(ctx)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        return Decision.end(
            Termination.CRASHED,
            f"Agent.instructions: the function {name!r} raised {type(exc).__name__}: {exc} "
            "(the agent's own instructions function: no model was called)\n"
            + traceback.format_exc(),
        )
    if not isinstance(value, str):
        return Decision.end(
            Termination.CRASHED,
            f"Agent.instructions: the function {name!r} returned {type(value).__name__}, "
            "not a str (no model was called)",
        )
    return value


__all__ = ["resolve"]
