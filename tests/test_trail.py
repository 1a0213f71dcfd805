"""The event trail records stage events compactly and reads them back as the same events."""

from __future__ import annotations

import gc
import pickle
import typing

import attrs
import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall
from tether.runtime._events import Stage
from tether.runtime._trail import NOTED, EventLog, Trail

from .helpers import add, kinds

pytestmark = pytest.mark.anyio


def _agent() -> tether.Agent:
    call = ToolCall(name="add", arguments={"a": 1, "b": 2})
    script = [Reply(tool_calls=(call,)), Reply(text="3")]
    return tether.Agent(name="a", provider=ScriptedProvider(script), tools=[add])


def _without_time(events: object) -> list[tuple[str, int, int, str | None]]:
    assert isinstance(events, (tuple, list, EventLog))
    return [(type(e).__name__, e.seq, e.round, getattr(e, "stage", None)) for e in events]


async def test_a_run_read_later_has_the_same_trail_as_one_a_sink_saw() -> None:
    """Compact stage events become the same events a sink gets built at once."""
    seen: list[ev.Event] = []
    async with tether.Runtime(event_sink=seen.append) as rt:
        with_sink = await rt.run(_agent(), "q")
    async with tether.Runtime() as rt:
        handle = rt.start(_agent(), "q")
        followed = [e async for e in handle.events()]
        plain = await handle.result()
    assert _without_time(plain.events) == _without_time(with_sink.events) == _without_time(seen)
    assert followed == list(plain.events)
    assert [e.seq for e in plain.events] == list(range(len(plain.events)))
    assert all(e.run_id == plain.run_id for e in plain.events)
    assert kinds(plain.events).count("StageEntered") == kinds(with_sink.events).count(
        "StageEntered"
    )


def test_an_event_log_behaves_as_the_tuple_of_its_events() -> None:
    """Indexing, slicing, equality, hashing, pickling and summaries see plain events."""
    trail = Trail("r")
    with trail.stage("input"):
        trail.add(ev.PolicyChecked(**trail.head(), point="input", verdict="allow", reason=None))
    log = trail.finish()
    as_tuple = tuple(log)
    assert len(log) == 3
    assert [type(e) for e in log] == [ev.StageEntered, ev.PolicyChecked, ev.StageExited]
    assert log[0] is log[0]  # built once
    assert log[-1] == as_tuple[-1]
    assert log[1:] == as_tuple[1:]
    assert log == as_tuple
    assert log == list(as_tuple)
    assert hash(log) == hash(as_tuple)
    assert log.index(as_tuple[1]) == 1
    assert pickle.loads(pickle.dumps(log)) == as_tuple
    with pytest.raises(IndexError):
        log[3]


def test_a_compact_stage_event_keeps_its_round_stage_and_time_exactly() -> None:
    """Every stage, a very late round and the exact timestamp survive compact recording."""
    trail = Trail("r")
    trail.round = 10**9
    for stage in typing.get_args(Stage):
        with trail.stage(stage):
            pass
    events = list(trail.finish())
    assert [(type(e), e.stage) for e in events] == [
        (cls, stage)
        for stage in typing.get_args(Stage)
        for cls in (ev.StageEntered, ev.StageExited)
    ]
    assert {e.round for e in events} == {10**9}
    assert all(isinstance(e.at, float) and e.at > 1e9 for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)


def test_a_stage_left_by_an_exception_stays_open_and_the_next_one_opens() -> None:
    """A block that raises emits no StageExited; the stage after it is bracketed as usual."""
    trail = Trail("r")
    with pytest.raises(RuntimeError), trail.stage("model"):
        raise RuntimeError("cut")
    with trail.stage("finalize"):
        pass
    assert [(type(e).__name__, e.stage) for e in trail.finish()] == [
        ("StageEntered", "model"),
        ("StageEntered", "finalize"),
        ("StageExited", "finalize"),
    ]


def _fields(event: ev.Event) -> dict[str, object]:
    return {
        k: v for k, v in attrs.asdict(event, recurse=False).items() if k not in ("at", "run_id")
    }


async def test_noted_events_read_back_as_the_events_a_sink_saw() -> None:
    """Events kept as tuples (Trail.note) become events equal, field by field, to a sink's."""
    seen: list[ev.Event] = []
    async with tether.Runtime(event_sink=seen.append) as rt:
        with_sink = await rt.run(_agent(), "q")
    async with tether.Runtime() as rt:
        plain = await rt.run(_agent(), "q")
    noted = [e for e in plain.events if type(e) in NOTED]
    assert {type(e) for e in noted} == set(NOTED)
    assert [_fields(e) for e in noted] == [_fields(e) for e in seen if type(e) in NOTED]
    assert [_fields(e) for e in plain.events] == [_fields(e) for e in with_sink.events]


def test_a_noted_event_is_built_once_untracked_until_then_and_dumped_alike() -> None:
    """A noted event keeps every field and its time, is one tuple until read (untracked
    once collected, if its values are plain),
    is built once, dumps as its event does, and must be given every field."""
    trail = Trail("r")
    trail.round = 3
    trail.note(ev.ToolCallStarted, call_id="c1", name="add", arguments={"a": 1, "b": 2})
    trail.note(ev.Transition, kind="continue", reason="tool_use")
    with pytest.raises(KeyError):
        trail.note(ev.Transition, kind="continue")
    gc.collect()
    # Plain values only: the collector stopped tracking it (one with arguments, a dict, stays).
    assert not gc.is_tracked(trail._events[1])
    dumped = trail.dumped(0)
    started, transition = trail.event(0), trail.event(1)
    assert started is trail.event(0)
    assert started == ev.ToolCallStarted(
        run_id="r",
        seq=0,
        round=3,
        at=started.at,
        call_id="c1",
        name="add",
        arguments={"a": 1, "b": 2},
    )
    assert transition == ev.Transition(
        run_id="r", seq=1, round=3, at=transition.at, kind="continue", reason="tool_use"
    )
    assert 0 < started.at <= transition.at
    assert dumped == [ev.dump(started), ev.dump(transition)]


def test_an_event_noted_from_a_source_reads_its_fields_once_when_first_read() -> None:
    """Trail.note_from calls the fields function only when the event is first read, once."""
    trail = Trail("r")
    calls: list[str] = []

    def fields(source: str) -> dict[str, object]:
        calls.append(source)
        return {"kind": "complete", "reason": source}

    trail.note_from(ev.Transition, fields, "answered")
    assert calls == []
    event = trail.event(0)
    assert event is trail.event(0)
    assert event == ev.Transition(
        run_id="r", seq=0, round=0, at=event.at, kind="complete", reason="answered"
    )
    assert calls == ["answered"]
