"""Real supervision: a crashed child is restarted and serves the run's next request.

- a ModelActor that crashes on a request fails it back as a transient provider
  error: it counts as an attempt, is retried with backoff on the restarted
  actor, and past ``max_provider_attempts`` the run ends ``provider_failed``;
- a JudgeActor that crashes fails that candidate closed; the restarted judge
  judges the next one;
- past the restart intensity the run ends ``crashed``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest

import tether
from tether import events as ev
from tether.actors import (
    JudgeActor,
    ModelActor,
    ReplyChannel,
    RestartPolicy,
    spawn_mailbox,
    supervise,
)
from tether.providers import Backoff, Reply, ScriptedProvider

from .helpers import assert_consistent, of, run, transitions

pytestmark = pytest.mark.anyio

QUICK = Backoff(initial=0.01, jitter=False)


def crash_first(cls: type[Any], monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """Make ``cls.handle`` raise on its first ``times`` requests; returns the request count."""
    original = cls.handle
    seen: list[int] = []

    async def flaky(self: Any, request: Any) -> None:
        seen.append(1)
        if len(seen) <= times:
            raise RuntimeError(f"actor bug #{len(seen)}")
        await original(self, request)

    monkeypatch.setattr(cls, "handle", flaky)
    return seen


async def test_crashed_model_actor_is_retried_on_its_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model actor crash is one transient attempt; the restarted actor answers the retry."""
    requests = crash_first(ModelActor, monkeypatch, 1)
    agent = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="fine")], backoff=QUICK))
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "fine"
    assert len(requests) == 2
    assert [c.actor for c in of(result.events, ev.ChildCrashed)] == ["model"]
    (retry,) = of(result.events, ev.ProviderRetry)
    assert (retry.error_type, retry.attempt, retry.wait_s) == ("actor_crashed", 1, 0.01)
    assert [s.attempt for s in of(result.events, ev.ModelCallStarted)] == [1, 2]
    assert (result.usage.model_calls, result.usage.provider_attempts) == (1, 2)
    assert result.usage.steps == 1
    assert_consistent(result)


async def test_model_actor_crashing_every_attempt_ends_provider_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Crashes count as attempts: past max_provider_attempts the run ends provider_failed."""
    crash_first(ModelActor, monkeypatch, 100)
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text="never")], backoff=QUICK),
        limits=tether.Limits(max_provider_attempts=3),
        restart=RestartPolicy(max_restarts=10, period_s=60),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert "actor bug #3" in result.error
    assert len(of(result.events, ev.ChildCrashed)) == 3
    assert [r.attempt for r in of(result.events, ev.ProviderRetry)] == [1, 2]
    assert result.usage.provider_attempts == 3
    assert_consistent(result)


async def test_model_actor_past_restart_intensity_ends_crashed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model actor that crashes past its restart intensity ends the run crashed at once."""
    crash_first(ModelActor, monkeypatch, 100)
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text="never")], backoff=QUICK),
        limits=tether.Limits(max_provider_attempts=10),
        restart=RestartPolicy(max_restarts=1, period_s=60),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.CRASHED
    assert result.error is not None
    assert "gave up" in result.error
    assert "actor bug #2" in result.error
    assert len(of(result.events, ev.ChildCrashed)) == 2
    assert result.usage.provider_attempts == 2
    assert_consistent(result)


async def test_crashed_judge_fails_closed_and_its_restart_judges_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A judge actor crash fails that candidate; the restarted judge passes the next one."""
    crash_first(JudgeActor, monkeypatch, 1)
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text="first"), Reply(text="second")]),
        judge=tether.RuleJudge({"any": lambda c: True}),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "second"
    judged = of(result.events, ev.Judged)
    assert [j.passed for j in judged] == [False, True]
    assert judged[0].error == "the judge crashed on this candidate"
    assert [c.actor for c in of(result.events, ev.ChildCrashed)] == ["judge"]
    assert transitions(result) == [("retry", "judgement_failed"), ("complete", "answered")]
    assert result.usage.quality_retries == 1
    assert_consistent(result)


async def test_judge_past_restart_intensity_ends_crashed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge actor that crashes past its restart intensity ends the run crashed."""
    crash_first(JudgeActor, monkeypatch, 100)
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text="x")] * 5),
        judge=tether.RuleJudge({"any": lambda c: True}),
        limits=tether.Limits(max_quality_retries=4),
        restart=RestartPolicy(max_restarts=1, period_s=60),
    )
    result = await run(agent)
    assert result.termination is tether.Termination.CRASHED
    assert result.error is not None
    assert "actor bug #2" in result.error
    assert [j.passed for j in of(result.events, ev.Judged)] == [False]
    assert len(of(result.events, ev.ChildCrashed)) == 2
    assert_consistent(result)


