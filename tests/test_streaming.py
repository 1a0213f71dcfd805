"""Streaming (docs/guides/streaming.md): live deltas, stream_text, slow readers, sinks."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.cli._run_cmd import _follow
from tether.providers import Fault, Reply, ScriptedProvider, StreamInterrupted, ToolCall
from tether.runtime import combine

from .helpers import add, assert_consistent, kinds, of

pytestmark = pytest.mark.anyio

ANSWER = "The sum of two and three is five."


def chunked(script: list[Any], size: int = 4, latency: float = 0.0005) -> ScriptedProvider:
    return ScriptedProvider(script, chunk_size=size, chunk_latency_s=latency)


def tool_agent(size: int = 4) -> tether.Agent:
    """A tool round (arguments streamed), then a streamed answer."""
    script = [
        Reply(text="Let me add.", tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})]),
        Reply(text=ANSWER),
    ]
    return tether.Agent(name="adder", provider=chunked(script, size), tools=[add])


def finished_text(result: tether.RunResult) -> list[str]:
    return [e.text for e in of(result.events, ev.ModelCallFinished)]


async def test_stream_text_yields_every_call_text_as_it_arrives() -> None:
    """stream_text() gives the calls' text in chunks, joined equal to ModelCallFinished's."""
    async with tether.Runtime() as rt:
        handle = rt.start(tool_agent(), "2 + 3?")
        chunks = [chunk async for chunk in handle.stream_text()]
        result = await handle.result()
    assert_consistent(result)
    assert result.output == ANSWER
    assert len(chunks) > 2, "the text arrived in pieces"
    assert "".join(chunks) == "".join(finished_text(result)) == "Let me add." + ANSWER


async def test_deltas_are_live_only_and_take_no_seq() -> None:
    """events(deltas=True) interleaves deltas in order; none is kept, seq stays gap-free."""
    async with tether.Runtime() as rt:
        handle = rt.start(tool_agent(), "2 + 3?")
        live = [e async for e in handle.events(deltas=True)]
        result = await handle.result()
    assert_consistent(result)  # gap-free seq over the kept events
    assert not [e for e in result.events if isinstance(e, ev.DELTA_TYPES)]
    kept = [e for e in live if not isinstance(e, ev.DELTA_TYPES)]
    assert kept == list(result.events), "the kept events come whole and in order"
    for i, event in enumerate(live):
        if isinstance(event, ev.DELTA_TYPES):
            # A delta carries the seq and round of the kept event before it.
            before = next(e for e in reversed(live[:i]) if not isinstance(e, ev.DELTA_TYPES))
            assert (event.seq, event.round) == (before.seq, before.round)
    # Each call's deltas sit between its ModelCallStarted and ModelCallFinished.
    names = kinds(live)
    first, last = names.index("TextDelta"), names.index("ModelCallFinished")
    assert names.index("ModelCallStarted") < first < last
    texts = of(live, ev.TextDelta)
    assert {t.call_index for t in texts} == {0, 1}
    for index, text in enumerate(finished_text(result)):
        assert "".join(t.text for t in texts if t.call_index == index) == text
    calls = of(live, ev.ToolCallDelta)
    assert len(calls) > 1
    assert {(c.call_id, c.name) for c in calls} == {("call_0_0", "add")}
    assert json.loads("".join(c.arguments_delta for c in calls)) == {"a": 2, "b": 3}


async def test_a_blocked_reader_never_stalls_the_run_and_gets_the_text_joined() -> None:
    """A delta reader that blocks until the run is over gets every call's text, joined."""
    release = anyio.Event()
    got: list[ev.Event] = []
    text: list[str] = []

    async def slow_events(handle: tether.RunHandle) -> None:
        stream = handle.events(deltas=True)
        await release.wait()
        got.extend([e async for e in stream])

    async def slow_text(handle: tether.RunHandle) -> None:
        stream = handle.stream_text()
        await release.wait()
        text.extend([c async for c in stream])

    with anyio.fail_after(20):
        async with tether.Runtime() as rt, anyio.create_task_group() as tg:
            handle = rt.start(tool_agent(size=1), "2 + 3?")
            tg.start_soon(slow_events, handle)
            tg.start_soon(slow_text, handle)
            result = await handle.result()  # the readers have not read a thing yet
            release.set()
    assert_consistent(result)
    whole = finished_text(result)
    # Coalesced, never dropped: one text delta per call, one per tool call.
    deltas = of(got, ev.TextDelta)
    assert [d.text for d in deltas] == whole
    assert text == whole
    (arguments,) = of(got, ev.ToolCallDelta)
    assert json.loads(arguments.arguments_delta) == {"a": 2, "b": 3}
    assert [e for e in got if not isinstance(e, ev.DELTA_TYPES)] == list(result.events)


