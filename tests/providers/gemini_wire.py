"""The Gemini API on the wire: the fake server's payloads for its tests.

Written from Google's API reference (``GenerateContentResponse``, ``Candidate``,
``Part``, ``UsageMetadata``, the ``google.rpc.Status`` error object); the
official ``google-genai`` SDK parses these same payloads in
``test_gemini_sdk.py``.
"""

from __future__ import annotations

import base64
from typing import Any

from tether.providers import GeminiProvider, TokenUsage

from .fakes import SECRET, Answer, json_answer, raw_answer, sse_answer, sse_body

MODEL = "gemini-2.5-flash"
USAGE = {
    "promptTokenCount": 30,
    "candidatesTokenCount": 12,
    "thoughtsTokenCount": 5,
    "cachedContentTokenCount": 10,
    "totalTokenCount": 47,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 30}],
}
#: 30 prompt tokens of which 10 cached; 12 answer and 5 thinking tokens are output.
EXPECTED_USAGE = TokenUsage(
    input_tokens=20, output_tokens=17, cache_read_tokens=10, reasoning_tokens=5
)

#: A function call: (id or None, name, args).
Call = tuple[str | None, str, dict[str, Any]]


def provider(url: str, *, stream: bool = True, **kw: Any) -> GeminiProvider:
    kw.setdefault("api_key", SECRET)
    return GeminiProvider(MODEL, base_url=url, stream=stream, **kw)


def path(stream: bool, model: str = MODEL) -> str:
    """The path a request for ``model`` goes to."""
    if stream:
        return f"/v1beta/models/{model}:streamGenerateContent?alt=sse"
    return f"/v1beta/models/{model}:generateContent"


def parts(text: str | None = None, calls: tuple[Call, ...] = ()) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"text": text}] if text else []
    for call_id, name, args in calls:
        call: dict[str, Any] = {"name": name, "args": args}
        if call_id is not None:
            call["id"] = call_id
        out.append({"functionCall": call})
    return out


def response_json(
    *,
    text: str | None = "Hello, world",
    calls: tuple[Call, ...] = (),
    finish: str | None = "STOP",
    usage: dict[str, Any] | None = USAGE,
    extra_parts: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    candidate: dict[str, Any] = {
        "content": {"role": "model", "parts": [*extra_parts, *parts(text, calls)]},
        "index": 0,
    }
    if finish is not None:
        candidate["finishReason"] = finish
    body: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": MODEL,
        "responseId": "resp-1",
    }
    if usage is not None:
        body["usageMetadata"] = usage
    return body


def stream_chunks(
    *,
    text: tuple[str, ...] = ("Hello", ", world"),
    calls: tuple[Call, ...] = (),
    finish: str | None = "STOP",
    usage: dict[str, Any] | None = USAGE,
) -> list[tuple[str | None, Any]]:
    """One chunk per text piece, one with the calls, the finishing one with usage."""
    chunks: list[dict[str, Any]] = []
    for n, piece in enumerate(text, 1):
        # Every chunk reports usage so far: the prompt's counts, the answer's growing.
        partial = None
        if usage is not None:
            partial = {**usage, "candidatesTokenCount": n, "totalTokenCount": 40 + n}
            partial.pop("thoughtsTokenCount", None)
        chunks.append(response_json(text=piece, finish=None, usage=partial))
    if calls:
        chunks.append(response_json(text=None, calls=calls, finish=None, usage=None))
    if finish is not None:
        last = response_json(text=None, finish=finish, usage=usage)
        last["candidates"][0]["content"]["parts"] = []
        chunks.append(last)
    return [(None, c) for c in chunks]


def reply(stream: bool, **kw: Any) -> Answer:
    if stream:
        return sse_answer(sse_body(stream_chunks(**kw)))
    text = kw.pop("text", ("Hello", ", world"))
    return json_answer(response_json(text="".join(text), **kw))


def call_reply(stream: bool, calls: tuple[Call, ...], text: str | None = None) -> Answer:
    """An answer that calls functions (finishReason STOP, as Gemini sends it)."""
    if stream:
        return sse_answer(sse_body(stream_chunks(text=(text,) if text else (), calls=calls)))
    return json_answer(response_json(text=text, calls=calls))


def error_body(
    code: int, status: str, message: str, retry_delay: str | None = None
) -> dict[str, Any]:
    """A ``google.rpc.Status`` error, with a ``RetryInfo`` detail when ``retry_delay``."""
    details: list[dict[str, Any]] = []
    if retry_delay is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{"quotaMetric": "generate_content_requests", "quotaId": "PerMin"}],
            }
        )
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
        )
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return {"error": error}


def error(
    code: int, status: str, message: str = "no luck", retry_delay: str | None = None
) -> Answer:
    return json_answer(error_body(code, status, message, retry_delay), status=code)


def rate_limited(retry_delay: str | None = "0s") -> Answer:
    return error(
        429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).", retry_delay
    )


def too_long() -> Answer:
    message = (
        "The input token count (1048580) exceeds the maximum number of tokens allowed (1048576)."
    )
    return error(400, "INVALID_ARGUMENT", message)


def malformed(stream: bool) -> Answer:
    """An answer cut inside its JSON: a chunk's data, or the whole body."""
    if stream:
        return sse_answer(sse_body([(None, '{"candidates": [{"content": ')]))
    return raw_answer(b'{"candidates": [')


#: Thought signatures are opaque base64 (the SDK decodes them to bytes).
SIG_CALL = base64.b64encode(b"\x0a\x24\xfb\xff the call's signature").decode()
SIG_TEXT = base64.b64encode(b"\x0a\x24\xfe\xff the text's signature").decode()


def thinking_chunks() -> list[tuple[str | None, Any]]:
    """A streamed answer with thought summaries in two parts, a signed call, text with a
    signed empty part at its end (as Gemini streams them)."""
    thought = [{"text": "I should ", "thought": True}, {"text": "add.", "thought": True}]
    call = {"functionCall": {"name": "add", "args": {"a": 2, "b": 3}}, "thoughtSignature": SIG_CALL}
    chunks = [
        response_json(text=None, finish=None, usage=None, extra_parts=(thought[0],)),
        response_json(text=None, finish=None, usage=None, extra_parts=(thought[1],)),
        response_json(text=None, finish=None, usage=None, extra_parts=(call,)),
        response_json(text="Adding", finish=None, usage=None),
        response_json(text=" now.", finish=None, usage=None),
        response_json(text=None, extra_parts=({"text": "", "thoughtSignature": SIG_TEXT},)),
    ]
    return [(None, c) for c in chunks]
