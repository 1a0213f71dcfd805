"""Event sinks: ``JsonlSink`` and the Runtime's handling of a failing sink."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall
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
