"""Event sinks: ``JsonlSink`` and the Runtime's handling of a failing sink."""

from __future__ import annotations

import contextvars
import errno
import json
import math
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall
from tether.runtime import _sinks as sinks
from tether.runtime._sinks import JsonlSink

from .helpers import of

pytestmark = pytest.mark.anyio


@tether.tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def _agent(name: str = "sinky") -> tether.Agent:
    """Two tool rounds, then an answer: three round boundaries."""
    script = [
        Reply(text="looking", tool_calls=[ToolCall(name="lookup", arguments={"topic": "a"})]),
        Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": "b"})]),
        Reply(text="done"),
    ]
    return tether.Agent(name=name, provider=ScriptedProvider(script), tools=[lookup])


def _read(path: Path) -> list[dict[str, Any]]:
    def no_constants(name: str) -> Any:
        raise ValueError(f"not strict JSON: {name}")

    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line, parse_constant=no_constants) for line in lines]


async def test_jsonl_round_trip(tmp_path: Path) -> None:
    """Every event of every run is one strict-JSON line that loads back to an equal event."""
    path = tmp_path / "events.jsonl"
    with JsonlSink(path) as sink:
        async with tether.Runtime(event_sink=sink) as rt:
            first = await rt.run(_agent("one"), "q1")
            second = await rt.run(_agent("two"), "q2")
    lines = _read(path)
    assert [ev.load(data) for data in lines] == [*first.events, *second.events]
    assert [data["type"] for data in lines] == [
        type(e).__name__ for e in (*first.events, *second.events)
    ]


async def test_flushes_at_round_boundaries(tmp_path: Path) -> None:
    """The file holds every event up to the last Transition, and all of them after RunFinished."""
    path = tmp_path / "events.jsonl"
    sink = JsonlSink(path)
    seen: list[ev.Event] = []
    on_disk: list[int] = []

    def spy(event: ev.Event) -> None:
        sink(event)
        seen.append(event)
        on_disk.append(len(path.read_text(encoding="utf-8").splitlines()))

    try:
        async with tether.Runtime(event_sink=spy) as rt:
            result = await rt.run(_agent(), "q")
    finally:
        sink.close()
    flushed = 0
    for event, lines in zip(seen, on_disk, strict=True):
        if isinstance(event, ev.Transition | ev.RunFinished):
            flushed = event.seq + 1
        assert lines == flushed, f"after {type(event).__name__} seq={event.seq}"
    transitions = of(result.events, ev.Transition)
    assert len(transitions) == 3
    # Mid-run, after the first round: that round is on disk, the run not yet finished.
    assert 0 < on_disk[transitions[0].seq] < len(result.events)


def test_close_flushes_and_refuses_more(tmp_path: Path) -> None:
    """close() writes what is buffered; a closed sink raises; closing twice is fine."""
    path = tmp_path / "events.jsonl"
    sink = JsonlSink(path)
    event = ev.StageEntered(run_id="r", seq=0, round=0, at=1.0, stage="input")
    sink(event)
    assert path.read_text(encoding="utf-8") == ""
    sink.close()
    sink.close()
    assert sink.closed
    assert [ev.load(d) for d in _read(path)] == [event]
    with pytest.raises(RuntimeError, match="closed"):
        sink(event)


def test_append_by_default_and_truncate_on_request(tmp_path: Path) -> None:
    """The default mode appends to an existing file; mode='w' starts it afresh."""
    path = tmp_path / "events.jsonl"
    event = ev.Transition(run_id="r", seq=0, round=1, at=1.0, kind="continue", reason="tool_use")
    for _ in range(2):
        with JsonlSink(path) as sink:
            sink(event)
    assert len(_read(path)) == 2
    with JsonlSink(path, mode="w") as sink:
        sink(event)
    assert len(_read(path)) == 1


def test_max_buffered_bounds_memory(tmp_path: Path) -> None:
    """A long round is written out whenever max_buffered lines wait."""
    path = tmp_path / "events.jsonl"
    with JsonlSink(path, max_buffered=3) as sink:
        for seq in range(7):
            sink(ev.StageEntered(run_id="r", seq=seq, round=0, at=1.0, stage="input"))
        assert len(_read(path)) == 6


@pytest.mark.parametrize(
    "bad",
    [
        ev.ToolCallStarted(
            run_id="r", seq=3, round=1, at=1.0, call_id="c", name="t", arguments={"x": object()}
        ),
        ev.CeilingHit(run_id="r", seq=3, round=1, at=1.0, ceiling="x", limit=1.0, used=math.nan),
    ],
)
def test_non_json_field_is_an_error_not_a_string(tmp_path: Path, bad: ev.Event) -> None:
    """A field that is not strict JSON raises TypeError instead of being stringified."""
    path = tmp_path / "events.jsonl"
    with (
        JsonlSink(path) as sink,
        pytest.raises(TypeError, match=r"seq=3 of run 'r' does not dump to JSON"),
    ):
        sink(bad)
    assert path.read_text(encoding="utf-8") == ""


def test_bad_arguments(tmp_path: Path) -> None:
    """A bad mode or buffer size fails at construction, before any file is made."""
    path = tmp_path / "unused.jsonl"
    with pytest.raises(ValueError, match="mode"):
        JsonlSink(path, mode="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_buffered"):
        JsonlSink(path, max_buffered=0)
    assert not path.exists()


