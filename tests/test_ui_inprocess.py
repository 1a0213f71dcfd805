"""The UI endpoints called in-process on both anyio backends: a client that leaves
mid-stream cancels the run and leaves no task behind; several held calls, a
partial answer, a new run on a waiting thread."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("ag_ui")

import tether
from tests.helpers import task_names
from tests.ui_agents import Finished, ask_first, call_asgi, data_of, make_agent
from tether.providers import (
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)
from tether.ui import ag_ui, vercel_ai

pytestmark = pytest.mark.anyio

USER_AGUI = {
    "threadId": "t",
    "runId": "r1",
    "messages": [{"id": "u", "role": "user", "content": "hi"}],
}
USER_VERCEL = {
    "id": "c",
    "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
}


@pytest.mark.parametrize(
    ("module", "body", "delta"),
    [(ag_ui, USER_AGUI, b"TEXT_MESSAGE_CONTENT"), (vercel_ai, USER_VERCEL, b"text-delta")],
    ids=["ag-ui", "vercel-ai"],
)
async def test_a_client_leaving_mid_stream_cancels_the_run_and_leaks_nothing(
    module: Any, body: Any, delta: bytes
) -> None:
    """Disconnect after the first text delta: the run ends cancelled, the app returns,
    and once the Runtime closes no task of the run or of the response is left."""
    before = task_names()
    sink = Finished()
    agent = make_agent(approval=False, chunk_latency_s=0.05)
    async with tether.Runtime(event_sink=sink) as rt:
        status, sent = await call_asgi(module.app(agent, runtime=rt), body, leave_on=delta)
        assert status == 200
        assert delta in sent
    (ended,) = sink.wait(1)
    assert ended.termination.value == "cancelled"
    assert task_names() == before


def two_calls(request: ModelRequest, ctx: ProviderContext) -> Reply:
    results = [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]
    if results:
        return Reply(text=" | ".join(f"{r.is_error}:{r.content}" for r in results))
    return Reply(
        tool_calls=[
            ToolCall(name="add", arguments={"a": 1, "b": 1}, id="first"),
            ToolCall(name="add", arguments={"a": 2, "b": 2}, id="second"),
        ]
    )


async def test_every_held_call_is_an_interrupt_and_an_unanswered_one_is_rejected() -> None:
    """Two calls held in one round: two interrupts; a resume that answers one approves
    it and rejects the other ("no answer was given"); the run answers."""
    from tests.ui_agents import add

    agent = tether.Agent(
        name="two", provider=ScriptedProvider(two_calls), tools=[add], policies=[ask_first]
    )
    sink = Finished()
    async with tether.Runtime(event_sink=sink) as rt:
        app = ag_ui.app(agent, runtime=rt)
        _, sent = await call_asgi(app, USER_AGUI)
        finished = data_of(sent)[-1]
        assert [i["id"] for i in finished["outcome"]["interrupts"]] == ["first", "second"]
        resume = [{"interruptId": "first", "status": "resolved", "payload": True}]
        _, sent = await call_asgi(app, {**USER_AGUI, "runId": "r2", "resume": resume})
        events = data_of(sent)
        results = {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
        assert results["first"] == "2"
        assert "no answer was given" in results["second"]
        assert events[-1]["type"] == "RUN_FINISHED"
        assert events[-1]["result"].startswith("False:2 | True:")
        assert len(app.held) == 0
    assert [f.termination.value for f in sink.wait(1)] == ["answered"]


async def test_a_new_run_on_a_waiting_thread_cancels_the_waiting_run() -> None:
    """A POST without resume on a thread whose run waits for an answer: the waiting run
    ends cancelled and a new run starts (and is held in its turn)."""
    sink = Finished()
    async with tether.Runtime(event_sink=sink, shutdown_grace_s=0) as rt:
        app = ag_ui.app(make_agent(), runtime=rt)
        _, first = await call_asgi(app, USER_AGUI)
        assert data_of(first)[-1]["outcome"]["type"] == "interrupt"
        _, second = await call_asgi(app, {**USER_AGUI, "runId": "r2"})
        assert data_of(second)[-1]["outcome"]["type"] == "interrupt"
        (ended,) = sink.wait(1)
        assert ended.termination.value == "cancelled"
        assert ended.run_id == sink.started[0].run_id
        assert len(app.held) == 1
        # The second ends before the Runtime does: with no grace, an exit drops the
        # events a sink (a thread, behind the run) has not taken yet, with a warning.
        rt.handle(sink.started[1].run_id).cancel("the test is over")
        assert len(await anyio.to_thread.run_sync(sink.wait, 2)) == 2


async def test_a_resume_with_an_answer_of_the_wrong_shape_keeps_the_run_waiting() -> None:
    """A payload that is neither a bool nor {"approved": bool} is 422; the run still waits
    and a good answer then resumes it."""
    async with tether.Runtime() as rt:
        app = ag_ui.app(make_agent(), runtime=rt)
        _, first = await call_asgi(app, USER_AGUI)
        call = data_of(first)[-1]["outcome"]["interrupts"][0]["id"]
        bad = [{"interruptId": call, "status": "resolved", "payload": "yes please"}]
        status, _ = await call_asgi(app, {**USER_AGUI, "resume": bad})
        assert status == 422
        assert len(app.held) == 1
        good = [{"interruptId": call, "status": "resolved", "payload": {"approved": True}}]
        status, sent = await call_asgi(app, {**USER_AGUI, "resume": good})
        assert status == 200
        assert data_of(sent)[-1]["result"] == "The answer is 5, as the tool said."


async def test_a_run_that_ends_badly_is_run_error_and_error_chunks() -> None:
    """A run stopped by a ceiling (max_steps): AG-UI's RUN_ERROR with the termination as
    its code; the UI message stream's error chunk, then finish with "error"."""
    import attrs

    agent = attrs.evolve(make_agent(approval=False), limits=tether.Limits(max_steps=1))
    async with tether.Runtime() as rt:
        _, sent = await call_asgi(ag_ui.app(agent, runtime=rt), USER_AGUI)
        last = data_of(sent)[-1]
        assert last["type"] == "RUN_ERROR"
        assert last["code"] == "max_steps"
        _, sent = await call_asgi(vercel_ai.app(agent, runtime=rt), USER_VERCEL)
        chunks = data_of(sent)
        assert chunks[-1] == "[DONE]"
        assert chunks[-3]["type"] == "error"
        assert "max_steps" in chunks[-3]["errorText"]
        assert chunks[-2] == {"type": "finish", "finishReason": "error"}


