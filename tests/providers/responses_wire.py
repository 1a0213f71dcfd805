"""The OpenAI Responses API on the wire: the fake server's payloads for its tests.

Written from OpenAI's API reference (the ``response`` object, its output items,
the streaming events); tests/providers/test_responses_sdk.py checks that the
official ``openai`` SDK parses what this module serves.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from tether.providers import OpenAIResponsesProvider, TokenUsage

from .fakes import SECRET, Answer, json_answer, raw_answer, sse_answer, sse_body

#: A reasoning model (so ``include`` asks for encrypted reasoning), priced as gpt-5-mini.
MODEL = "gpt-5-mini-2025-08-07"
USAGE = {
    "input_tokens": 30,
    "input_tokens_details": {"cached_tokens": 10},
    "output_tokens": 12,
    "output_tokens_details": {"reasoning_tokens": 5},
    "total_tokens": 42,
}
EXPECTED_USAGE = TokenUsage(
    input_tokens=20, output_tokens=12, cache_read_tokens=10, reasoning_tokens=5
)


def provider(url: str, *, stream: bool = True, **kw: Any) -> OpenAIResponsesProvider:
    kw.setdefault("api_key", SECRET)
    return OpenAIResponsesProvider(MODEL, base_url=f"{url}/v1", stream=stream, **kw)


def message(text: str, *, item_id: str = "msg_1", refusal: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": content,
    }


def function_call(call_id: str, name: str, arguments: str, *, item_id: str = "") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id or f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def reasoning(item_id: str, summary: Sequence[str], encrypted: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": s} for s in summary],
    }
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def response_json(
    output: Sequence[dict[str, Any]] = (),
    *,
    status: str = "completed",
    incomplete: str | None = None,
    usage: dict[str, Any] | None = USAGE,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "error": error,
        "incomplete_details": None if incomplete is None else {"reason": incomplete},
        "instructions": None,
        "max_output_tokens": None,
        "model": MODEL,
        "output": list(output),
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    }


def _pending(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` as ``response.output_item.added`` shows it: started, nothing in it yet."""
    if item["type"] == "message":
        return {**item, "status": "in_progress", "content": []}
    if item["type"] == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    return {k: v for k, v in item.items() if k != "encrypted_content"} | {"summary": []}


def stream_events(
    output: Sequence[dict[str, Any]] = (),
    *,
    pieces: int = 2,
    status: str = "completed",
    incomplete: str | None = None,
    usage: dict[str, Any] | None = USAGE,
    end: bool = True,
    completed_output: bool = True,
    text_pieces: Sequence[str] | None = None,
    in_progress: bool = True,
) -> list[tuple[str | None, Any]]:
    """The events of a streamed response whose ``output`` is these items.

    Text, arguments and summaries each stream in ``pieces`` deltas. Without
    ``end`` the stream stops before its terminal event; without
    ``completed_output`` the terminal event's response has an empty ``output``;
    ``text_pieces`` are the deltas of the (last) message's text, if given;
    ``in_progress=False`` leaves out ``response.in_progress`` (a shorter preamble).
    """
    seq = itertools.count()
    events: list[tuple[str | None, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(seq), **fields}))

    start = response_json(status="in_progress", usage=None)
    emit("response.created", response=start)
    if in_progress:
        emit("response.in_progress", response=start)
    for index, item in enumerate(output):
        emit("response.output_item.added", output_index=index, item=_pending(item))
        item_id = item["id"]
        if item["type"] == "message":
            for c, part in enumerate(item["content"]):
                if part["type"] == "output_text":
                    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                else:
                    empty = {"type": "refusal", "refusal": ""}
                where = {"item_id": item_id, "output_index": index, "content_index": c}
                emit("response.content_part.added", **where, part=empty)
                if part["type"] == "output_text":
                    cut = _cut(part["text"], pieces)
                    if text_pieces is not None and "".join(text_pieces) == part["text"]:
                        cut = list(text_pieces)
                    for piece in cut:
                        emit("response.output_text.delta", **where, delta=piece, logprobs=[])
                    emit("response.output_text.done", **where, text=part["text"], logprobs=[])
                else:
                    for piece in _cut(part["refusal"], pieces):
                        emit("response.refusal.delta", **where, delta=piece)
                    emit("response.refusal.done", **where, refusal=part["refusal"])
                emit("response.content_part.done", **where, part=part)
        elif item["type"] == "function_call":
            where = {"item_id": item_id, "output_index": index}
            for piece in _cut(item["arguments"], pieces):
                emit("response.function_call_arguments.delta", **where, delta=piece)
            emit("response.function_call_arguments.done", **where, arguments=item["arguments"])
        else:
            for s, part in enumerate(item["summary"]):
                where = {"item_id": item_id, "output_index": index, "summary_index": s}
                empty = {"type": "summary_text", "text": ""}
                emit("response.reasoning_summary_part.added", **where, part=empty)
                for piece in _cut(part["text"], pieces):
                    emit("response.reasoning_summary_text.delta", **where, delta=piece)
                emit("response.reasoning_summary_text.done", **where, text=part["text"])
                emit("response.reasoning_summary_part.done", **where, part=part)
        emit("response.output_item.done", output_index=index, item=item)
    if end:
        final = response_json(
            output if completed_output else (), status=status, incomplete=incomplete, usage=usage
        )
        emit(f"response.{status}", response=final)
    return events


def _cut(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    step = max(1, -(-len(text) // pieces))
    return [text[i : i + step] for i in range(0, len(text), step)]


def reply(stream: bool, *, text: str | Sequence[str] = ("Hello", ", world"), **kw: Any) -> Answer:
    """An answer with ``text`` (streamed in these pieces), after ``output`` items if given."""
    pieces = (text,) if isinstance(text, str) else tuple(text)
    whole = "".join(pieces)
    output = [*kw.pop("output", ()), *([message(whole)] if whole else [])]
    if stream:
        return sse_answer(sse_body(stream_events(output, text_pieces=pieces, **kw)))
    return json_answer(response_json(output, **kw))


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def malformed(stream: bool) -> Answer:
    """An answer cut inside its JSON: an event's data, or the whole body."""
    if stream:
        return sse_answer(sse_body([("response.created", '{"type": "response.created", "resp')]))
    return raw_answer(b'{"id": "resp_1", "output": [')