async def test_failing_sink_is_reported_once_and_never_kills_runs() -> None:
    """A sink that raises gets one RuntimeWarning, is skipped after, and every run finishes."""
    calls: list[ev.Event] = []

    def broken(event: ev.Event) -> None:
        calls.append(event)
        raise OSError("disk full")

    with pytest.warns(RuntimeWarning, match="event sink .* failed") as record:
        async with tether.Runtime(event_sink=broken) as rt:
            results = [await rt.run(_agent(), "q") for _ in range(3)]
    assert [r.termination for r in results] == [tether.Termination.ANSWERED] * 3
    assert len([w for w in record if issubclass(w.category, RuntimeWarning)]) == 1
    assert len(calls) == 1


# ------------------------------------------------------- off the runs' path


async def test_a_sink_that_blocks_for_good_stops_no_run() -> None:
    """Runs finish while the sink is stuck; at exit the undelivered events are counted."""
    release = threading.Event()
    got: list[ev.Event] = []

    def stuck(event: ev.Event) -> None:
        got.append(event)
        release.wait()  # the first event never returns until the test says so

    async def three_runs() -> tuple[list[tether.RunResult], sinks.SinkStatus | None]:
        async with tether.Runtime(event_sink=stuck, shutdown_grace_s=0.2) as rt:
            results = [await rt.run(_agent(f"a{i}"), "q") for i in range(3)]
            status = rt.sink_status
            assert status is not None
            assert status.delivered == 0
        return results, rt.sink_status

    try:
        with pytest.warns(RuntimeWarning, match=r"missed \d+ events \(0 delivered\)"):
            results, final = await three_runs()
    finally:
        release.set()
    assert [r.termination for r in results] == [tether.Termination.ANSWERED] * 3
    assert final is not None
    total = sum(len(r.events) for r in results)
    # The event the sink was stuck on counts neither way; every other one is dropped.
    assert (final.delivered, final.dropped, final.backlog) == (0, total - 1, 0)
    assert len(got) == 1


async def test_past_the_backlog_events_are_dropped_counted_and_reported() -> None:
    """A full backlog drops the sink's events, warns once, and counts exactly what it drops."""
    release = threading.Event()
    got: list[ev.Event] = []

    def slow(event: ev.Event) -> None:
        release.wait()
        got.append(event)

    async def one_run() -> tuple[tether.RunResult, sinks.SinkStatus | None]:
        async with tether.Runtime(event_sink=slow, sink_backlog=5) as rt:
            result = await rt.run(_agent(), "q")
            status = rt.sink_status
            assert status is not None
            assert status.dropped >= len(result.events) - 6  # 5 queued, 1 in the sink
            release.set()
        return result, rt.sink_status

    with pytest.warns(RuntimeWarning) as record:
        result, final = await one_run()
    assert final is not None
    assert final.delivered + final.dropped == len(result.events)
    assert final.delivered == len(got)
    assert [e.seq for e in got] == sorted(e.seq for e in got)  # in order, gaps where dropped
    messages = [str(w.message) for w in record]
    assert sum("events behind" in m for m in messages) == 1
    assert any(f"missed {final.dropped} events" in m for m in messages)


async def test_a_sink_sees_the_emitting_runs_context() -> None:
    """Context variables set around rt.start() are seen by the sink, as if called inline."""
    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
    seen: set[str] = set()
    async with tether.Runtime(event_sink=lambda event: seen.add(tenant.get())) as rt:
        token = tenant.set("acme")
        handle = rt.start(_agent(), "q")
        tenant.reset(token)
        await handle.result()
    assert seen == {"acme"}


def test_sink_backlog_must_be_positive() -> None:
    """Runtime(sink_backlog=0) is a ValueError naming the field."""
    with pytest.raises(ValueError, match="sink_backlog"):
        tether.Runtime(sink_backlog=0)


# ------------------------------------------------------------- whole lines


def test_a_failed_write_leaves_no_half_line_and_close_is_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write failing midway is cut back to the last whole line; close() then stays quiet."""
    path = tmp_path / "events.jsonl"
    sink = JsonlSink(path)
    sink(_event(0))
    sink.flush()
    whole = path.read_bytes()
    calls = 0

    def half_then_full(fd: int, data: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sinks, "_write", half_then_full)
    with pytest.raises(OSError, match="No space left"):
        sink(_event(1))  # a Transition: written at once
    assert path.read_bytes() == whole
    assert sink.closed
    sink.close()  # already reported: quiet
    assert "failed" in repr(sink)


def test_appending_to_a_file_with_a_torn_last_line_removes_it(tmp_path: Path) -> None:
    """A crash's half line is cut off (with a warning) before new lines are appended."""
    path = tmp_path / "events.jsonl"
    with JsonlSink(path) as sink:
        sink(_event(0))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"type": "Transi')
    with pytest.warns(RuntimeWarning, match="was cut short"), JsonlSink(path) as sink:
        sink(_event(1))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [0, 1]


def _event(seq: int) -> ev.Event:
    return ev.Transition(run_id="r", seq=seq, round=1, at=0.0, kind="continue", reason="x")
