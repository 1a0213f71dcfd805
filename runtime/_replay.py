"""``tether.replay``: re-run an agent's code against a recorded run (docs/guides/replay.md).

:func:`replay` runs the agent again, in a Runtime of its own, with its
provider swapped for a :class:`~._playback.ReplayProvider` that answers each
request with the response the trail recorded for it, and its tools answered
from the recorded results (a :class:`~._playback.Playback`): no model is
called and no tool executed, unless ``live_tools=True``. Everything else is
the agent's own code: the instructions function, the tools' argument checks,
the policies, the judge, the typed output. Its events are then compared with
the recorded ones, structurally (:func:`~._playback.compare`): the replay is
:attr:`Replay.identical`, or its :class:`Divergence` says where the code now
does otherwise.
"""

from __future__ import annotations

from typing import Any

import attrs

from tether.providers import ModelSettings

from ._agent import Agent
from ._playback import Playback, Replay, compare, launch, played_judge, replay_provider
from ._recording import Recording, TrailSource, read_run, store_run
from ._runstore import RunStore
from ._runtime import Runtime


async def replay(
    trail: TrailSource | RunStore,
    agent: Agent[Any, Any],
    *,
    run_id: str | None = None,
    live_tools: bool = False,
    deps: Any = None,
    settings: ModelSettings | None = None,
) -> Replay:
    """Re-run ``agent``'s code against a recorded run; compare its events with the trail.

    ``trail`` is a JSONL file (``run_id`` picks a run when it holds several), a
    run's events (``RunResult.events``, or their dicts), or a run store
    (``run_id`` then names the run). No model is called; no tool is executed
    unless ``live_tools=True`` (the recorded results are used otherwise, after
    the tool's argument checks). ``deps`` and ``settings`` are the run's, as
    given to :meth:`Runtime.start`. Approvals are answered as the host answered
    them. Deterministic: the same trail and code give the same events, timestamps
    aside.
    """

    if not isinstance(agent, Agent):
        raise TypeError(f"replay() wants a tether.Agent, got {type(agent).__name__}")
    if isinstance(trail, RunStore):
        if run_id is None:
            raise ValueError("replay() from a run store needs run_id=")
        events, notes = await store_run(trail, run_id)
    else:
        events, notes = read_run(trail, run_id)
    recording = Recording.of(events, notes)
    provider = replay_provider(recording, agent)
    played = attrs.evolve(agent, provider=provider, judge=played_judge(agent, recording))
    playback = Playback(recording, live_tools=live_tools)
    provider.on_cut = playback.cancel
    started = recording.started
    text = "" if started is None else started.input
    async with Runtime() as rt:
        handle = launch(
            rt,
            played,
            text,
            playback=playback,
            run_id=recording.run_id,
            parent_run_id=None if started is None else started.parent_run_id,
            deps=deps,
            settings=settings,
        )
        result = await handle.result()
    return Replay(
        run_id=recording.run_id,
        divergence=compare(recording.events, result.events),
        recorded=recording.events,
        events=tuple(result.events),
        result=result,
        notes=recording.missing,
        replayed_calls=provider.replayed,
    )
