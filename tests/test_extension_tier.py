"""The extension tier: what an integration hosting a Runtime uses, through public names only.

``tether.ray``'s hosts are the integration these serve (tests/test_ray.py runs
them end to end); here each piece is shown on a plain Runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall
from tether.runtime import RuntimeHooks, TrailReader

pytestmark = pytest.mark.anyio


@tether.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def adder(name: str = "adder") -> tether.Agent:
    return tether.Agent(
        name=name,
        provider=ScriptedProvider(
            [
                Reply(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})]),
                Reply(text="The sum is 5."),
            ]
        ),
        tools=[add],
    )


async def test_hooks_hear_each_run_leave_once() -> None:
    """on_run_left is called once per run, after it has left the Runtime (in_flight: None)."""
    left: list[str] = []
    seen: list[Any] = []

    def run_left(run_id: str) -> None:
        left.append(run_id)
        seen.append(rt.in_flight(run_id))

    rt = tether.Runtime(hooks=RuntimeHooks(on_run_left=run_left))
    async with rt:
        handle = rt.start(adder(), "q", run_id="r1")
        assert rt.in_flight("r1") is not None
        assert rt.in_flight("nope") is None
        await handle.result()
        await rt.run(adder(), "q", run_id="r2")
    assert left == ["r1", "r2"]
    assert seen == [None, None]


def test_hooks_are_checked() -> None:
    """Runtime(hooks=...) takes a RuntimeHooks only."""
    with pytest.raises(TypeError, match="RuntimeHooks"):
        tether.Runtime(hooks={"on_run_left": print})  # type: ignore[arg-type]


async def test_a_live_handle_knows_its_agent_and_is_not_parked() -> None:
    """RunHandle.agent is the run's agent; parked is False for a run without a store."""
    agent = adder()
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        assert handle.agent is agent
        assert handle.parked is False
        await handle.result()


async def test_owner_and_add_agent(tmp_path: Path) -> None:
    """owner is the lease owner with a store (None without); add_agent lets the
    Runtime resume another agent's runs, and refuses anything but an Agent."""
    assert tether.Runtime().owner is None
    tether.Runtime().add_agent(adder())  # without a store: nothing to do
    with pytest.raises(TypeError, match="wants a tether"):
        tether.Runtime().add_agent("adder")  # type: ignore[arg-type]
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.01)
    async with tether.Runtime(store=store) as rt:
        assert isinstance(rt.owner, str)
        assert rt.owner
        rt.add_agent(adder("late"))
        result = await rt.run(adder("late"), "q")
        assert result.termination is tether.Termination.ANSWERED
        stored = rt.handle(result.run_id)
        assert stored.run_id == result.run_id
        assert await stored.pending_approvals() == []


async def test_pause_gate_before_entering_does_nothing() -> None:
    """pause_gate on a Runtime not running is a no-op; running, runs still answer after it."""
    rt = tether.Runtime()
    rt.pause_gate("scripted", 0.0)
    async with rt:
        rt.pause_gate("nobody-calls-this-endpoint", 5.0)
        assert (await rt.run(adder(), "q")).output == "The sum is 5."


async def test_a_reader_serves_the_trail_in_json_batches() -> None:
    """reader("events") drains the kept events' JSON forms; "text" the text; "live"
    both; each is done once the run is over and all of it was read."""
    async with tether.Runtime() as rt:
        handle = rt.start(adder(), "q")
        events: TrailReader = handle.reader("events")
        live = handle.reader("live")
        text = handle.reader("text")
        result = await handle.result()
        assert events.finished
        kept = events.drain()
        assert kept == [ev.dump(e) for e in result.events]
        assert events.done()
        assert events.drain() == []
        assert "".join(text.drain()) == result.output
        assert text.done()
        both = live.drain()
        assert [d for d in both if d["type"] not in ("TextDelta", "ToolCallDelta")] == kept
        assert live.done()
        for reader in (events, live, text):
            reader.close()
        late = handle.reader("events", start=3)
        assert late.drain() == kept[3:]
        with pytest.raises(ValueError, match="reader kind"):
            handle.reader("everything")  # type: ignore[arg-type]


#: What the integrations in this repository import from tether.runtime (DESIGN §28):
#: removing one of these breaks tether.ray, tether.postgres, tether.otel or tether.events.
EXTENSION_TIER = [
    # one runtime interface
    "RuntimeLike", "RunHandleLike", "StoredRunHandle", "check_start", "StartChecked",
    "PendingApproval", "RuntimeClosed", "BudgetExhausted", "DepsT", "OutputT", "RunInput",
    # hosting a Runtime
    "RuntimeHooks", "TrailReader", "ReaderKind", "stored_result",
    # events and sinks
    "Event", "EVENT_TYPES", "DELTA_TYPES", "dump_event", "load_event", "summarize",
    "RunResumed", "TextDelta", "ToolCallDelta", "UsageCharged", "RunFinished",
    "EventSink", "combine", "SinkStatus",
    # run stores
    "RunStore", "NewRun", "Claim", "StoredRun", "ToolRecord", "Answer", "Control", "JSON",
    "LeaseLost", "RunStoreError", "RUN_COLUMNS", "TOOL_COLUMNS", "run_of_row",
    "tool_record_of_row", "encode_json",
    # conversation and lesson stores in a database
    "StoredConversations", "StoredLessons", "conversation_conflict",
    # a budget over a fleet
    "BudgetLedger", "LedgerLink", "LocalLedgerLink", "SlicedBudget", "Spent", "Grant",
    "LedgerStatus", "SliceStatistics",
]  # fmt: skip


def test_the_extension_tier_is_public() -> None:
    """Every name of the extension tier is in tether.runtime.__all__."""
    import tether.runtime

    missing = [name for name in EXTENSION_TIER if name not in tether.runtime.__all__]
    assert missing == []


def mailer() -> tether.Agent:
    """A tool call its policy holds for approval, then the answer."""

    def ask(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
        return tether.Verdict.ask("emails need a human") if point == "tool_call" else None

    return tether.Agent(
        name="mailer",
        provider=ScriptedProvider(
            [
                Reply(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2}, id="m1")]),
                Reply(text="done"),
            ]
        ),
        tools=[add],
        policies=[ask],
    )


async def test_a_parked_run_is_parked_and_its_stored_handle_lists_its_held_calls(
    tmp_path: Path,
) -> None:
    """A durable run held for approval parks: its live handle says so, and a stored
    handle (another Runtime on the store) lists the held call, awaited as on any handle."""
    import anyio

    path = tmp_path / "runs.db"
    left = anyio.Event()
    hooks = RuntimeHooks(on_run_left=lambda run_id: left.set())
    store = tether.SQLiteRunStore(path, poll_s=0.01)
    async with tether.Runtime(store=store, hooks=hooks) as rt:
        handle = rt.start(mailer(), "q")
        with anyio.fail_after(20):
            await left.wait()  # parked: it left this Runtime without an ending
        assert handle.parked
        assert not handle.done
        assert rt.in_flight(handle.run_id) is None
        async with tether.Runtime(store=tether.SQLiteRunStore(path, poll_s=0.01)) as other:
            stored = other.handle(handle.run_id)
            assert not stored.done
            [pending] = await stored.pending_approvals()
            assert (pending.call_id, pending.name, pending.arguments) == (
                "m1",
                "add",
                {"a": 1, "b": 2},
            )
            with pytest.raises(ValueError, match="not in flight"):
                stored.reader("events")
        await rt.approve(handle.run_id, "m1")
        assert (await handle.result()).output == "done"