async def test_finalize_brackets_assembly_in_every_run() -> None:
    """Every run ends StageEntered(finalize), StageExited(finalize), RunFinished."""
    answered = await run(tether.Agent(name="a", provider=ScriptedProvider([Reply(text="x")])))
    blocked = await run(
        tether.Agent(
            name="b",
            provider=ScriptedProvider([Reply(text="x")]),
            policies=[lambda point, subject: tether.Verdict.block("no")],
        )
    )
    for result in (answered, blocked):
        tail = result.events[-3:]
        assert [type(e).__name__ for e in tail] == ["StageEntered", "StageExited", "RunFinished"]
        assert [getattr(e, "stage", None) for e in tail[:2]] == ["finalize", "finalize"]
        assert_consistent(result)
    assert answered.summary() == "Model → answered"


# ------------------------------------------------------------ a Timed actor's scope


@attrs.frozen
class _Job:
    what: str
    reply: ReplyChannel[str]


class _TimedEcho:
    """A Timed actor: each job says how it ends (see the test below)."""

    def __init__(self, scopes: list[anyio.CancelScope]) -> None:
        self._scopes = scopes

    def scope(self) -> anyio.CancelScope:
        self._scopes.append(anyio.CancelScope())
        return self._scopes[-1]

    async def handle(self, job: _Job) -> None:
        if job.what == "late":  # its deadline passes after its last checkpoint
            await anyio.lowlevel.checkpoint()
            self._scopes[-1].cancel()
            job.reply.send_nowait("late: ok")
            job.reply.close()
            return
        if job.what == "cut":  # its deadline passes while it waits
            self._scopes[-1].cancel()
            await anyio.lowlevel.checkpoint()
        elif job.what == "crash":
            raise RuntimeError("actor bug")
        await anyio.lowlevel.checkpoint()  # a checkpoint: it must not see an earlier job's deadline
        job.reply.send_nowait(f"{job.what}: ok")
        job.reply.close()

    async def cut(self, job: _Job) -> None:
        await anyio.lowlevel.checkpoint()
        job.reply.send_nowait(f"{job.what}: cut")
        job.reply.close()


async def test_a_timed_actor_serves_each_request_after_a_cut_in_a_fresh_scope() -> None:
    """supervise serves a Timed actor in one scope: a request its deadline cuts is finished
    by cut(), outside it; a deadline that passed as a request ended, or a crash, leads to a
    fresh scope; no later request sees an earlier one's deadline."""
    scopes: list[anyio.CancelScope] = []
    ref, box = spawn_mailbox("timed", 8)
    replies = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervise, "timed", lambda: _TimedEcho(scopes), box, RestartPolicy())
        channels: list[ReplyChannel[Any]] = []
        # All queued at once: the job after "late" is taken before the actor could park.
        for what in ("a", "b", "late", "c", "cut", "d", "crash", "e"):
            channels.append(ReplyChannel(2))
            await ref.send(_Job(what, channels[-1]))
        for reply in channels:
            replies.append([item async for item in _drain(reply)])
        ref.close()
    assert [r[0] if isinstance(r[0], str) else "failed" for r in replies] == [
        "a: ok", "b: ok", "late: ok", "c: ok", "cut: cut", "d: ok", "failed", "e: ok"
    ]  # fmt: skip
    assert len(scopes) == 4  # the first; after "late"; after "cut"; the restarted actor's


async def _drain(reply: ReplyChannel[Any]) -> AsyncIterator[Any]:
    while True:
        try:
            yield await reply.receive()
        except anyio.EndOfStream:
            return
