"""Real supervision: a crashed child is restarted and serves the run's next request.

- a ModelActor that crashes on a request fails it back as a transient provider
  error: it counts as an attempt, is retried with backoff on the restarted
  actor, and past ``max_provider_attempts`` the run ends ``provider_failed``;
- a JudgeActor that crashes fails that candidate closed; the restarted judge
  judges the next one;
- past the restart intensity the run ends ``crashed``.
"""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether import events as ev
from tether.actors import JudgeActor, ModelActor, RestartPolicy
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