async def test_a_run_nobody_streams_builds_no_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a delta reader or sink, no delta event is ever built; plain events() see none."""

    def built(*args: object, **kwargs: object) -> None:
        raise AssertionError("a delta was built for a run nobody streams")

    monkeypatch.setattr("tether.runtime._modelcall._live", built)
    async with tether.Runtime() as rt:
        handle = rt.start(tool_agent(), "2 + 3?")
        seen = [e async for e in handle.events()]
        result = await handle.result()
    assert result.termination is tether.Termination.ANSWERED
    assert seen == list(result.events)


async def test_plain_followers_see_no_deltas_beside_a_streaming_one() -> None:
    """A reader of events() gets the kept events only, while another reader streams."""
    async with tether.Runtime() as rt:
        handle = rt.start(tool_agent(), "2 + 3?")
        text = handle.stream_text()
        plain = [e async for e in handle.events()]
        chunks = [c async for c in text]
        result = await handle.result()
    assert plain == list(result.events)
    assert "".join(chunks) == "".join(finished_text(result))


async def test_readers_after_the_end_get_no_deltas() -> None:
    """Deltas are never replayed: after the run, stream_text() is empty, events() kept only."""
    async with tether.Runtime() as rt:
        handle = rt.start(tool_agent(), "2 + 3?")
        result = await handle.result()
        assert [c async for c in handle.stream_text()] == []
        assert [e async for e in handle.events(deltas=True)] == list(result.events)


async def test_a_retried_call_streams_again_with_its_attempt() -> None:
    """Text streamed before a provider retry is followed by the retried attempt's text."""
    script = [Fault(error=StreamInterrupted("cut"), after_text="The su"), Reply(text=ANSWER)]
    agent = tether.Agent(name="retry", provider=chunked(script))
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        live = [e async for e in handle.events(deltas=True)]
        result = await handle.result()
    assert result.output == ANSWER
    texts = of(live, ev.TextDelta)
    assert {t.call_index for t in texts} == {0}
    assert "".join(t.text for t in texts if t.attempt == 1) == "The su"
    assert "".join(t.text for t in texts if t.attempt == 2) == ANSWER
    retry = next(i for i, e in enumerate(live) if isinstance(e, ev.ProviderRetry))
    assert all(t.attempt == 2 for t in of(live[retry:], ev.TextDelta))


async def test_a_reader_that_stops_early_unsubscribes() -> None:
    """Breaking out of a delta stream (or aclose) drops its buffer: the run streams to no one."""
    async with tether.Runtime() as rt:
        handle = rt.start(tool_agent(), "2 + 3?")
        run = handle._run
        stream = handle.stream_text()
        assert run.trail.streaming
        async for _ in stream:
            break
        await stream.aclose()
        assert not run.trail.streaming
        events = handle.events(deltas=True)
        async for _ in events:
            break
        del events
        text = handle.stream_text()  # a delta now finds the dead reader and prunes it
        await handle.result()
        del text
    assert handle.done


class Recorder:
    """A sink that keeps what it gets (from the sink thread)."""

    def __init__(self, deltas: bool) -> None:
        self.deltas = deltas
        self.events: list[ev.Event] = []
        self._lock = threading.Lock()

    def __call__(self, event: ev.Event) -> None:
        with self._lock:
            self.events.append(event)


