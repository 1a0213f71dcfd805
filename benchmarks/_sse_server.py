"""B7's model server: just enough HTTP/1.1 and SSE to answer both wire formats, fast.

``python -m benchmarks._sse_server`` listens on 127.0.0.1 (a free port), prints
the port on one line, and serves until its stdin closes. It runs in a process
of its own, so its work is not on the measured event loop: both sides of B7
(tether and bare httpx) talk to the same server, and the difference between
them is the client's.

Every answer is the benchmark workload's (see :mod:`benchmarks._workload`):
a request carrying ``k`` tool results is round ``k + 1``; while ``k < R - 1``
the model asks for ``add(a=k+1, b=k+1)``, then it answers
:data:`~benchmarks._workload.FINAL_TEXT`. ``R`` comes from the path's first
segment (``/r3/v1/messages``: the providers' ``base_url`` carries it), so one
server serves every job. The path picks the wire:
``/v1/messages`` is the Anthropic Messages API, ``/v1/chat/completions`` is
OpenAI Chat Completions, ``:streamGenerateContent?alt=sse`` is Gemini; all
stream (``text/event-stream``) with a ``Content-Length``, and the connection
is kept alive. The answers are encoded once per (wire, round, rounds) and reused.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from typing import Any

FINAL_TEXT = "all sums done"  # the workload's (kept here: this module imports nothing of tether)
MODEL = "bench-model"
#: How each wire marks one tool result in a request body (compact JSON, as both sides send).
TOOL_RESULT = {
    "anthropic": b'"type":"tool_result"',
    "openai": b'"role":"tool"',
    "gemini": b'"functionResponse"',
}


def _sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {text}\n\n")
    return "".join(out).encode()


def anthropic_body(call: int | None) -> bytes:
    """A streamed Messages API answer: ``add(call, call)``, or the final text (``None``)."""
    usage = {"input_tokens": 20, "output_tokens": 1}
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [],
            "stop_reason": None,
            "usage": usage,
        },
    }
    if call is None:
        block: dict[str, Any] = {"type": "text", "text": ""}
        delta: dict[str, Any] = {"type": "text_delta", "text": FINAL_TEXT}
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": f"toolu_{call}", "name": "add", "input": {}}
        args = json.dumps({"a": call, "b": call}, separators=(",", ":"))
        delta = {"type": "input_json_delta", "partial_json": args}
        stop = "tool_use"
    return _sse(
        [
            ("message_start", start),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 8},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


def openai_body(call: int | None) -> bytes:
    """A streamed Chat Completions answer: ``add(call, call)``, or the final text (``None``)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    if call is None:
        chunks = [chunk({"role": "assistant", "content": FINAL_TEXT}), chunk({}, "stop")]
    else:
        args = json.dumps({"a": call, "b": call}, separators=(",", ":"))
        tool = {
            "index": 0,
            "id": f"call_{call}",
            "type": "function",
            "function": {"name": "add", "arguments": args},
        }
        chunks = [
            chunk({"role": "assistant", "content": None, "tool_calls": [tool]}),
            chunk({}, "tool_calls"),
        ]
    usage = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
    }
    return _sse([(None, c) for c in chunks] + [(None, usage), (None, "[DONE]")])


def gemini_body(call: int | None) -> bytes:
    """A streamed Gemini answer: ``add(call, call)``, or the final text (``None``)."""
    usage = {"promptTokenCount": 20, "candidatesTokenCount": 8, "totalTokenCount": 28}
    if call is None:
        part: dict[str, Any] = {"text": FINAL_TEXT}
    else:
        part = {
            "functionCall": {"id": f"call_{call}", "name": "add", "args": {"a": call, "b": call}}
        }
    first = {"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}]}
    last = {
        "candidates": [
            {"content": {"role": "model", "parts": []}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": usage,
        "modelVersion": MODEL,
    }
    return _sse([(None, first), (None, last)])


_BODIES = {"anthropic": anthropic_body, "openai": openai_body, "gemini": gemini_body}
_ANSWERS: dict[tuple[str, int, int], bytes] = {}


def answer(wire: str, body: bytes, rounds: int) -> bytes:
    """The whole HTTP response to one request (headers and body), cached."""
    done = body.count(TOOL_RESULT[wire])
    key = (wire, done, rounds)
    cached = _ANSWERS.get(key)
    if cached is None:
        call = done + 1 if done < rounds - 1 else None
        payload = _BODIES[wire](call)
        cached = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            + f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        _ANSWERS[key] = cached
    return cached


class _Connection(asyncio.Protocol):
    """One keep-alive connection: parse requests as they arrive, answer each at once."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            path = head.split(" ", 2)[1]
            if path.endswith("/messages"):
                wire = "anthropic"
            elif path.endswith(":streamGenerateContent?alt=sse"):
                wire = "gemini"
            else:
                wire = "openai"
            prefix = path.split("/", 2)[1]
            rounds = int(prefix[1:]) if prefix[:1] == "r" and prefix[1:].isdigit() else 3
            assert self.transport is not None
            self.transport.write(answer(wire, body, rounds))


async def serve() -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = await loop.create_server(_Connection, sock=sock, backlog=4096)
    print(sock.getsockname()[1], flush=True)
    # Serve until the parent closes our stdin (or dies).
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


if __name__ == "__main__":
    asyncio.run(serve())
