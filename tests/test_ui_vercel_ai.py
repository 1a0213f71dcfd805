"""tether.ui.vercel_ai: a run streamed as the AI SDK UI message stream over a real
socket, each chunk checked against the protocol's chunk shapes (from the AI SDK's
documentation of the UI message stream, v1), on uvicorn (asyncio) and hypercorn (trio)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.ui_agents import make_agent, post_stream, served
from tether.ui import vercel_ai

BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])

S, B, ANY = str, bool, object
#: Each chunk type: its required fields and its optional ones, with their types.
#: The AI SDK's chunks are strict objects: no other field is allowed.
CHUNKS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "start": ({}, {"messageId": S, "messageMetadata": ANY}),
    "finish": ({}, {"finishReason": S, "messageMetadata": ANY}),
    "abort": ({}, {"reason": S}),
    "error": ({"errorText": S}, {}),
    "start-step": ({}, {}),
    "finish-step": ({}, {}),
    "text-start": ({"id": S}, {"providerMetadata": dict}),
    "text-delta": ({"id": S, "delta": S}, {"providerMetadata": dict}),
    "text-end": ({"id": S}, {"providerMetadata": dict}),
    "reasoning-start": ({"id": S}, {"providerMetadata": dict}),
    "reasoning-delta": ({"id": S, "delta": S}, {"providerMetadata": dict}),
    "reasoning-end": ({"id": S}, {"providerMetadata": dict}),
    "tool-input-start": (
        {"toolCallId": S, "toolName": S},
        {"providerExecuted": B, "providerMetadata": dict, "dynamic": B, "title": S},
    ),
    "tool-input-delta": ({"toolCallId": S, "inputTextDelta": S}, {}),
    "tool-input-available": (
        {"toolCallId": S, "toolName": S, "input": ANY},
        {"providerExecuted": B, "providerMetadata": dict, "dynamic": B, "title": S},
    ),
    "tool-approval-request": ({"approvalId": S, "toolCallId": S}, {}),
    "tool-output-available": (
        {"toolCallId": S, "output": ANY},
        {"providerExecuted": B, "dynamic": B, "preliminary": B},
    ),
    "tool-output-error": ({"toolCallId": S, "errorText": S}, {"providerExecuted": B, "dynamic": B}),
    "tool-output-denied": ({"toolCallId": S}, {}),
}
FINISH_REASONS = {"stop", "length", "content-filter", "tool-calls", "error", "other"}


def validated(chunks: list[Any]) -> list[dict[str, Any]]:
    """Each chunk has a known type and exactly its fields; the stream starts with
    ``start``, ends with ``[DONE]``, opens text, reasoning, tool inputs and steps
    before it uses them and closes them."""
    assert chunks[-1] == "[DONE]"
    chunks = chunks[:-1]
    for chunk in chunks:
        required, optional = CHUNKS[chunk["type"]]
        fields = set(chunk) - {"type"}
        assert set(required) <= fields, chunk
        assert fields <= set(required) | set(optional), chunk
        for name, value in chunk.items():
            kind = {**required, **optional}.get(name)
            if kind not in (None, ANY):
                assert isinstance(value, kind), chunk
        if chunk["type"] == "finish" and "finishReason" in chunk:
            assert chunk["finishReason"] in FINISH_REASONS
    assert chunks[0]["type"] == "start"
    assert chunks[-1]["type"] in ("finish", "abort")
    spans: set[str] = set()
    inputs: set[str] = set()
    step = False
    for chunk in chunks:
        kind = chunk["type"]
        if kind in ("text-start", "reasoning-start"):
            spans.add(chunk["id"])
        elif kind in ("text-delta", "reasoning-delta"):
            assert chunk["id"] in spans
        elif kind in ("text-end", "reasoning-end"):
            spans.remove(chunk["id"])
        elif kind == "tool-input-start":
            inputs.add(chunk["toolCallId"])
        elif kind == "tool-input-delta":
            assert chunk["toolCallId"] in inputs
        elif kind == "tool-input-available":
            inputs.discard(chunk["toolCallId"])
        elif kind == "start-step":
            assert not step
            step = True
        elif kind == "finish-step":
            assert step
            step = False
    assert not spans
    assert not inputs
    assert not step
    return chunks


def of(chunks: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for c in chunks if c["type"] == kind]


USER = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "What is 2 + 3?"}]}


def assistant_after(
    chunks: list[dict[str, Any]], approved: bool, reason: str | None = None
) -> dict[str, Any]:
    """The assistant UI message useChat builds from ``chunks``, with the approval answered
    (``addToolApprovalResponse``)."""
    (tool,) = of(chunks, "tool-input-available")
    (request,) = of(chunks, "tool-approval-request")
    approval: dict[str, Any] = {"id": request["approvalId"], "approved": approved}
    if reason:
        approval["reason"] = reason
    text = "".join(c["delta"] for c in of(chunks, "text-delta"))
    return {
        "id": chunks[0]["messageId"],
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "...", "state": "done"},
            {"type": "text", "text": text, "state": "done"},
            {
                "type": f"tool-{tool['toolName']}",
                "toolCallId": tool["toolCallId"],
                "state": "approval-responded",
                "input": tool["input"],
                "approval": approval,
            },
        ],
    }


@BACKENDS
def test_a_run_with_an_approval_streams_parts_then_resumes(backend: str) -> None:
    """Reasoning, streamed text and tool input, then a tool-approval-request; the answer
    (the messages again, the tool part approval-responded) resumes the same run."""
    with served(lambda rt: vercel_ai.app(make_agent(), runtime=rt), backend) as (url, _, sink):
        response, first = post_stream(
            url, {"id": "chat1", "messages": [USER], "trigger": "submit-message"}
        )
        assert response.status_code == 200
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = validated(first)
        assert len(of(chunks, "text-delta")) > 1  # streamed in pieces
        assert (
            "".join(c["delta"] for c in of(chunks, "text-delta"))
            == "Let me add these two numbers for you."
        )
        assert "".join(c["delta"] for c in of(chunks, "reasoning-delta")).startswith(
            "The user wants"
        )
        (start,) = of(chunks, "tool-input-start")
        assert start["toolName"] == "add"
        assert (
            "".join(c["inputTextDelta"] for c in of(chunks, "tool-input-delta")) == '{"a":2,"b":3}'
        )
        assert of(chunks, "tool-input-available")[0]["input"] == {"a": 2, "b": 3}
        (request,) = of(chunks, "tool-approval-request")
        assert request["toolCallId"] == start["toolCallId"]
        assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
        assert sink.finished == []

        messages = [USER, assistant_after(chunks, approved=True)]
        response, second = post_stream(
            url, {"id": "chat1", "messages": messages, "trigger": "submit-message"}
        )
        assert response.status_code == 200, response.text
        chunks = validated(second)
        (output,) = of(chunks, "tool-output-available")
        assert output == {
            "type": "tool-output-available",
            "toolCallId": start["toolCallId"],
            "output": "5",
        }
        assert (
            "".join(c["delta"] for c in of(chunks, "text-delta"))
            == "The answer is 5, as the tool said."
        )
        assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
        (ended,) = sink.wait(1)
        assert len(sink.started) == 1
        assert ended.termination.value == "answered"


@BACKENDS
def test_a_denied_approval_is_tool_output_denied(backend: str) -> None:
    """approved: false is a tool-output-denied, and the model hears the reason."""
    with served(lambda rt: vercel_ai.app(make_agent(), runtime=rt), backend) as (url, _, sink):
        _, first = post_stream(url, {"id": "c", "messages": [USER]})
        chunks = validated(first)
        messages = [USER, assistant_after(chunks, approved=False, reason="not today")]
        _, second = post_stream(url, {"id": "c", "messages": messages})
        chunks = validated(second)
        assert [c["type"] for c in chunks if c["type"].startswith("tool-output")] == [
            "tool-output-denied"
        ]
        assert "not today" in "".join(c["delta"] for c in of(chunks, "text-delta"))
        assert sink.wait(1)[0].termination.value == "answered"


def test_history_with_tool_outputs_is_the_runs_transcript() -> None:
    """A second turn: the earlier assistant message's steps, tool call and output
    become history the model sees; the new user message is the input."""
    earlier = {
        "id": "a0",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "Adding."},
            {
                "type": "tool-add",
                "toolCallId": "c0",
                "state": "output-available",
                "input": {"a": 1, "b": 1},
                "output": "2",
            },
            {"type": "step-start"},
            {"type": "text", "text": "It is 2."},
        ],
    }
    messages, answers = vercel_ai.to_messages([USER, earlier, USER])
    assert answers == {}
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    with served(lambda rt: vercel_ai.app(make_agent(approval=False), runtime=rt), "asyncio") as (
        url,
        _,
        sink,
    ):
        _, events = post_stream(url, {"id": "c", "messages": [USER, earlier, USER]})
        chunks = validated(events)
        # the script answers from the last tool result it sees: the history's "2"
        assert (
            "".join(c["delta"] for c in of(chunks, "text-delta"))
            == "The answer is 2, as the tool said."
        )
        assert sink.wait(1)[0].termination.value == "answered"


@BACKENDS
def test_a_client_that_disconnects_cancels_the_run(backend: str) -> None:
    """Closing the response mid-stream cancels the run; nothing stays running or held."""
    agent = make_agent(approval=False, chunk_latency_s=0.2)
    with served(lambda rt: vercel_ai.app(agent, runtime=rt), backend) as (url, rt, sink):
        body = {"id": "c", "messages": [USER]}
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url + "/", json=body) as response,
        ):
            for line in response.iter_lines():
                if "text-delta" in line:
                    break  # leave mid-text
        (ended,) = sink.wait(1)
        assert ended.termination.value == "cancelled"
        assert rt.running == 0


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"id": "c"}, 422, "messages"),
        ({"messages": []}, 422, "nothing to answer"),
        ({"messages": [{"id": "x", "role": "user"}]}, 422, "parts"),
        (
            {
                "messages": [
                    USER,
                    {
                        "id": "a",
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool-add",
                                "toolCallId": "zz",
                                "state": "approval-responded",
                                "approval": {"id": "zz", "approved": True},
                            }
                        ],
                    },
                ]
            },
            409,
            "no run waits",
        ),
    ],
)
def test_bad_requests_are_refused_with_a_reason(body: Any, status: int, words: str) -> None:
    """What is not a useChat body is a 4xx naming the problem, before any run."""
    with served(lambda rt: vercel_ai.app(make_agent(), runtime=rt), "asyncio") as (url, rt, sink):
        response = httpx.post(url + "/", json=body)
        assert response.status_code == status
        assert words in response.json()["detail"]
        assert rt.running == 0
        assert sink.started == []
