"""``tether.otel``: runs as OpenTelemetry spans, checked with the SDK's in-memory exporter."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import tether
from tether import events as ev
from tether.otel import OtelSink, combine
from tether.providers import (
    FallbackProvider,
    Fault,
    InvalidRequest,
    RateLimited,
    Reply,
    ScriptedProvider,
    TokenUsage,
    ToolCall,
)

from .helpers import first, of
from .providers import responses_wire
from .providers.fakes import fake_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    await anyio.sleep(0.001)
    return a + b


@tether.tool
async def broken(x: int) -> int:
    """Always fails."""
    raise tether.ToolError("x must be prime")


def calc_agent(name: str = "calc", latency_s: float = 0.0) -> tether.Agent:
    script = [
        Reply(text="let me add", tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
        Reply(text="it is 3"),
    ]
    provider = ScriptedProvider(script, latency_s=latency_s, model="scripted-1")
    return tether.Agent(name=name, provider=provider, tools=[add, broken])


def by_name(spans: Sequence[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return sorted(
        (s for s in spans if s.name.startswith(prefix)),
        key=lambda s: (s.start_time or 0, s.name),
    )


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def ns(at: float) -> int:
    return int(at * 1_000_000_000)


async def test_one_run_with_a_tool(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """One run gives run, round, chat and tool spans, nested and timed from the events."""
    agent = calc_agent()
    sink = OtelSink(provider)
    async with tether.Runtime(event_sink=sink) as rt:
        result = await rt.run(agent, "1 + 2?")
    assert result.termination is tether.Termination.ANSWERED
    assert sink.open_runs == 0
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == sorted(
        [
            "invoke_agent calc",
            "tether.round",
            "tether.round",
            "chat scripted-1",
            "chat scripted-1",
            "execute_tool add",
        ]
    )

    (run,) = by_name(spans, "invoke_agent")
    rounds = by_name(spans, "tether.round")
    chats = by_name(spans, "chat")
    (tool,) = by_name(spans, "execute_tool")

    # Structure: run → round → model call / tool call, all in one trace.
    assert run.parent is None
    assert {s.context.trace_id for s in spans if s.context} == {run.context.trace_id}
    assert [parent_id(r) for r in rounds] == [span_id(run)] * 2
    assert [attrs_of(r)["tether.round"] for r in rounds] == [1, 2]
    assert [parent_id(c) for c in chats] == [span_id(r) for r in rounds]
    assert parent_id(tool) == span_id(rounds[0])

    # The run.
    a = attrs_of(run)
    assert run.kind is SpanKind.INTERNAL
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.agent.name"] == "calc"
    assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "scripted"
    assert a["gen_ai.request.model"] == "scripted-1"
    assert a["tether.run_id"] == result.run_id
    assert a["tether.termination"] == "answered"
    assert a["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    assert a["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    assert a["tether.usage.tool_calls"] == 1
    assert run.status.status_code is StatusCode.UNSET
    assert "tether.input" not in a  # content is opt-in

    # Model calls: usage and finish reasons from each ModelCallFinished.
    finished = of(result.events, ev.ModelCallFinished)
    assert len(finished) == 2
    for span, done in zip(chats, finished, strict=True):
        c = attrs_of(span)
        assert span.kind is SpanKind.CLIENT
        assert c["gen_ai.operation.name"] == "chat"
        assert c["gen_ai.request.model"] == "scripted-1"
        assert c["gen_ai.provider.name"] == "scripted"
        assert c["gen_ai.usage.input_tokens"] == done.usage.input_tokens > 0
        assert c["gen_ai.usage.output_tokens"] == done.usage.output_tokens > 0
        assert span.end_time == ns(done.at)
    assert [attrs_of(c)["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_use",),
        ("end_turn",),
    ]

    # The tool call.
    started = of(result.events, ev.ToolCallStarted)[0]
    t = attrs_of(tool)
    assert t["gen_ai.operation.name"] == "execute_tool"
    assert t["gen_ai.tool.name"] == "add"
    assert t["gen_ai.tool.call.id"] == started.call_id
    assert t["tether.tool.outcome"] == "ok"
    assert tool.status.status_code is StatusCode.UNSET
    assert tool.start_time == ns(started.at)

    # Times come from the events, and children sit inside their parents.
    assert run.start_time == ns(result.events[0].at)
    assert run.end_time == ns(result.events[-1].at)
    for child, parent in [(rounds[0], run), (rounds[1], run), (chats[0], rounds[0])]:
        assert parent.start_time is not None
        assert parent.end_time is not None
        assert child.start_time is not None
        assert child.end_time is not None
        assert parent.start_time <= child.start_time <= child.end_time <= parent.end_time


async def test_concurrent_runs_span_count_and_no_leak(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Concurrent runs get six spans each, one trace per run, and no span is left open."""
    n = 25
    agent = calc_agent(latency_s=0.005)
    sink = OtelSink(provider)
    async with tether.Runtime(event_sink=sink) as rt:
        handles = [rt.start(agent, f"q{i}") for i in range(n)]
        await first(handles[0], ev.ModelCallStarted)  # that run's spans are open...
        with anyio.fail_after(5):
            while not sink.open_runs:  # noqa: ASYNC110 - until the sink thread sees it
                await anyio.sleep(0.001)
        assert 0 < sink.open_runs <= n
        results = [await h.result() for h in handles]
    assert all(r.termination is tether.Termination.ANSWERED for r in results)
    assert sink.open_runs == 0
    spans = exporter.get_finished_spans()
    # Per run: the run, two rounds, two model calls, one tool call.
    assert len(spans) == 6 * n
    runs = by_name(spans, "invoke_agent")
    assert sorted(attrs_of(s)["tether.run_id"] for s in runs) == sorted(r.run_id for r in results)
    # One trace per run, each holding that run's six spans.
    traces: dict[int, int] = {}
    for span in spans:
        assert span.context is not None
        traces[span.context.trace_id] = traces.get(span.context.trace_id, 0) + 1
    assert sorted(traces.values()) == [6] * n


