"""Fork: a new run that plays a recorded run's first rounds, then goes on live.

``await rt.fork(run_id, at_round=N, agent=...)`` (:func:`fork`) starts a run
whose rounds 1..N are the recorded ones, played as a replay plays them (the
recorded responses and tool results: no model call, no tool execution), and
which goes on live from round N + 1: its ``RunForked(from_run, at_round)``
seam comes as that round's first request goes to the live provider. The recorded run is
read from the Runtime's run store, or from ``trail=`` (a JSONL file, or events).
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from tether.providers import ModelSettings

from ._agent import Agent
from ._playback import Launches, Playback, ReplayProvider, launch, played_judge
from ._recording import Recording, TrailSource, read_run, store_run

H = TypeVar("H")


async def fork(
    rt: Launches[H],
    run_id: str,
    *,
    at_round: int,
    agent: Agent[Any, Any],
    input: str | None = None,
    trail: TrailSource | None = None,
    new_run_id: str | None = None,
    deps: Any = None,
    settings: ModelSettings | None = None,
) -> H:
    """Start a run in ``rt`` that plays run ``run_id``'s first ``at_round`` rounds, then
    goes on live (see :mod:`._fork`); its ``RunHandle``.

    ``agent`` runs it (its provider answers the live rounds, its tools run in
    them); ``input`` is the recorded run's unless given. The recorded run comes
    from ``trail`` (a JSONL file, or events) when given, else from the Runtime's
    run store. ``new_run_id``, ``deps`` and ``settings`` are the new run's, as
    :meth:`Runtime.start` takes them. ``ValueError`` for a round the recorded run
    did not go on from (``0 <= at_round``, and round ``at_round`` ended with a
    transition to a next round); :class:`~tether.runtime.TrailError` when the run is not found.
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"fork() wants a tether.Agent, got {type(agent).__name__}")
    if not isinstance(at_round, int) or at_round < 0:
        raise ValueError(f"fork(at_round=...) must be an int >= 0, got {at_round!r}")
    if trail is not None:
        events, notes = read_run(trail, run_id)
    else:
        keeper = getattr(rt, "_keeper", None)
        if keeper is None:
            raise ValueError(
                "fork() needs the recorded run: pass trail= (a JSONL file or events), "
                "or use a Runtime with a run store"
            )
        events, notes = await store_run(keeper.store, run_id)
    recording = Recording.of(events, notes)
    _check_round(recording, at_round)
    # Only the calls of the played rounds come from the trail; the rest go to the agent's.
    upto = recording.model_calls_upto(at_round)
    own = agent.provider
    provider = ReplayProvider(
        attrs.evolve(recording, calls=recording.calls[:upto]),
        name=own.name,
        model=own.model,
        price=own.price(),
        max_tokens=getattr(own, "max_tokens", None),
        context_window=getattr(own, "context_window", None),
        then=own,
    )
    playback = Playback(recording, until=at_round)
    provider.on_live = playback.seam
    started = recording.started
    text = input if input is not None else "" if started is None else started.input
    return launch(
        rt,
        attrs.evolve(agent, provider=provider, judge=played_judge(agent, recording, at_round)),
        text,
        playback=playback,
        run_id=new_run_id,
        deps=deps,
        settings=settings,
    )


def _check_round(recording: Recording, at_round: int) -> None:
    import tether.runtime._events as ev

    went_on = {
        e.round for e in recording.events if isinstance(e, ev.Transition) and e.kind != "complete"
    }
    if at_round and at_round not in went_on:
        raise ValueError(
            f"run {recording.run_id!r} has no round {at_round} that went on to a next round "
            f"(rounds that did: {sorted(went_on) or 'none'}): fork at one of them"
        )
