"""The judge actor: quality judgement of a finished candidate.

A judge that raises is user code failing: the actor turns it into a failed
:class:`~tether.Judgement` with ``error`` set (fail closed), never an unwind.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import attrs

from tether.providers import ProviderContext, TokenUsage

from ._actor import ActorFailed
from ._channel import ReplyChannel
from ._judging import Candidate, Judge, Judgement


@attrs.frozen(kw_only=True)
class JudgeDone:
    judgement: Judgement
    usage: TokenUsage | None = None
    cost_usd: float | None = None
    requests: int = 0


#: What a :class:`JudgeCandidate`'s reply channel can carry.
JudgeReply = JudgeDone | ActorFailed


@attrs.frozen(kw_only=True)
class JudgeCandidate:
    candidate: Candidate
    reply: ReplyChannel[JudgeReply]


class JudgeActor:
    __slots__ = ("_calls", "_judge", "_run_id")

    def __init__(self, judge: Judge, run_id: str) -> None:
        self._judge = judge
        self._run_id = run_id
        self._calls = 0

    async def handle(self, request: JudgeCandidate) -> None:
        # A run that stopped listening (it was cancelled) wants no judgement.
        with request.reply, contextlib.suppress(anyio.BrokenResourceError):
            request.reply.send_nowait(await self._judge_one(request.candidate))

    async def _judge_one(self, candidate: Candidate) -> JudgeDone:
        judge: Any = self._judge
        try:
            if hasattr(judge, "judge_with_usage"):
                ctx = ProviderContext(run_id=self._run_id, call_index=self._calls)
                judgement, usage, cost, requests = await judge.judge_with_usage(candidate, ctx)
                self._calls += requests
                done = JudgeDone(judgement=judgement, usage=usage, cost_usd=cost, requests=requests)
            else:
                done = JudgeDone(judgement=await judge.judge(candidate))
            if not isinstance(done.judgement, Judgement):
                raise TypeError(f"judge returned {done.judgement!r}; want a Judgement")
        except Exception as exc:
            return JudgeDone(
                judgement=Judgement(
                    passed=False, error=f"judge failed: {type(exc).__name__}: {exc}"
                )
            )
        return done
