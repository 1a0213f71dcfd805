"""Judgement and lessons: what a run asks its judge and its memory (see docs/guides/judgement.md).

- :meth:`Judging.recall` reads the agent's lessons at preparation;
- :meth:`Judging.judge` has the JudgeActor score one candidate, charges what
  the judge spent, records ``Judged``, and stores a lesson when it failed.

Both return values; the Run decides what they mean for the round. A judge
actor that crashed on a candidate fails it closed (a failed judgement with
the crash as its error): the supervisor restarts the actor for the next one.
Past the restart intensity the run ends ``crashed``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import attrs

import tether.runtime._events as ev
from tether.actors import (
    ActorCrashed,
    ActorFailed,
    ActorRef,
    Candidate,
    JudgeCandidate,
    Judgement,
    JudgeReply,
    ReplyChannel,
)

from ._accounting import Accounts
from ._lessons import Lesson
from ._limits import Termination
from ._state import Decision, RunState
from ._trail import Trail

if TYPE_CHECKING:
    from ._agent import Agent
    from ._perrun import PerRun


class Judging:
    """A run's judge and lesson store."""

    __slots__ = ("_accounts", "_actor", "_agent", "_per_run", "_run_id", "_trail")

    def __init__(
        self,
        agent: Agent[Any, Any],
        per_run: PerRun,
        trail: Trail,
        accounts: Accounts,
        actor: Callable[[], ActorRef[JudgeCandidate]],
    ) -> None:
        self._agent = agent
        self._per_run = per_run
        self._run_id = per_run.run_id
        self._trail = trail
        self._accounts = accounts
        self._actor = actor

    async def recall(self, state: RunState) -> None:
        """Add the agent's lessons, newest first, to the run's system prompt."""
        lessons = await self._lessons()
        state.lesson_ids = tuple(lesson.id for lesson in lessons)
        if lessons:
            notes = "\n\n".join(lesson.as_prompt() for lesson in lessons)
            state.system = (
                f"{state.system}\n\nLessons from earlier runs (newest first):\n{notes}".lstrip()
            )

    async def _lessons(self) -> list[Lesson]:
        """The agent's lessons, newest first; none when the store fails (a store helps a run,
        it must not end it)."""
        store, limit = self._agent.memory, self._agent.recall_limit
        trail = self._trail
        if store is None or not limit:
            return []
        try:
            lessons = await store.recall(self._agent.scope, limit)
        except Exception as exc:
            trail.add(
                ev.MemoryFailed(
                    **trail.head(), operation="recall", error=f"{type(exc).__name__}: {exc}"
                )
            )
            return []
        trail.add(ev.LessonsRecalled(**trail.head(), lesson_ids=tuple(x.id for x in lessons)))
        return lessons

    async def judge(self, candidate: Candidate) -> Judgement | Decision:
        """Judge ``candidate``; a :class:`Decision` only when the judge actor is gone.

        The judge sees the run's context as ``candidate.ctx`` (``ctx.deps``).
        """
        candidate = attrs.evolve(candidate, ctx=self._per_run.context())
        reply = await self._ask(candidate)
        trail = self._trail
        if isinstance(reply, ActorFailed):
            trail.add(ev.ChildCrashed(**trail.head(), actor="judge", error=reply.error.traceback))
            if reply.error.gave_up:
                return Decision.end(Termination.CRASHED, reply.error.traceback)
            judgement = Judgement(passed=False, error="the judge crashed on this candidate")
        else:
            if reply.usage is not None:
                self._accounts.charge_judge(reply.usage, reply.cost_usd)
            judgement = reply.judgement
        trail.add(
            ev.Judged(
                **trail.head(),
                scores=dict(judgement.scores),
                passed=judgement.passed,
                feedback=dict(judgement.feedback),
                candidate_round=candidate.round,
                error=judgement.error,
            )
        )
        if not judgement.passed:
            await self._store_lesson(candidate, judgement)
        return judgement

    async def _ask(self, candidate: Candidate) -> JudgeReply:
        channel: ReplyChannel[JudgeReply] = ReplyChannel(1)
        try:
            await self._actor().send(JudgeCandidate(candidate=candidate, reply=channel))
            return await channel.receive()
        except ActorCrashed as gone:
            return ActorFailed(gone)
        except anyio.EndOfStream:
            # Closed unanswered: the actor died with the request (a cancelled run
            # sees its cancellation from receive instead).
            return ActorFailed(ActorCrashed("judge", "the judge actor stopped without answering"))
        finally:
            channel.abandon()

    async def _store_lesson(self, candidate: Candidate, judgement: Judgement) -> None:
        store = self._agent.memory
        if store is None:
            return
        trail = self._trail
        feedback = judgement.feedback_text() or None
        try:
            lesson = await store.add(
                scope=self._agent.scope,
                question=candidate.question,
                feedback=feedback,
                answer=None if feedback else candidate.text,
                run_id=self._run_id,
            )
        except Exception as exc:
            trail.add(
                ev.MemoryFailed(
                    **trail.head(), operation="store", error=f"{type(exc).__name__}: {exc}"
                )
            )
            return
        trail.add(ev.LessonStored(**trail.head(), lesson_id=lesson.id))
