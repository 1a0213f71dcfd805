"""The OpenAI Chat Completions API on the wire: the fake server's payloads for its tests."""

from __future__ import annotations

from typing import Any

from tether.providers import OpenAIProvider, TokenUsage

from .fakes import SECRET, Answer, json_answer, raw_answer, sse_answer, sse_body

MODEL = "gpt-4o-mini-2024-07-18"
USAGE = {
    "prompt_tokens": 30,
    "completion_tokens": 12,
    "total_tokens": 42,
    "prompt_tokens_details": {"cached_tokens": 10},
    "completion_tokens_details": {"reasoning_tokens": 0},
}
EXPECTED_USAGE = TokenUsage(input_tokens=20, output_tokens=12, cache_read_tokens=10)


def provider(url: str, *, stream: bool = True, **kw: Any) -> OpenAIProvider:
    kw.setdefault("api_key", SECRET)
    return OpenAIProvider(MODEL, base_url=f"{url}/v1", stream=stream, **kw)


def completion_json(
    *,
    text: str | None = "Hello, world",
    tools: tuple[tuple[str, str, str], ...] = (),
    finish: str | None = "stop",
    usage: dict[str, Any] | None = USAGE,
    refusal: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": refusal}
    if tools:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in tools
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
        "usage": None,
        **extra,
    }


def stream_chunks(
    *,
    text: tuple[str, ...] = ("Hello", ", world"),
    tool_deltas: tuple[dict[str, Any], ...] = (),
    finish: str | None = "stop",
    usage: dict[str, Any] | None = USAGE,
    done: bool = True,
) -> list[tuple[str | None, Any]]:
    chunks: list[Any] = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in text]
    chunks += [chunk({"tool_calls": [d]}) for d in tool_deltas]
    if finish is not None:
        chunks.append(chunk({}, finish))
    if usage is not None:
        chunks.append({**chunk(), "choices": [], "usage": usage})
    events: list[tuple[str | None, Any]] = [(None, c) for c in chunks]
    if done:
        events.append((None, "[DONE]"))
    return events


def reply(stream: bool, **kw: Any) -> Answer:
    if stream:
        return sse_answer(sse_body(stream_chunks(**kw)))
    return json_answer(
        completion_json(
            text="".join(kw.get("text", ("Hello", ", world"))), finish=kw.get("finish", "stop")
        )
    )


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def malformed(stream: bool) -> Answer:
    """An answer cut inside its JSON: a chunk's data, or the whole body."""
    if stream:
        return sse_answer(sse_body([(None, '{"choices": [{"delta": ')]))
    return raw_answer(b'{"choices": [')
