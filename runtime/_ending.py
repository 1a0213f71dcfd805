"""A run's end: assembled when the run reaches it, published once it counts (DESIGN §22).

Assembly (:func:`assemble`, the ``finalize`` stage) makes the run's
``RunFinished`` event and its :class:`~._result.RunResult`, and changes
nothing anyone can see. Publishing (``Run.publish``) is the moment the end
counts: ``RunFinished`` goes into the trail (its followers and the Runtime's
sink see it then, once), the trail is frozen into the result's events, and
whoever waits for the result wakes.

A run without a store publishes at once. A durable run publishes once the run
store has its end (:meth:`~._durable.Durable.finish`), so that no caller, no
follower and no sink hears of an end the store may not keep; or, when the
store could not take it for longer than the lease, the end is declared
``store_failed`` (:func:`store_failed`) and that is what is published, and
what the store is then given (see :mod:`._durable`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

import tether.runtime._events as ev

from ._limits import Termination
from ._result import RunResult

if TYPE_CHECKING:
    from ._agent import Agent
    from ._state import RunState
    from ._toolround import ToolRound
    from ._trail import Trail


@attrs.frozen(kw_only=True)
class Ending:
    """A run's end, assembled, not yet published."""

    event: ev.RunFinished
    #: The result, without its events (``Run.publish`` gives it the trail's).
    result: RunResult[Any]

    @property
    def termination(self) -> Termination:
        return self.result.termination


def assemble(
    run_id: str,
    agent: Agent[Any, Any],
    state: RunState,
    trail: Trail,
    tools: ToolRound | None,
    termination: Termination,
    error: str | None,
    now: bool = False,
) -> Ending:
    """Assembly (the ``finalize`` stage): the run's ``RunFinished`` and result.

    ``tools`` is the tool round in flight, if the run ended in one: it still
    answers every ``tool_use`` it got. ``now`` (a run without a store): the end
    counts at once, so ``RunFinished`` goes into the trail here and the result
    has the trail's events (``Run.publish`` is then not needed: a run that
    does not use a store pays nothing for holding its end back)."""
    with trail.stage("finalize"):
        if tools is not None:
            tools.abort("the run ended before this call ran")
        output = _output(state, termination)
        state.error = error
        usage = state.usage.freeze()
        judgement = state.judgement
        messages = tuple(state.messages)
    event = ev.RunFinished(
        **trail.head(), termination=termination, usage=usage, output=output, error=error
    )
    if now:
        trail.add(event)
    typed = agent.typed_output
    result: RunResult[Any] = RunResult(
        run_id=run_id,
        output=output if typed is None else typed.result(state, termination),
        termination=termination,
        passed=None if judgement is None else judgement.passed,
        judgement=judgement,
        usage=usage,
        messages=messages,
        events=trail.finish() if now else (),
        error=error,
    )
    return Ending(event=event, result=result)


def store_failed(ending: Ending, why: str) -> Ending:
    """``ending`` as a ``store_failed`` one: no output; the error says what was lost."""
    if ending.termination is Termination.STORE_FAILED:
        return ending
    error = (
        f"the run store could not record this run's end ({ending.termination.value}) "
        f"for longer than its lease: {why}"
    )
    kind = Termination.STORE_FAILED
    return Ending(
        event=attrs.evolve(ending.event, termination=kind, output=None, error=error),
        result=attrs.evolve(ending.result, termination=kind, output=None, error=error),
    )


def _output(state: RunState, termination: Termination) -> str | None:
    """What a run that ends with ``termination`` gives as its output (see RunResult)."""
    if termination in (Termination.ANSWERED, Termination.QUALITY_EXHAUSTED):
        return state.candidate
    if termination in (Termination.TERMINAL_TOOL, Termination.MAX_CONTINUES):
        return state.output
    return None


__all__ = ["Ending", "assemble", "store_failed"]