def test_ag_ui_messages_become_a_history_tether_accepts() -> None:
    """Text and image parts, tool calls with their results, a call never answered left
    out, system messages left out; the last user message is the input."""
    import base64

    from ag_ui import core as agui
    from pydantic import TypeAdapter

    from tether.providers import Image, ToolUseBlock
    from tether.ui._convert import split_input, tidy

    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
    raw = [
        {"id": "s", "role": "system", "content": "ignored"},
        {"id": "u1", "role": "user", "content": "first"},
        {
            "id": "a1",
            "role": "assistant",
            "content": "calling",
            "toolCalls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a":1}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "add", "arguments": "{}"}},
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "1"},
        {"id": "a2", "role": "assistant", "content": "done"},
        {
            "id": "u2",
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {
                    "type": "image",
                    "source": {"type": "data", "value": png, "mimeType": "image/png"},
                },
            ],
        },
    ]
    messages = TypeAdapter(list[agui.Message]).validate_python(raw)
    history = tidy(ag_ui.to_messages(messages))
    run_input, past = split_input(history, "continue")
    assert isinstance(run_input, list)
    assert run_input[0] == "what is this?"
    assert isinstance(run_input[1], Image)
    assert [m.role for m in past] == ["user", "assistant", "user", "assistant"]
    uses = [b for b in past[1].content if isinstance(b, ToolUseBlock)]
    assert [(u.id, u.input) for u in uses] == [("c1", {"a": 1})]  # c2 had no result
    from tether.runtime import check_start

    check_start(  # tether accepts it as a run's input and history
        tether.Agent(name="x", provider=ScriptedProvider([])), run_input, history=past
    )