async def test_sinks_get_deltas_only_when_they_ask() -> None:
    """A sink with deltas = True gets the deltas in order; another sink beside it none."""
    live, plain = Recorder(deltas=True), Recorder(deltas=False)
    async with tether.Runtime(event_sink=combine(live, plain)) as rt:
        result = await rt.run(tool_agent(), "2 + 3?")
    assert plain.events == list(result.events)
    assert [e for e in live.events if not isinstance(e, ev.DELTA_TYPES)] == list(result.events)
    texts = of(live.events, ev.TextDelta)
    assert texts, "the opted-in sink got text deltas"
    for index, text in enumerate(finished_text(result)):
        assert "".join(t.text for t in texts if t.call_index == index) == text


async def test_a_plain_sink_alone_makes_no_deltas() -> None:
    """A sink that does not ask for deltas does not make the runs build them."""
    sink = Recorder(deltas=False)
    async with tether.Runtime(event_sink=sink) as rt:
        handle = rt.start(tool_agent(), "2 + 3?")
        assert not handle._run.trail.streaming
        result = await handle.result()
    assert sink.events == list(result.events)


async def test_jsonl_sink_writes_deltas_when_asked(tmp_path: Path) -> None:
    """JsonlSink(deltas=True) writes the deltas too, and they load back."""
    path = tmp_path / "live.jsonl"
    with tether.JsonlSink(path, deltas=True) as sink:
        async with tether.Runtime(event_sink=sink) as rt:
            result = await rt.run(tool_agent(), "2 + 3?")
    loaded = [ev.load(json.loads(line)) for line in path.read_text().splitlines()]
    assert [e for e in loaded if not isinstance(e, ev.DELTA_TYPES)] == list(result.events)
    text = "".join(e.text for e in of(loaded, ev.TextDelta))
    assert text == "".join(finished_text(result))


def test_delta_events_dump_and_load() -> None:
    """TextDelta and ToolCallDelta round-trip through dump/load like every event."""
    head = {"run_id": "r", "seq": 3, "round": 1, "at": 1.5}
    for event in (
        ev.TextDelta(**head, text="hé", call_index=0, attempt=2),
        ev.ToolCallDelta(**head, call_id="c", name="add", arguments_delta='{"a"', call_index=1),
    ):
        assert ev.load(json.loads(json.dumps(ev.dump(event)))) == event


class Recording(io.StringIO):
    """stdout for `tether run`: notes whether the run was still going at each write."""

    def __init__(self) -> None:
        super().__init__()
        self.handle: tether.RunHandle | None = None
        self.while_running: list[str] = []

    def write(self, text: str) -> int:
        if self.handle is not None and not self.handle.done and text.strip():
            self.while_running.append(text)
        return super().write(text)


async def test_tether_run_prints_the_answer_as_it_streams() -> None:
    """`tether run` writes each call's text piece by piece while the run goes on."""
    out, err = Recording(), io.StringIO()
    async with tether.Runtime() as rt:
        handle = out.handle = rt.start(tool_agent(), "2 + 3?")
        await _follow(handle, out, err)
    assert out.getvalue() == "Let me add.\n" + ANSWER + "\n"
    assert len(out.while_running) > 4, "the text went out in pieces, before the run ended"
    assert "".join(out.while_running) == "Let me add." + ANSWER
    assert "· tool add" in err.getvalue()


async def test_demo_streams_the_text_of_the_run_in_focus() -> None:
    """The demo's live view follows one run in flight at a time with stream_text()."""
    from rich.console import Console

    from tether.cli._demo_agents import build
    from tether.cli._demo_cmd import DemoStats, _demo

    agents = build(6, seed=0, latency_scale=0.1)
    stats = DemoStats(total=len(agents))
    seen: list[tuple[str | None, str]] = []
    original = DemoStats.stream

    def stream(self: DemoStats, chunk: str) -> None:
        original(self, chunk)
        seen.append((self.focus_id, chunk))

    DemoStats.stream = stream  # type: ignore[method-assign]
    try:
        tally = await _demo(agents, stats, None, Console(file=io.StringIO()))
    finally:
        DemoStats.stream = original  # type: ignore[method-assign]
    assert len(tally.results) == len(agents)
    assert seen, "the focus streamed some text"
    assert {focus for focus, _ in seen} <= {a.run_id for a in agents}


