"""tether.evals: datasets, evaluators, evaluate() on both backends, reports and comparison."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import tether
from tether.evals import (
    Case,
    CaseResult,
    Contains,
    Dataset,
    DatasetError,
    EvalControl,
    EvalReport,
    ExactMatch,
    JsonEqual,
    LLMRubric,
    ReportError,
    evaluate,
    percentile,
    render_html,
)
from tether.providers import ModelRequest, Price, ProviderContext, Reply, ScriptedProvider

from .helpers import task_names

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "evals" / "capitals.jsonl"


def echo_agent(latency_s: float = 0.0, name: str = "echo", **answers: str) -> tether.Agent:
    """Answers a question from ``answers`` (by the question's text), else echoes it."""

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        question = request.messages[-1].text
        return Reply(text=answers.get(question, question))

    return tether.Agent(
        name=name,
        provider=ScriptedProvider(
            script, latency_s=latency_s, cost_per_mtok=Price(input=1.0, output=2.0)
        ),
    )


CASES = [
    Case("a", expected="A", id="one"),
    Case("b", expected="B", id="two"),
    Case("c", expected="nope", id="three"),
]

# ------------------------------------------------------------------ datasets


def test_dataset_numbers_cases_and_refuses_duplicate_ids() -> None:
    """Cases without an id are numbered by position; two cases may not share an id."""
    ds = Dataset([Case("x"), Case("y", id="why"), Case("z")])
    assert [c.id for c in ds] == ["case-1", "why", "case-3"]
    with pytest.raises(DatasetError, match="two cases have the id 'a'"):
        Dataset([Case("x", id="a"), Case("y", id="a")])
    with pytest.raises(TypeError, match=r"Case\.input must be a str"):
        Case(3)  # type: ignore[arg-type]


def test_jsonl_loads_and_reports_bad_lines_by_number(tmp_path: Path) -> None:
    """A JSONL dataset loads; a bad line is named by its file and line number."""
    ds = Dataset.load(EXAMPLE)
    assert len(ds) == 50
    assert ds.name == "capitals"
    assert ds.cases[0] == Case("What is the capital of Albania?", expected="Tirana", id="albania")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "ok"}\n\n{"input": "x", "answer": 1}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:3: unknown key\(s\) 'answer'"):
        Dataset.load(bad)
    bad.write_text('{"input": "ok"}\nnot json\n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: not JSON"):
        Dataset.load(bad)
    bad.write_text('{"expected": 1}\n')
    with pytest.raises(DatasetError, match="has no 'input'"):
        Dataset.load(bad)
    with pytest.raises(DatasetError, match=r"unknown dataset format '\.csv'"):
        Dataset.load(tmp_path / "cases.csv")
    with pytest.raises(DatasetError, match="no such file"):
        Dataset.load(tmp_path / "missing.jsonl")


def test_yaml_loads_a_mapping_or_a_list(tmp_path: Path) -> None:
    """A YAML dataset is a list of cases or a mapping with a name and cases."""
    pytest.importorskip("yaml")
    ds = Dataset.load(ROOT / "examples" / "evals" / "smoke.yaml")
    assert ds.name == "capitals-smoke"
    assert [c.id for c in ds] == ["france", "australia", "atlantis"]
    assert ds.cases[1].metadata == {"tricky": True}
    plain = tmp_path / "plain.yml"
    plain.write_text("- input: hi\n  expected: [a, b]\n")
    assert Dataset.load(plain).cases == (Case("hi", expected=["a", "b"], id="case-1"),)
    plain.write_text("cases: 3\n")
    with pytest.raises(DatasetError, match="want a list of cases"):
        Dataset.load(plain)


def test_yaml_without_pyyaml_names_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without PyYAML, loading YAML says which package to install."""
    monkeypatch.setitem(sys.modules, "yaml", None)
    path = tmp_path / "cases.yaml"
    path.write_text("- input: hi\n")
    with pytest.raises(DatasetError, match="pip install pyyaml"):
        Dataset.load(path)


# ------------------------------------------------------------------ evaluators


def candidate(text: str) -> tether.Candidate:
    return tether.Candidate(text=text, question="q", round=1)


@pytest.mark.anyio
async def test_expected_aware_judges() -> None:
    """exact, contains and JSON-equal compare the answer with the case's expected."""
    exact = ExactMatch()
    assert (await exact.judge_case(candidate(" Paris\n"), Case("q", expected="Paris"))).passed
    miss = await exact.judge_case(candidate("paris"), Case("q", expected="Paris"))
    assert not miss.passed
    assert miss.scores == {"exact": 0.0}
    assert "expected Paris, got paris" in miss.feedback["exact"]
    loose = ExactMatch(case_sensitive=False)
    assert (await loose.judge_case(candidate("paris"), Case("q", expected="Paris"))).passed
    none = await exact.judge_case(candidate("x"), Case("q"))
    assert not none.passed
    assert none.error is not None
    assert "no 'expected'" in none.error

    contains = Contains()
    half = await contains.judge_case(
        candidate("Red and blue"), Case("q", expected=["red", "green"])
    )
    assert half.scores == {"contains": 0.5}
    assert not half.passed
    assert 'missing "green"' in half.feedback["contains"]
    assert (
        await Contains(threshold=0.5).judge_case(
            candidate("Red"), Case("q", expected=["red", "green"])
        )
    ).passed

    js = JsonEqual()
    fenced = candidate('Here:\n```json\n{"b": [1, 2], "a": 1.0}\n```')
    assert (await js.judge_case(fenced, Case("q", expected={"a": 1, "b": [1, 2]}))).passed
    assert (await js.judge_case(candidate('{"a": 1}'), Case("q", expected='{"a":1}'))).passed
    wrong = await js.judge_case(candidate("not json"), Case("q", expected={"a": 1}))
    assert not wrong.passed
    assert "not JSON" in wrong.feedback["json_equal"]


@pytest.mark.anyio
async def test_evaluate_runs_every_case_and_repeat(anyio_backend: str) -> None:
    """Each case runs `repeat` times; results carry output, termination, scores, usage,
    cost and latency; aggregates count them."""
    agent = echo_agent(a="A", b="B")
    seen: list[CaseResult] = []
    report = await evaluate(
        agent, CASES, judges=[ExactMatch()], concurrency=2, repeat=2, on_result=seen.append
    )
    assert len(seen) == len(report.results) == 6
    assert [(r.case_id, r.repeat) for r in report.results] == [
        ("one", 0), ("one", 1), ("two", 0), ("two", 1), ("three", 0), ("three", 1)
    ]  # fmt: skip
    first = report.results[0]
    assert first.output == "A"
    assert first.termination == "answered"
    assert first.passed
    assert first.judgements["exact"].scores == {"exact": 1.0}
    assert first.usage.model_calls == 1
    assert first.cost_usd is not None
    assert first.cost_usd > 0
    assert first.latency_s is not None
    assert first.run_id
    assert first.summary is not None
    assert "answered" in first.summary
    third = report.by_case()["three"][0]
    assert not third.passed
    assert third.output == "c"
    agg = report.aggregates()
    assert agg.runs == agg.evaluated == 6
    assert agg.passed == 4
    assert agg.pass_rate == pytest.approx(4 / 6)
    assert agg.criteria == {"exact": pytest.approx(4 / 6)}
    assert agg.tokens == sum(r.tokens for r in report.results)
    assert agg.cost_usd == pytest.approx(sum(r.cost_usd or 0 for r in report.results))
    assert agg.latency_p50_s is not None
    assert agg.latency_p95_s is not None
    assert agg.latency_p95_s >= agg.latency_p50_s
    assert agg.terminations == {"answered": 6}
    assert report.complete
    assert report.judges == ("exact",)


@pytest.mark.anyio
async def test_concurrency_bounds_the_runs_in_flight(anyio_backend: str) -> None:
    """No more than `concurrency` runs are in flight at once, and all of them are used."""
    in_flight = peak = 0
    gate = anyio.Event()

    @tether.tool
    async def wait() -> str:
        """Wait for the gate."""
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if peak == 3:
            gate.set()
        await gate.wait()
        in_flight -= 1
        return "ok"

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        if ctx.call_index == 0:
            return Reply(tool_calls=[tether.providers.ToolCall(name="wait")])
        return Reply(text="done")

    agent = tether.Agent(name="waiter", provider=ScriptedProvider(script), tools=[wait])
    report = await evaluate(agent, [Case(str(i)) for i in range(9)], concurrency=3)
    assert peak == 3
    assert report.aggregates().passed == 9


@pytest.mark.anyio
async def test_plain_judges_work_as_evaluators(anyio_backend: str) -> None:
    """A RuleJudge and an LLMJudge are evaluators; the LLM judge's usage and cost count."""
    rule = tether.RuleJudge({"short": lambda c: len(c.text) < 3})
    verdict = '{"criteria": {"relevant": {"score": 0.9, "reason": "on topic"}}}'
    llm = tether.LLMJudge(
        provider=ScriptedProvider(
            lambda r, c: Reply(text=verdict), cost_per_mtok=Price(input=1.0, output=1.0)
        ),
        rubric={"relevant": "answers the question"},
    )
    report = await evaluate(
        echo_agent(a="A"), [Case("a", id="x")], judges={"rule": rule, "llm": llm}
    )
    (result,) = report.results
    assert result.judgements["rule"].passed
    assert result.judgements["llm"].scores == {"relevant": 0.9}
    assert result.scores == {"rule.short": 1.0, "llm.relevant": 0.9}
    assert result.judge_input_tokens > 0
    assert result.judge_cost_usd is not None
    assert result.judge_cost_usd > 0
    assert result.cost_usd == pytest.approx(result.usage.cost_usd + result.judge_cost_usd)
    assert report.aggregates().criteria == {"rule.short": 1.0, "llm.relevant": 0.9}


@pytest.mark.anyio
async def test_llm_rubric_sees_the_reference_answer(anyio_backend: str) -> None:
    """LLMRubric sends the case's expected answer to its model as the reference."""
    provider = ScriptedProvider(
        lambda r, c: Reply(text='{"criteria": {"correct": {"score": 0.2, "reason": "wrong"}}}'),
        record=True,
    )
    rubric = LLMRubric(provider=provider, rubric={"correct": "agrees with the reference"})
    report = await evaluate(echo_agent(), [Case("q", expected="Canberra")], judges=[rubric])
    (result,) = report.results
    assert not result.passed
    assert result.judgements["LLMRubric"].feedback == {"correct": "wrong"}
    ((_, request),) = provider.requests
    assert "<reference>\nCanberra\n</reference>" in (request.system or "")


@pytest.mark.anyio
async def test_a_judge_that_raises_fails_closed(anyio_backend: str) -> None:
    """A judge that raises fails that answer (its error kept); the eval goes on."""

    class Broken:
        async def judge(self, candidate: tether.Candidate) -> tether.Judgement:
            raise RuntimeError("boom")

    report = await evaluate(echo_agent(), CASES[:2], judges=[Broken()])
    assert [r.passed for r in report.results] == [False, False]
    error = report.results[0].judgements["Broken"].error
    assert error == "judge failed: RuntimeError: boom"


@pytest.mark.anyio
async def test_a_run_that_does_not_answer_fails_without_judging(anyio_backend: str) -> None:
    """A run that ends without an answer fails; the evaluators are not asked."""
    agent = tether.Agent(
        name="refuser",
        provider=ScriptedProvider(
            lambda r, c: Reply(text="no", stop_reason=tether.providers.StopReason.REFUSAL)
        ),
    )
    report = await evaluate(agent, CASES[:1], judges=[ExactMatch()])
    (result,) = report.results
    assert result.termination == "refusal"
    assert not result.passed
    assert result.judgements == {}


def test_bad_arguments_are_refused_at_once() -> None:
    """Bad judges, counts and limits are clear errors before anything runs."""

    async def go(**kwargs: Any) -> None:
        await evaluate(echo_agent(), CASES, **kwargs)

    with pytest.raises(TypeError, match="is not a judge"):
        anyio.run(lambda: go(judges=[object()]))
    with pytest.raises(ValueError, match="concurrency"):
        anyio.run(lambda: go(concurrency=0))
    with pytest.raises(ValueError, match="repeat"):
        anyio.run(lambda: go(repeat=0))
    with pytest.raises(TypeError, match=r"must be a tether\.Limits"):
        anyio.run(lambda: go(limits={"max_cost_usd": 1}))


@pytest.mark.anyio
async def test_the_budget_bounds_the_whole_eval(anyio_backend: str) -> None:
    """Once the eval's budget is spent no case starts; the rest are skipped and the
    report says it is incomplete and why."""
    agent = echo_agent()
    one = (await evaluate(agent, CASES[:1])).results[0].tokens
    cases = [Case(f"q{i}") for i in range(10)]
    limits = tether.Limits(max_total_tokens=3 * one)
    report = await evaluate(agent, cases, concurrency=1, limits=limits)
    statuses = [r.status for r in report.results]
    assert statuses.count("evaluated") == 3
    assert statuses[3:] == ["skipped"] * 7
    assert not report.complete
    assert report.stopped is not None
    assert "token budget is spent" in report.stopped
    assert report.aggregates().evaluated == 3


@pytest.mark.anyio
async def test_the_runtime_budget_ends_the_runs_in_flight(anyio_backend: str) -> None:
    """With many runs in flight, the Runtime-wide budget ends them at its ceiling: the
    eval's tokens stay within the limit, and the cases not started are skipped."""
    agent = tether.Agent(
        name="wordy",
        provider=ScriptedProvider(lambda r, c: Reply(text="x" * 400), latency_s=0.01),
    )
    one = (await evaluate(agent, CASES[:1])).results[0].tokens
    limit = 5 * one
    cases = [Case(f"q{i}") for i in range(40)]
    report = await evaluate(
        agent, cases, concurrency=8, limits=tether.Limits(max_total_tokens=limit)
    )
    totals = report.aggregates()
    assert totals.tokens <= limit
    assert totals.terminations.get("token_ceiling", 0) >= 1
    assert totals.terminations.get("skipped", 0) >= 1
    assert not report.complete
    # The runs the budget ended are not the agent's failures: they are not counted.
    ended = [r for r in report.results if r.termination == "token_ceiling"]
    assert {r.status for r in ended} == {"stopped"}
    assert all("runtime.max_total_tokens" in (r.note or "") for r in ended)
    assert totals.pass_rate == 1.0


@pytest.mark.anyio
async def test_a_runtimes_own_budget_applies(anyio_backend: str) -> None:
    """On a Runtime of the caller's, a spent Runtime budget stops the eval too."""
    agent = echo_agent()
    async with tether.Runtime(limits=tether.Limits(max_total_tokens=1)) as rt:
        await rt.run(agent, "spend it")
        report = await evaluate(agent, CASES, runtime=rt)
    assert [r.status for r in report.results] == ["skipped"] * 3
    assert report.stopped is not None
    assert "budget is spent" in report.stopped
    async with tether.Runtime() as rt:
        with pytest.raises(ValueError, match="not both"):
            await evaluate(agent, CASES, runtime=rt, limits=tether.Limits(max_cost_usd=1))


@pytest.mark.anyio
async def test_stop_keeps_partial_results(anyio_backend: str) -> None:
    """EvalControl.stop cancels the runs in flight and starts no more; the report keeps
    what was done (evaluated, stopped, skipped)."""
    control = EvalControl()
    release = anyio.Event()

    @tether.tool
    async def slow(i: int) -> str:
        """Slow unless released."""
        if i > 1:
            await release.wait()
        return "ok"

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        if ctx.call_index == 0:
            i = int(request.messages[-1].text)
            return Reply(tool_calls=[tether.providers.ToolCall(name="slow", arguments={"i": i})])
        return Reply(text="done")

    agent = tether.Agent(name="slow", provider=ScriptedProvider(script), tools=[slow])
    done: list[CaseResult] = []

    def on_result(result: CaseResult) -> None:
        done.append(result)
        if len(done) == 2:
            control.stop("enough")

    report = await evaluate(
        agent,
        [Case(str(i)) for i in range(8)],
        concurrency=4,
        control=control,
        on_result=on_result,
    )
    statuses = [r.status for r in report.results]
    assert statuses[:2] == ["evaluated", "evaluated"]
    # Cases 2 and 3 were in flight, and case 4 too when case 0's worker moved on
    # before case 1 landed: cancelled. The others never started.
    stopped = statuses.count("stopped")
    assert stopped in (2, 3)
    assert statuses[2:] == ["stopped"] * stopped + ["skipped"] * (6 - stopped)
    assert not report.complete
    assert report.stopped == "enough"
    assert report.aggregates().pass_rate == 1.0
    assert report.results[2].termination == "cancelled"


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["run", "judge"])
async def test_cancelling_evaluate_leaks_nothing(anyio_backend: str, where: str) -> None:
    """Cancelled while runs are in flight, or while a judge is judging, evaluate leaves
    no task behind."""
    reached = anyio.Event()
    before = task_names()

    class Waiting:
        async def judge(self, candidate: tether.Candidate) -> tether.Judgement:
            reached.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    @tether.tool
    async def hang() -> str:
        """Hang."""
        reached.set()
        await anyio.sleep_forever()
        return "never"

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        if where == "run" and ctx.call_index == 0:
            return Reply(tool_calls=[tether.providers.ToolCall(name="hang")])
        return Reply(text="x")

    agent = tether.Agent(name="hang", provider=ScriptedProvider(script), tools=[hang])
    judges = [Waiting()] if where == "judge" else []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def go() -> None:
                await evaluate(agent, CASES, judges=judges, concurrency=2)

            tg.start_soon(go)
            await reached.wait()
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert scope.cancelled_caught
    assert task_names() == before


