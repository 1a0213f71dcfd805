"""The Anthropic Messages API on the wire: the fake server's payloads for its tests."""

from __future__ import annotations

import json
from typing import Any

from tether.providers import AnthropicProvider

from .fakes import SECRET, Answer, json_answer, raw_answer, sse_answer, sse_body

MODEL = "claude-sonnet-4-5-20250929"


def provider(url: str, *, stream: bool = True, **kw: Any) -> AnthropicProvider:
    kw.setdefault("api_key", SECRET)
    return AnthropicProvider(MODEL, base_url=url, stream=stream, **kw)


def message_json(
    *,
    text: str = "Hello!",
    tools: tuple[tuple[str, str, Any], ...] = (),
    stop: str | None = "end_turn",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in tools]
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage
        or {
            "input_tokens": 25,
            "output_tokens": 15,
            "cache_read_input_tokens": 7,
            "cache_creation_input_tokens": 3,
        },
    }


def stream_events(
    *,
    text: tuple[str, ...] = ("Hello", ", world"),
    tools: tuple[tuple[str, str, tuple[str, ...]], ...] = (),
    stop: str | None = "end_turn",
    output_tokens: int = 15,
    end: bool = True,
    thinking: tuple[tuple[str, ...], str] | None = None,
    redacted: str | None = None,
) -> list[tuple[str | None, Any]]:
    """A streamed message: ``thinking`` (its text's pieces and its signature) and a
    ``redacted`` thinking block's data first, if given; then text; then tool calls."""
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 25,
                        "output_tokens": 1,
                        "cache_read_input_tokens": 7,
                        "cache_creation_input_tokens": 3,
                    },
                },
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    index = 0

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        nonlocal index
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1

    if thinking is not None:
        pieces, signature = thinking
        block(
            {"type": "thinking", "thinking": "", "signature": ""},
            [{"type": "thinking_delta", "thinking": p} for p in pieces]
            + [{"type": "signature_delta", "signature": signature}],
        )
    if redacted is not None:
        block({"type": "redacted_thinking", "data": redacted}, [])
    if text:
        block(
            {"type": "text", "text": ""}, [{"type": "text_delta", "text": piece} for piece in text]
        )
    for offset, (call_id, name, fragments) in enumerate(tools):
        i = index + offset
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                },
            )
        )
        for fragment in fragments:
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": fragment},
                    },
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    if end:
        events.append(("message_stop", {"type": "message_stop"}))
    return events


def reply(stream: bool, **kw: Any) -> Answer:
    """The same answer, as an event stream or as one JSON body."""
    if stream:
        return sse_answer(sse_body(stream_events(**kw)))
    text = "".join(kw.get("text", ("Hello", ", world")))
    tools = tuple((i, n, json.loads("".join(f) or "{}")) for i, n, f in kw.get("tools", ()))
    return json_answer(message_json(text=text, tools=tools, stop=kw.get("stop", "end_turn")))


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


def malformed(stream: bool) -> Answer:
    """An answer cut inside its JSON: an event's data, or the whole body."""
    if stream:
        return sse_answer(sse_body([("message_start", '{"type": "message_start", "mess')]))
    return raw_answer(b'{"id": "msg_01", "content": [')