async def test_tether_trace_reads_a_file_with_deltas_as_the_kept_trail(tmp_path: Path) -> None:
    """`tether trace` skips the deltas of a JsonlSink(deltas=True) file: no false seq gaps."""
    from tether.cli._trace_cmd import read_trace

    path = tmp_path / "live.jsonl"
    with tether.JsonlSink(path, deltas=True) as sink:
        async with tether.Runtime(event_sink=sink) as rt:
            result = await rt.run(tool_agent(), "2 + 3?")
    assert read_trace(str(path)) == {result.run_id: list(result.events)}


class BlockedSink(Recorder):
    """A delta sink whose first call blocks until the test lets it go."""

    def __init__(self) -> None:
        super().__init__(deltas=True)
        self.release = threading.Event()

    def __call__(self, event: ev.Event) -> None:
        self.release.wait(10)
        super().__call__(event)


async def test_a_blocked_delta_sink_gets_the_text_joined_and_every_event() -> None:
    """A delta sink that blocks while the run streams gets each call's text joined, nothing
    dropped, the kept events whole and in order; the run never waits for it."""
    sink = BlockedSink()
    async with tether.Runtime(event_sink=sink) as rt:
        result = await rt.run(tool_agent(size=1), "2 + 3?")  # the sink has not returned once
        sink.release.set()
    assert rt.sink_status is not None
    assert rt.sink_status.dropped == 0
    assert [e for e in sink.events if not isinstance(e, ev.DELTA_TYPES)] == list(result.events)
    texts = of(sink.events, ev.TextDelta)
    # The first delta may have reached the sink before it blocked; the rest were joined.
    assert len(texts) <= 2 * len(finished_text(result))
    for index, text in enumerate(finished_text(result)):
        assert "".join(t.text for t in texts if t.call_index == index) == text
    arguments = "".join(d.arguments_delta for d in of(sink.events, ev.ToolCallDelta))
    assert json.loads(arguments) == {"a": 2, "b": 3}


@tether.tool
async def narrate(ctx: tether.RunContext, topic: str) -> str:
    """Stream a little about a topic, then return it whole."""
    for piece in ("once ", "upon ", topic):
        ctx.emit_output(piece)
        await anyio.lowlevel.checkpoint()
    return f"once upon {topic}"


def narrator() -> tether.Agent:
    provider = ScriptedProvider(
        [
            Reply(tool_calls=[ToolCall(name="narrate", arguments={"topic": "a time"})]),
            Reply(text="ok"),
        ]
    )
    return tether.Agent(name="narrator", provider=provider, tools=[narrate])


async def test_a_tool_streams_its_output_as_tool_output_deltas() -> None:
    """RunContext.emit_output reaches delta readers as ToolOutputDelta (with the call's
    id and tool name), in order and whole, and is never kept in the trail."""
    async with tether.Runtime() as rt:
        handle = rt.start(narrator(), "go")
        seen = [e async for e in handle.events(deltas=True)]
        result = await handle.result()
    deltas = [e for e in seen if isinstance(e, ev.ToolOutputDelta)]
    [started] = of(result.events, ev.ToolCallStarted)
    assert {(d.call_id, d.name) for d in deltas} == {(started.call_id, "narrate")}
    assert "".join(d.text for d in deltas) == "once upon a time"
    assert not any(isinstance(e, ev.ToolOutputDelta) for e in result.events)
    assert_consistent(result)


async def test_tool_output_deltas_cost_nothing_unread() -> None:
    """Nobody reads deltas: emit_output builds none and the run is as without it."""
    async with tether.Runtime() as rt:
        result = await rt.run(narrator(), "go")
    assert result.ok
    assert not any(isinstance(e, ev.ToolOutputDelta) for e in result.events)