# ------------------------------------------------------------------ reports


@pytest.mark.anyio
async def test_report_json_round_trips(anyio_backend: str, tmp_path: Path) -> None:
    """A saved report loads back equal, judgements and usage included."""
    report = await evaluate(echo_agent(a="A"), CASES, judges=[ExactMatch(), Contains()])
    path = tmp_path / "report.json"
    report.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == 1
    loaded = EvalReport.load(path)
    assert loaded == report
    assert loaded.aggregates() == report.aggregates()


def test_a_file_that_is_not_a_report_is_refused(tmp_path: Path) -> None:
    """Loading something else is a ReportError that says what is wrong."""
    path = tmp_path / "x.json"
    path.write_text('{"format": 99}')
    with pytest.raises(ReportError, match="format 1"):
        EvalReport.load(path)
    path.write_text('{"format": 1, "dataset": "d", "agent": "a", "results": [{"repeat": 0}]}')
    with pytest.raises(ReportError, match="not a valid eval report"):
        EvalReport.load(path)
    path.write_text("{")
    with pytest.raises(ReportError, match="cannot read it as JSON"):
        EvalReport.load(path)


@pytest.mark.anyio
async def test_compare_flags_the_cases_that_regressed(anyio_backend: str) -> None:
    """compare() gives per-case and aggregate deltas; cases that got worse are flagged."""
    judges = [ExactMatch()]
    before = await evaluate(echo_agent(a="A", b="B"), CASES, judges=judges)
    after = await evaluate(echo_agent(a="A", c="nope"), CASES, judges=judges)
    comparison = after.compare(before)
    assert [d.case_id for d in comparison.regressions] == ["two"]
    assert [d.case_id for d in comparison.improvements] == ["three"]
    two = next(d for d in comparison.cases if d.case_id == "two")
    assert two.pass_rate_before == 1.0
    assert two.pass_rate_after == 0.0
    assert two.pass_rate_delta == -1.0
    assert two.criteria == {"exact": (1.0, 0.0)}
    assert comparison.pass_rate_delta == 0.0
    assert comparison.criteria_deltas == {"exact": 0.0}
    assert comparison.cost_delta_usd is not None
    fewer = attrs.evolve(after, results=after.results[:2])
    assert fewer.compare(before).removed == ("three",)
    assert before.compare(fewer).added == ("three",)


