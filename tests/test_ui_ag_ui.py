"""tether.ui.ag_ui: a run streamed as AG-UI events over a real socket, checked
against ag-ui-protocol's own pydantic models, on uvicorn (asyncio) and hypercorn (trio)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytest.importorskip("ag_ui")

from ag_ui import core as agui
from pydantic import TypeAdapter

from tests.ui_agents import make_agent, post_stream, served
from tether.ui import ag_ui

BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])
EVENT = TypeAdapter(agui.Event)


def validated(events: list[Any]) -> list[Any]:
    """Each event parsed by ag-ui-protocol's models, and the stream's order checked:
    it opens with RUN_STARTED and closes with RUN_FINISHED or RUN_ERROR; text,
    reasoning, tool calls and steps open before they grow and close once."""
    models = [EVENT.validate_python(e) for e in events]
    kinds = [m.type.value for m in models]
    assert kinds[0] == "RUN_STARTED"
    assert kinds[-1] in ("RUN_FINISHED", "RUN_ERROR")
    assert kinds.count("RUN_STARTED") == 1
    assert sum(k in ("RUN_FINISHED", "RUN_ERROR") for k in kinds) == 1
    open_: dict[str, set[str]] = {"text": set(), "reasoning": set(), "tool": set(), "step": set()}
    for m in models:
        kind = m.type.value
        if kind == "TEXT_MESSAGE_START":
            assert m.message_id not in open_["text"]
            open_["text"].add(m.message_id)
        elif kind == "TEXT_MESSAGE_CONTENT":
            assert m.message_id in open_["text"]
            assert m.delta
        elif kind == "TEXT_MESSAGE_END":
            open_["text"].remove(m.message_id)
        elif kind == "REASONING_MESSAGE_START":
            open_["reasoning"].add(m.message_id)
        elif kind == "REASONING_MESSAGE_CONTENT":
            assert m.message_id in open_["reasoning"]
        elif kind == "REASONING_MESSAGE_END":
            open_["reasoning"].remove(m.message_id)
        elif kind == "TOOL_CALL_START":
            open_["tool"].add(m.tool_call_id)
        elif kind == "TOOL_CALL_ARGS":
            assert m.tool_call_id in open_["tool"]
        elif kind == "TOOL_CALL_END":
            open_["tool"].remove(m.tool_call_id)
        elif kind == "STEP_STARTED":
            assert not open_["step"]
            open_["step"].add(m.step_name)
        elif kind == "STEP_FINISHED":
            open_["step"].remove(m.step_name)
    assert open_ == {"text": set(), "reasoning": set(), "tool": set(), "step": set()}
    return models


def of(models: list[Any], kind: str) -> list[Any]:
    return [m for m in models if m.type.value == kind]


def run_input(thread: str, run: str, messages: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": messages, **more}


USER = [{"id": "u1", "role": "user", "content": "What is 2 + 3?"}]


@BACKENDS
def test_a_run_with_an_approval_is_interrupted_then_resumed(backend: str) -> None:
    """Reasoning, streamed text and a tool call, then RUN_FINISHED with an interrupt for
    the held call; the resume answers it and the same run goes on to its answer."""
    with served(lambda rt: ag_ui.app(make_agent(), runtime=rt), backend) as (url, _, sink):
        response, first = post_stream(url, run_input("t1", "r1", USER))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        models = validated(first)
        assert [m.run_id for m in of(models, "RUN_STARTED")] == ["r1"]
        assert len(of(models, "TEXT_MESSAGE_CONTENT")) > 1  # streamed in pieces
        text = "".join(m.delta for m in of(models, "TEXT_MESSAGE_CONTENT"))
        assert text == "Let me add these two numbers for you."
        assert of(models, "REASONING_START")
        assert of(models, "REASONING_END")
        reasoning = "".join(m.delta for m in of(models, "REASONING_MESSAGE_CONTENT"))
        assert reasoning == "The user wants a sum; the add tool does sums."
        (start,) = of(models, "TOOL_CALL_START")
        assert start.tool_call_name == "add"
        assert start.parent_message_id == of(models, "TEXT_MESSAGE_START")[0].message_id
        args = "".join(m.delta for m in of(models, "TOOL_CALL_ARGS"))
        assert args == '{"a":2,"b":3}'
        assert not of(models, "TOOL_CALL_RESULT")
        assert [m.step_name for m in of(models, "STEP_STARTED")] == ["round 1"]
        finished = models[-1]
        assert finished.outcome.type == "interrupt"
        (interrupt,) = finished.outcome.interrupts
        assert interrupt.id == interrupt.tool_call_id == start.tool_call_id
        assert interrupt.reason == "tool_approval"
        assert sink.finished == []  # parked, not ended

        resume = [
            {"interruptId": interrupt.id, "status": "resolved", "payload": {"approved": True}}
        ]
        response, second = post_stream(url, run_input("t1", "r2", USER, resume=resume))
        assert response.status_code == 200, response.text
        models = validated(second)
        (result,) = of(models, "TOOL_CALL_RESULT")
        assert (result.tool_call_id, result.content) == (interrupt.id, "5")
        text = "".join(m.delta for m in of(models, "TEXT_MESSAGE_CONTENT"))
        assert text == "The answer is 5, as the tool said."
        assert [m.step_name for m in of(models, "STEP_STARTED")] == ["round 1", "round 2"]
        assert models[-1].type.value == "RUN_FINISHED"
        assert models[-1].result == "The answer is 5, as the tool said."
        assert models[-1].outcome.type == "success"
        # one tether run, parked then approved: one start, one end
        (ended,) = sink.wait(1)
        assert len(sink.started) == 1
        assert ended.run_id == sink.started[0].run_id
        assert ended.termination.value == "answered"


@BACKENDS
def test_a_rejected_interrupt_gives_the_model_the_reason(backend: str) -> None:
    """A resume that says no: the call is denied, its result says why, the run answers."""
    with served(lambda rt: ag_ui.app(make_agent(), runtime=rt), backend) as (url, _, sink):
        _, first = post_stream(url, run_input("t1", "r1", USER))
        interrupt = validated(first)[-1].outcome.interrupts[0]
        resume = [
            {
                "interruptId": interrupt.id,
                "status": "resolved",
                "payload": {"approved": False, "reason": "not today"},
            }
        ]
        _, second = post_stream(url, run_input("t1", "r2", USER, resume=resume))
        models = validated(second)
        (result,) = of(models, "TOOL_CALL_RESULT")
        assert "not today" in result.content
        assert models[-1].result.startswith("No sum:")
        assert sink.wait(1)[0].termination.value == "answered"


@BACKENDS
def test_frontend_tools_are_handed_back_and_state_is_the_deps(backend: str) -> None:
    """A tool of the request is the client's: its call ends the run with the call id
    pending; the next request carries the result and the run answers from it. The
    request's state is the run's deps (a backend tool writes to it) and comes back
    as STATE_SNAPSHOT."""
    tools = [
        {
            "name": "confirm",
            "description": "Ask the user.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]
    agent = make_agent(approval=False)
    with served(lambda rt: ag_ui.app(agent, runtime=rt), backend) as (url, _, sink):
        _, first = post_stream(url, run_input("t2", "r1", USER, tools=tools, state={"user": "ada"}))
        models = validated(first)
        (start,) = of(models, "TOOL_CALL_START")
        assert start.tool_call_name == "confirm"
        assert not of(models, "TOOL_CALL_RESULT")  # the client runs it
        assert models[-1].outcome.type == "success"
        assert models[-1].outcome.pending_tool_call_ids == [start.tool_call_id]
        assert of(models, "STATE_SNAPSHOT")[-1].snapshot == {"user": "ada"}

        messages = [
            *USER,
            {
                "id": "a1",
                "role": "assistant",
                "content": "Asking you.",
                "toolCalls": [
                    {
                        "id": start.tool_call_id,
                        "type": "function",
                        "function": {"name": "confirm", "arguments": '{"q":"ok?"}'},
                    }
                ],
            },
            {"id": "tm1", "role": "tool", "toolCallId": start.tool_call_id, "content": "yes"},
        ]
        _, second = post_stream(
            url, run_input("t2", "r2", messages, tools=tools, state={"user": "ada"})
        )
        models = validated(second)
        assert models[-1].result == "The answer is yes, as the tool said."
        assert [f.termination.value for f in sink.wait(2)] == ["terminal_tool", "answered"]


def test_state_travels_in_deps_and_changes_come_back() -> None:
    """A backend tool that changes the state (the run's deps) is seen in STATE_SNAPSHOT."""
    with served(lambda rt: ag_ui.app(make_agent(approval=False), runtime=rt), "asyncio") as (
        url,
        _,
        _s,
    ):
        _, events = post_stream(url, run_input("t3", "r1", USER, state={"additions": 1}))
        models = validated(events)
        assert of(models, "STATE_SNAPSHOT")[-1].snapshot == {"additions": 2}
        assert models[-1].result == "The answer is 5, as the tool said."


@BACKENDS
def test_a_client_that_disconnects_cancels_the_run(backend: str) -> None:
    """Closing the response mid-stream cancels the run; nothing stays running or held."""
    agent = make_agent(approval=False, latency_s=0.0, chunk_latency_s=0.2)
    with served(lambda rt: ag_ui.app(agent, runtime=rt), backend) as (url, rt, sink):
        body = run_input("t4", "r1", USER)
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url + "/", json=body) as response,
        ):
            for line in response.iter_lines():
                if "TEXT_MESSAGE_CONTENT" in line:
                    break  # leave mid-text
        (ended,) = sink.wait(1)
        assert ended.termination.value == "cancelled"
        assert rt.running == 0


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"threadId": "t"}, 422, "RunAgentInput"),
        (run_input("t", "r", []), 422, "nothing to answer"),
        (
            run_input("t", "r", [{"id": "a", "role": "assistant", "content": "hi"}]),
            422,
            "assistant",
        ),
        (
            run_input("t", "r", USER, resume=[{"interruptId": "x", "status": "resolved"}]),
            409,
            "no run waits",
        ),
        (run_input("t", "r", USER, tools=[{"name": "add", "description": "clash"}]), 422, "add"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(body: Any, status: int, words: str) -> None:
    """What is not a usable RunAgentInput is a 4xx naming the problem, before any run."""
    with served(lambda rt: ag_ui.app(make_agent(), runtime=rt), "asyncio") as (url, rt, sink):
        response = httpx.post(url + "/", json=body)
        assert response.status_code == status
        assert words in response.json()["detail"]
        assert httpx.get(url + "/").status_code == 405
        assert httpx.post(url + "/", content=b"{}").status_code == 415
        assert rt.running == 0
        assert sink.started == []


def test_app_refuses_what_is_not_an_agent() -> None:
    """Bad configuration fails when the app is made."""
    import tether

    with pytest.raises(TypeError, match=r"tether\.Agent"):
        ag_ui.app("agent", runtime=tether.Runtime())  # type: ignore[arg-type]
