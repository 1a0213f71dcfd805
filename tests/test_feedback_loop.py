"""The feedback loop in runs: lessons across runs, LLMJudge usage, memory failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tether
from tether import events as ev
from tether.providers import ModelRequest, Price, ProviderContext, Reply, ScriptedProvider

from .helpers import assert_consistent, of

pytestmark = pytest.mark.anyio

FEEDBACK = "cite the 1969 landing date"


def needs_date(candidate: tether.Candidate) -> tuple[float, str]:
    return (1.0, "ok") if "1969" in candidate.text else (0.1, FEEDBACK)


def answers_from_lessons(request: ModelRequest, ctx: ProviderContext) -> Reply:
    """A model that gets it right when its instructions carry the lesson."""
    if FEEDBACK in request.system:
        return Reply(text="Apollo 11 landed in July 1969.")
    return Reply(text="Apollo 11 landed on the Moon.")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tether.LessonStore:
    if request.param == "memory":
        return tether.InMemoryLessonStore()
    return tether.SQLiteLessonStore(tmp_path / "lessons.db")


async def test_a_lesson_from_run_one_helps_run_two(store: tether.LessonStore) -> None:
    """Run 1 fails judgement and stores a lesson; run 2's first request carries the feedback."""
    provider = ScriptedProvider(answers_from_lessons, record=True)
    agent = tether.Agent(
        name="historian",
        provider=provider,
        judge=tether.RuleJudge({"dated": needs_date}),
        memory=store,
        limits=tether.Limits(max_quality_retries=0),
    )
    async with tether.Runtime() as rt:
        first = await rt.run(agent, "When did Apollo 11 land?")
        second = await rt.run(agent, "When did Apollo 11 land?")
    await store.aclose()
    assert first.termination is tether.Termination.QUALITY_EXHAUSTED
    (stored,) = of(first.events, ev.LessonStored)
    assert of(first.events, ev.LessonsRecalled)[0].lesson_ids == ()

    (recalled,) = of(second.events, ev.LessonsRecalled)
    assert recalled.lesson_ids == (stored.lesson_id,)
    run2_first_request = next(r for c, r in provider.requests if c.run_id == second.run_id)
    assert FEEDBACK in run2_first_request.system
    assert "landed on the Moon" not in run2_first_request.system, "not the failed answer"
    assert second.termination is tether.Termination.ANSWERED
    assert second.passed is True
    assert of(second.events, ev.Judged)[0].passed is True
    assert_consistent(second)


async def test_lessons_of_another_scope_are_not_recalled() -> None:
    """An agent recalls only its own scope's lessons."""
    store = tether.InMemoryLessonStore()
    await store.add(scope="someone-else", question="q", feedback="secret advice")
    agent = tether.Agent(
        name="mine", provider=ScriptedProvider([Reply(text="x")], record=True), memory=store
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert of(result.events, ev.LessonsRecalled)[0].lesson_ids == ()
    assert isinstance(agent.provider, ScriptedProvider)
    assert "secret advice" not in agent.provider.requests[0][1].system


async def test_two_hundred_concurrent_runs_lose_no_lesson(tmp_path: Path) -> None:
    """200 concurrent runs each storing a lesson in one SQLite file lose none."""
    store = tether.SQLiteLessonStore(tmp_path / "many.db")
    agent = tether.Agent(
        name="many",
        provider=ScriptedProvider([Reply(text="wrong")], latency_s=0.001),
        judge=tether.RuleJudge({"never": lambda c: (False, "try harder")}),
        memory=store,
        recall_limit=0,
        limits=tether.Limits(max_quality_retries=0),
    )
    async with tether.Runtime() as rt:
        handles = [rt.start(agent, f"question {i}") for i in range(200)]
        results = [await h.result() for h in handles]
    stored = {e.lesson_id for r in results for e in of(r.events, ev.LessonStored)}
    assert len(stored) == 200
    recalled = await store.recall("many", 1000)
    assert {lesson.id for lesson in recalled} == stored
    assert {lesson.question for lesson in recalled} == {f"question {i}" for i in range(200)}
    await store.aclose()


async def test_corrupt_database_is_a_clear_event_and_the_run_ends(tmp_path: Path) -> None:
    """A corrupt lesson file gives a clear MemoryFailed event; the run still ends normally."""
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a database" * 100)
    store = tether.SQLiteLessonStore(path)
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text="no"), Reply(text="still no")]),
        judge=tether.RuleJudge({"never": lambda c: False}),
        memory=store,
        limits=tether.Limits(max_quality_retries=1),
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    await store.aclose()
    assert result.termination is tether.Termination.QUALITY_EXHAUSTED
    failures = of(result.events, ev.MemoryFailed)
    assert [f.operation for f in failures] == ["recall", "store", "store"]
    assert all("LessonStoreError" in f.error and str(path) in f.error for f in failures)
    assert_consistent(result)


async def test_llm_judge_in_a_run_is_charged_and_drives_the_retry() -> None:
    """An LLMJudge's verdicts drive the quality retry and its usage is charged to the run."""
    price = Price(input=1.0, output=2.0)
    verdicts = iter(
        [
            {"criteria": {"accurate": {"score": 0.2, "reason": "the year is missing"}}},
            {"criteria": {"accurate": {"score": 0.9, "reason": "good"}}},
        ]
    )

    def judge_model(request: ModelRequest, ctx: ProviderContext) -> Reply:
        return Reply(text=json.dumps(next(verdicts)))

    judge = tether.LLMJudge(
        provider=ScriptedProvider(judge_model, cost_per_mtok=price),
        rubric={"accurate": "the answer states the year"},
    )
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider(
            [Reply(text="It landed."), Reply(text="It landed in 1969.")], cost_per_mtok=price
        ),
        judge=judge,
    )
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "When?")
    assert result.termination is tether.Termination.ANSWERED
    judged = of(result.events, ev.Judged)
    assert [(j.passed, dict(j.feedback)) for j in judged] == [
        (False, {"accurate": "the year is missing"}),
        (True, {}),
    ]
    sources = [c.source for c in of(result.events, ev.UsageCharged)]
    assert sources.count("judge") == 2
    assert sources.count("model") == 2
    assert result.usage.cost_usd is not None
    assert_consistent(result)


async def test_judge_failure_feedback_is_never_the_failed_answer(tmp_path: Path) -> None:
    """Without feedback the failed answer is stored; with feedback, only the feedback."""
    store = tether.InMemoryLessonStore()

    class Silent:
        async def judge(self, candidate: tether.Candidate) -> tether.Judgement:
            return tether.Judgement(scores={"x": 0.0}, passed=False)

    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text="the failed answer")]),
        judge=Silent(),
        memory=store,
        limits=tether.Limits(max_quality_retries=0),
    )
    async with tether.Runtime() as rt:
        await rt.run(agent, "q")
    (lesson,) = await store.recall("a", 5)
    assert lesson.feedback is None
    assert lesson.answer == "the failed answer"
