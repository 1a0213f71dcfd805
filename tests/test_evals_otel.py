"""OtelEvalRecorder: gen_ai.evaluation.result events for each evaluated case."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tether
from tether.evals import Case, ExactMatch, evaluate
from tether.otel import OtelEvalRecorder, OtelSink
from tether.providers import Reply, ScriptedProvider


@pytest.mark.anyio
async def test_each_case_records_evaluation_result_events(anyio_backend: str) -> None:
    """One span per evaluated case, one gen_ai.evaluation.result event per criterion,
    with the GenAI conventions' attribute names; a failed judge is an error.type."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    class Broken:
        async def judge(self, candidate: tether.Candidate) -> tether.Judgement:
            raise RuntimeError("boom")

    agent = tether.Agent(name="a", provider=ScriptedProvider(lambda r, c: Reply(text="Paris")))
    cases = [Case("q1", expected="Paris", id="good"), Case("q2", expected="Rome", id="bad")]
    async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
        report = await evaluate(
            agent,
            cases,
            judges={"exact": ExactMatch(), "broken": Broken()},
            on_result=OtelEvalRecorder(provider),
            runtime=rt,
        )
    finished = exporter.get_finished_spans()
    spans = {
        s.attributes["tether.eval.case_id"]: s for s in finished if s.name == "tether.eval_case"
    }
    assert set(spans) == {"good", "bad"}
    good, bad = spans["good"], spans["bad"]
    assert good.attributes["tether.run_id"] == report.results[0].run_id
    # The run's own span is a child of its case's span.
    runs = [s for s in finished if s.name.startswith("invoke_agent")]
    assert len(runs) == 2
    (run,) = [s for s in runs if s.attributes["tether.run_id"] == report.results[0].run_id]
    assert run.parent is not None
    assert run.parent.span_id == good.context.span_id
    events = [e for e in good.events if e.name == "gen_ai.evaluation.result"]
    exact = next(e for e in events if e.attributes["gen_ai.evaluation.name"] == "exact")
    assert exact.attributes["gen_ai.evaluation.score.value"] == 1.0
    assert exact.attributes["gen_ai.evaluation.score.label"] == "pass"
    broken = next(e for e in events if e.attributes["gen_ai.evaluation.name"] == "broken")
    assert broken.attributes["error.type"] == "judge_error"
    assert "boom" in broken.attributes["gen_ai.evaluation.explanation"]
    miss = next(e for e in bad.events if e.attributes.get("gen_ai.evaluation.name") == "exact")
    assert miss.attributes["gen_ai.evaluation.score.label"] == "fail"
    assert "expected Rome, got Paris" in miss.attributes["gen_ai.evaluation.explanation"]
    assert not bad.status.is_ok


@pytest.mark.anyio
async def test_a_cancelled_eval_ends_its_case_spans(anyio_backend: str) -> None:
    """Cancelled mid-run, every case span the recorder opened is ended, as an error."""
    import anyio

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    started = anyio.Event()

    def script(request: object, ctx: object) -> Reply:
        started.set()
        return Reply(text="x")

    agent = tether.Agent(name="a", provider=ScriptedProvider(script, latency_s=60))
    recorder = OtelEvalRecorder(provider)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: evaluate(agent, [Case("q1"), Case("q2")], on_result=recorder))
            await started.wait()
            scope.cancel()
    spans = [s for s in exporter.get_finished_spans() if s.name == "tether.eval_case"]
    assert len(spans) == 2
    assert all(not s.status.is_ok for s in spans)
    assert recorder._open == {}