async def test_failures_are_errors(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A failed tool call and a failed model call make ERROR spans with their error.type."""
    tool_fails = tether.Agent(
        name="toolfail",
        provider=ScriptedProvider(
            [Reply(tool_calls=[ToolCall(name="broken", arguments={"x": 4})]), Reply(text="ok")]
        ),
        tools=[broken],
    )
    model_fails = tether.Agent(
        name="modelfail",
        provider=ScriptedProvider([Fault(error=InvalidRequest("bad request"))], model="m"),
    )
    sink = OtelSink(provider)
    async with tether.Runtime(event_sink=sink) as rt:
        first = await rt.run(tool_fails, "go")
        second = await rt.run(model_fails, "go")
    assert first.termination is tether.Termination.ANSWERED
    assert second.termination is tether.Termination.PROVIDER_FAILED
    assert sink.open_runs == 0
    spans = exporter.get_finished_spans()

    (tool,) = by_name(spans, "execute_tool")
    assert tool.status.status_code is StatusCode.ERROR
    assert attrs_of(tool)["error.type"] == "model_error"
    assert "prime" in (tool.status.description or "")

    (chat,) = by_name(spans, "chat m")
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs_of(chat)["error.type"] == "InvalidRequest"
    assert "gen_ai.usage.output_tokens" not in attrs_of(chat)
    (run,) = by_name(spans, "invoke_agent modelfail")
    assert run.status.status_code is StatusCode.ERROR
    assert attrs_of(run)["tether.termination"] == "provider_failed"
    assert attrs_of(run)["error.type"] == "provider_failed"
    assert parent_id(chat) is not None
    assert all(s.end_time is not None for s in spans)


async def test_cancelled_mid_call_closes_every_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A run cancelled mid model call closes every span, the chat and run ones as ERROR."""
    agent = calc_agent(latency_s=30)
    sink = OtelSink(provider)
    async with tether.Runtime(event_sink=sink) as rt:
        handle = rt.start(agent, "slow")
        async for event in handle.events():
            if isinstance(event, ev.ModelCallStarted):
                handle.cancel("user pressed stop")
        result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    assert sink.open_runs == 0
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["chat scripted-1", "invoke_agent calc", "tether.round"]
    (chat,) = by_name(spans, "chat")
    assert chat.status.status_code is StatusCode.ERROR
    (run,) = by_name(spans, "invoke_agent")
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "user pressed stop"
    assert attrs_of(run)["tether.termination"] == "cancelled"


async def test_capture_content(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    """capture_content=True records the input, output, tool arguments and tool result."""
    agent = calc_agent()
    async with tether.Runtime(event_sink=OtelSink(provider, capture_content=True)) as rt:
        await rt.run(agent, "1 + 2?")
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent")
    assert attrs_of(run)["tether.input"] == "1 + 2?"
    assert attrs_of(run)["tether.output"] == "it is 3"
    (tool,) = by_name(spans, "execute_tool")
    assert attrs_of(tool)["gen_ai.tool.call.arguments"] == '{"a": 1, "b": 2}'
    assert attrs_of(tool)["gen_ai.tool.call.result"] == "3"


async def test_model_name_comes_from_the_events(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Without agents given, the provider and model come from RunStarted."""
    async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
        await rt.run(calc_agent(), "1 + 2?")
    spans = exporter.get_finished_spans()
    assert len(by_name(spans, "chat")) == 2
    assert {s.name for s in by_name(spans, "chat")} == {"chat scripted-1"}
    assert attrs_of(by_name(spans, "chat")[0])["gen_ai.request.model"] == "scripted-1"


async def test_chat_span_names_the_model_a_fallback_answered_with(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A call a FallbackProvider moved is named after the model that answered, and so are later."""
    primary = ScriptedProvider([Fault(error=RateLimited("slow down"))], model="primary-1")
    script = [
        Reply(text="let me add", tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
        Reply(text="it is 3"),
    ]
    secondary = ScriptedProvider(script, model="secondary-1", name="other")
    agent = tether.Agent(
        name="calc",
        provider=FallbackProvider([primary, secondary]),
        tools=[add],
        limits=tether.Limits(max_provider_attempts=1),
    )
    async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
        result = await rt.run(agent, "1 + 2?")
    assert result.termination is tether.Termination.ANSWERED
    chats = by_name(exporter.get_finished_spans(), "chat")
    assert [s.name for s in chats] == ["chat secondary-1", "chat secondary-1"]
    first = chats[0]
    assert attrs_of(first)["gen_ai.request.model"] == "secondary-1"
    assert attrs_of(first)["gen_ai.provider.name"] == "other"
    (switch,) = [e for e in first.events if e.name == "tether.provider_fallback"]
    assert switch.attributes is not None
    assert switch.attributes["tether.from_model"] == "primary-1"
    assert switch.attributes["error.type"] == "rate_limited"
    assert attrs_of(chats[1])["gen_ai.provider.name"] == "other"


async def test_cache_tokens_are_on_the_chat_and_run_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Cache reads and writes show on the chat span and, summed, on the run span."""
    usage = TokenUsage(input_tokens=5, output_tokens=2, cache_read_tokens=100, cache_write_tokens=7)
    agent = tether.Agent(name="cached", provider=ScriptedProvider([Reply(text="hi", usage=usage)]))
    async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
        await rt.run(agent, "q")
    spans = exporter.get_finished_spans()
    for span in (by_name(spans, "chat")[0], by_name(spans, "invoke_agent")[0]):
        attributes = attrs_of(span)
        assert attributes["gen_ai.usage.input_tokens"] == 112
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == 100
        assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 7


async def test_run_span_nests_under_the_current_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A run started inside a host span (an HTTP request, say) is its child."""
    agent = calc_agent()
    tracer = provider.get_tracer("host")
    async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
        with tracer.start_as_current_span("request") as request:
            handle = rt.start(agent, "q")
        await handle.result()
    (run,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert parent_id(run) == request.get_span_context().span_id


async def test_sub_agent_run_nests_under_the_tool_call(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A sub-agent's run span nests under the parent's tool call span, in one trace."""
    child = calc_agent("child")
    holder: list[tether.Runtime] = []

    @tether.tool
    async def delegate(question: str) -> str:
        """Ask the child agent."""
        handle = holder[0].start(child, question, parent_run_id="parent-1")
        result = await handle.result()
        return result.output or ""

    parent = tether.Agent(
        name="parent",
        provider=ScriptedProvider(
            [
                Reply(tool_calls=[ToolCall(name="delegate", arguments={"question": "1+2"})]),
                Reply(text="done"),
            ]
        ),
        tools=[delegate],
    )
    async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
        holder.append(rt)
        await rt.run(parent, "go", run_id="parent-1")
    spans = exporter.get_finished_spans()
    (tool,) = by_name(spans, "execute_tool delegate")
    (child_run,) = by_name(spans, "invoke_agent child")
    assert parent_id(child_run) == span_id(tool)
    assert attrs_of(child_run)["tether.parent_run_id"] == "parent-1"
    assert len({s.context.trace_id for s in spans if s.context}) == 1


class _BrokenTracerProvider(trace.TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _BrokenTracer()


class _BrokenTracer(trace.NoOpTracer):
    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError("exporter on fire")


async def test_a_failing_tracer_never_reaches_the_runtime(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tracer that raises is logged once; the runs still answer and nothing stays open."""
    sink = OtelSink(_BrokenTracerProvider())
    with caplog.at_level(logging.ERROR, logger="tether.otel"):
        async with tether.Runtime(event_sink=sink) as rt:
            first = await rt.run(calc_agent(), "q")
            second = await rt.run(calc_agent(), "q")
    assert first.ok
    assert second.ok
    assert sink.open_runs == 0
    assert len([r for r in caplog.records if r.name == "tether.otel"]) == 1


async def test_combine_fans_out_and_skips_a_failing_sink(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """combine() feeds every sink, skips None, and warns about (not raises) a failing one."""
    seen: list[ev.Event] = []

    def bad(event: ev.Event) -> None:
        raise ValueError("nope")

    sink = combine(seen.append, None, bad, OtelSink(provider))
    with pytest.warns(RuntimeWarning, match="nope"):
        async with tether.Runtime(event_sink=sink) as rt:
            result = await rt.run(calc_agent(), "q")
    assert seen == list(result.events)
    assert len(exporter.get_finished_spans()) == 6


def test_an_mcp_server_restart_is_an_event_of_the_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """MCPServerRestarted becomes a span event on its run, naming the server."""
    sink = OtelSink(provider)
    sink(ev.RunStarted(run_id="r", seq=0, round=0, at=1.0, agent="a", input="q"))
    sink(
        ev.MCPServerRestarted(
            run_id="r", seq=1, round=2, at=2.0, server="box", restarts=1, error="gone"
        )
    )
    usage = tether.Usage()
    sink(
        ev.RunFinished(
            run_id="r", seq=2, round=2, at=3.0, termination=tether.Termination.ANSWERED, usage=usage
        )
    )
    (run,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    (event,) = [e for e in run.events if e.name == "tether.mcp_server_restarted"]
    assert dict(event.attributes or {}) == {
        "tether.mcp.server": "box",
        "tether.mcp.restarts": 1,
        "tether.error": "gone",
    }


def test_combine_rejects_non_callables() -> None:
    """combine() refuses a sink that is not callable with TypeError."""
    with pytest.raises(TypeError, match="callables"):
        combine(42)  # type: ignore[arg-type]


def test_import_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing tether.otel without OpenTelemetry fails naming the tether[otel] extra."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "tether.otel")
    with pytest.raises(ImportError, match=r"tether\[otel\]"):
        importlib.import_module("tether.otel")


async def test_a_responses_run_names_the_vendor_and_its_reasoning_tokens(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """OpenAIResponsesProvider: gen_ai.provider.name is openai (tether's name beside it);
    the chat span has the reasoning tokens and the wire's finish reason."""
    async with fake_server(responses_wire.reply(True)) as server:
        agent = tether.Agent(name="r", provider=responses_wire.provider(server.url))
        async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
            result = await rt.run(agent, "hi")
    assert result.termination is tether.Termination.ANSWERED
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent")
    (chat,) = by_name(spans, "chat")
    for span in (run, chat):
        assert attrs_of(span)["gen_ai.provider.name"] == "openai"
        assert attrs_of(span)["gen_ai.system"] == "openai"
        assert attrs_of(span)["tether.provider"] == "openai-responses"
    assert chat.name == f"chat {responses_wire.MODEL}"
    assert attrs_of(chat)["tether.usage.reasoning_tokens"] == 5
    assert attrs_of(chat)["gen_ai.usage.output_tokens"] == 12
    assert attrs_of(chat)["gen_ai.usage.cache_read.input_tokens"] == 10
    assert attrs_of(chat)["gen_ai.response.finish_reasons"] == ("completed",)


async def test_a_gemini_run_has_the_semantic_conventions_names(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """GeminiProvider against its fake server: gen_ai.provider.name is gcp.gemini, thinking
    tokens are output tokens, the cached prompt part shows, the finish reason is Gemini's."""
    from .providers import gemini_wire as gem
    from .providers.fakes import fake_server

    async with fake_server(gem.reply(True)) as server:
        agent = tether.Agent(name="g", provider=gem.provider(server.url))
        async with tether.Runtime(event_sink=OtelSink(provider)) as rt:
            result = await rt.run(agent, "hi")
    assert result.termination is tether.Termination.ANSWERED
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent")
    (chat,) = by_name(spans, "chat")
    assert attrs_of(run)["gen_ai.provider.name"] == "gcp.gemini"
    assert attrs_of(run)["tether.provider"] == "gemini"
    attributes = attrs_of(chat)
    assert attributes["tether.usage.reasoning_tokens"] == 5
    assert chat.name == f"chat {gem.MODEL}"
    assert attributes["gen_ai.provider.name"] == attributes["gen_ai.system"] == "gcp.gemini"
    assert attributes["gen_ai.usage.input_tokens"] == 30
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 10
    assert attributes["gen_ai.usage.output_tokens"] == 17
    assert attributes["gen_ai.response.finish_reasons"] == ("STOP",)