def test_percentiles() -> None:
    """p50 and p95 interpolate between the sorted values."""
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == pytest.approx(50.5)
    assert percentile(values, 0.95) == pytest.approx(95.05)
    assert percentile([], 0.5) is None


@pytest.mark.anyio
async def test_html_is_self_contained(anyio_backend: str) -> None:
    """The page has its CSS and JS inline, loads nothing from elsewhere, and embeds the
    report's JSON (safely: a '</script>' in an answer does not end it)."""
    agent = echo_agent(a="</script><b>x</b>")
    report = await evaluate(agent, CASES, judges=[ExactMatch()])
    page = render_html(report, report)
    assert "<style>" in page
    assert "<script>" in page
    for remote in ("http://", "https://", "src=", "<link"):
        assert remote not in page
    assert "</script><b>" not in page
    start = page.index('id="report-data">') + len('id="report-data">')
    data = json.loads(page[start : page.index("</script>", start)])
    assert EvalReport.from_dict(data) == report


@attrs.frozen
class Trip:
    city: str
    days: int


@pytest.mark.anyio
async def test_typed_output_is_reported_and_compared_as_json(anyio_backend: str) -> None:
    """A typed output goes into the report as its JSON form, and JsonEqual compares it."""

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        days = 2 if "short" in request.messages[0].text else 9
        call = tether.providers.ToolCall(
            name="final_result", arguments={"city": "Lisbon", "days": days}
        )
        return Reply(tool_calls=[call])

    agent = tether.Agent(name="planner", provider=ScriptedProvider(script), output_type=Trip)
    cases = [
        Case("a short trip", expected={"city": "Lisbon", "days": 2}, id="short"),
        Case("a long trip", expected='{"days": 3, "city": "Lisbon"}', id="long"),
    ]
    report = await evaluate(agent, cases, judges=[JsonEqual()])
    short, long = report.results
    assert short.output == {"city": "Lisbon", "days": 2}
    assert short.passed
    assert not long.passed
    assert "expected" in long.judgements["json_equal"].feedback["json_equal"]


def test_import_tether_does_not_import_the_evals() -> None:
    """A program that does not use evals pays nothing for them: ``import tether`` (and the
    CLI's import) loads neither tether.evals nor PyYAML."""
    import subprocess

    code = (
        "import sys, tether, tether.cli; "
        "print(sorted(m for m in ('tether.evals', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
