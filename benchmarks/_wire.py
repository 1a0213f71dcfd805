"""B7: the HTTP providers on a real wire, against bare httpx on the same wire.

Both sides run the benchmark workload (``R`` rounds: ``R - 1`` calls of
``add``, then the text) with ``n`` runs at once, against the same local SSE
server (:mod:`benchmarks._sse_server`, a process of its own on 127.0.0.1):

- **tether**: ``AnthropicProvider`` / ``OpenAIProvider`` / ``GeminiProvider`` (streaming) in a
  Runtime, every run verified as in B2.
- **bare httpx**: one coroutine per run that POSTs the same JSON body tether
  would (the whole transcript, the tool's schema), parses the answer with
  httpx-sse and ``json.loads``, calls ``add`` and appends the turn: the floor
  of any Python client of this API. It uses an ``httpx.AsyncClient`` with the
  providers' own pool limits, so both sides open the same connections.
"""

from __future__ import annotations

import contextlib
import gc
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
from httpx_sse import EventSource

import tether
from tether.providers import AnthropicProvider, GeminiProvider, OpenAIProvider
from tether.providers._clients import DEFAULT_LIMITS, DEFAULT_TIMEOUT
from tether.providers._gemini_schema import gemini_schema

from . import _workload as w
from ._cases import WARMUP_RUNS, Job, Outcome, Result, _runtime, _tether_batch

WIRES = ("anthropic", "openai", "gemini")
KEY = "bench-key"
_SEPARATORS = (",", ":")


@contextlib.contextmanager
def sse_server() -> Iterator[int]:
    """Start :mod:`benchmarks._sse_server` in a child process; yield its port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks._sse_server"],
        cwd=Path(__file__).resolve().parent.parent,  # where the benchmarks package is
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the SSE server did not start (said {line!r})")
        yield int(line)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def base_url(wire: str, port: int, rounds: int) -> str:
    """The provider's ``base_url``; its first path segment tells the server ``R``."""
    root = f"http://127.0.0.1:{port}/r{rounds}"
    return f"{root}/v1" if wire == "openai" else root


def provider(
    wire: str, port: int, rounds: int
) -> AnthropicProvider | OpenAIProvider | GeminiProvider:
    url = base_url(wire, port, rounds)
    if wire == "anthropic":
        return AnthropicProvider("bench-model", api_key=KEY, base_url=url)
    if wire == "gemini":
        return GeminiProvider("bench-model", api_key=KEY, base_url=url)
    return OpenAIProvider("bench-model", api_key=KEY, base_url=url)


# ------------------------------------------------------------------ tether side


async def wire_tether(job: Job) -> Result:
    out = Outcome()
    with sse_server() as port:
        agent = tether.Agent(
            name="bench-wire",
            provider=provider(job.wire, port, job.rounds),
            tools=[w.ADD_TOOL],
            limits=tether.Limits(max_steps=job.rounds + 1),
        )
        with anyio.move_on_after(job.timeout_s) as scope:
            async with _runtime(job.n) as rt:
                await _tether_batch(rt, agent, WARMUP_RUNS)
                for _ in range(job.repeats):
                    w.TALLY.executions = 0
                    gc.collect()
                    start = time.perf_counter()
                    results = await _tether_batch(rt, agent, job.n)
                    out.timed(time.perf_counter() - start)
                    out.answered(results, job.rounds)
                    del results
    out.metrics["rounds_per_s"] = job.n * job.rounds / out.best_s
    return out.done(scope, job)


# ------------------------------------------------------------------- bare side


def _tools(wire: str) -> list[dict[str, Any]]:
    spec = w.ADD_TOOL
    if wire == "gemini":
        parameters = gemini_schema(spec.input_schema)
        declaration = {"name": spec.name, "description": spec.description, "parameters": parameters}
        return [{"functionDeclarations": [declaration]}]
    if wire == "anthropic":
        return [
            {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema}
        ]
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.input_schema,
            },
        }
    ]


class _Turn:
    """What one streamed answer said: the text, or one tool call."""

    __slots__ = ("arguments", "call_id", "text")

    def __init__(self) -> None:
        self.text = ""
        self.call_id = ""
        self.arguments = ""


def _anthropic_event(turn: _Turn, data: dict[str, Any]) -> None:
    """Fold one Messages API event into ``turn``."""
    kind = data["type"]
    if kind == "content_block_start":
        block = data["content_block"]
        if block["type"] == "tool_use":
            turn.call_id = block["id"]
    elif kind == "content_block_delta":
        delta = data["delta"]
        if delta["type"] == "text_delta":
            turn.text += delta["text"]
        else:
            turn.arguments += delta["partial_json"]


def _openai_chunk(turn: _Turn, data: dict[str, Any]) -> None:
    """Fold one Chat Completions chunk into ``turn``."""
    for choice in data["choices"]:
        delta = choice["delta"]
        if delta.get("content"):
            turn.text += delta["content"]
        for call in delta.get("tool_calls") or ():
            if call.get("id"):
                turn.call_id = call["id"]
            turn.arguments += call["function"].get("arguments", "")


def _gemini_chunk(turn: _Turn, data: dict[str, Any]) -> None:
    """Fold one Gemini chunk into ``turn``."""
    for candidate in data.get("candidates") or ():
        for part in candidate.get("content", {}).get("parts") or ():
            if "text" in part:
                turn.text += part["text"]
            elif "functionCall" in part:
                call = part["functionCall"]
                turn.call_id = call.get("id") or "call"
                turn.arguments = json.dumps(call["args"])


_FOLDS = {"anthropic": _anthropic_event, "openai": _openai_chunk, "gemini": _gemini_chunk}


class _BareClient:
    """The same requests as the provider's, made with bare httpx and httpx-sse."""

    def __init__(self, client: httpx.AsyncClient, wire: str, port: int, rounds: int) -> None:
        self.client = client
        self.wire = wire
        self.rounds = rounds
        root = base_url(wire, port, rounds)
        self.url = {
            "anthropic": f"{root}/v1/messages",
            "openai": f"{root}/chat/completions",
            "gemini": f"{root}/v1beta/models/bench-model:streamGenerateContent?alt=sse",
        }[wire]
        if wire == "gemini":
            self.headers = {
                "x-goog-api-key": KEY,
                "content-type": "application/json",
                "accept": "text/event-stream",
            }
        elif wire == "anthropic":
            self.headers = {
                "x-api-key": KEY,
                "anthropic-version": "2023-06-01",
                "content-type": "application/json",
                "accept": "text/event-stream",
            }
        else:
            self.headers = {
                "content-type": "application/json",
                "accept": "text/event-stream",
                "authorization": f"Bearer {KEY}",
            }
        self.tools = _tools(wire)

    def body(self, messages: list[dict[str, Any]]) -> bytes:
        if self.wire == "gemini":
            payload: dict[str, Any] = {
                "contents": messages,
                "tools": self.tools,
                "generationConfig": {"maxOutputTokens": 4096},
            }
        elif self.wire == "anthropic":
            payload = {
                "model": "bench-model",
                "max_tokens": 4096,
                "messages": messages,
                "tools": self.tools,
                "stream": True,
            }
        else:
            payload = {
                "model": "bench-model",
                "messages": messages,
                "max_tokens": 4096,
                "tools": self.tools,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        return json.dumps(payload, ensure_ascii=False, separators=_SEPARATORS).encode()

    async def turn(self, messages: list[dict[str, Any]]) -> _Turn:
        turn = _Turn()
        fold = _FOLDS[self.wire]
        async with self.client.stream(
            "POST", self.url, content=self.body(messages), headers=self.headers
        ) as response:
            response.raise_for_status()
            # Read to the body's end (the connection goes back to the pool).
            async for event in EventSource(response).aiter_sse():
                if event.data != "[DONE]":
                    fold(turn, json.loads(event.data))
        return turn

    async def run(self) -> str | None:
        """One run of the workload; a problem, or ``None`` when verified."""
        if self.wire == "gemini":
            messages: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": w.QUESTION}]}]
        elif self.wire == "anthropic":
            messages = [{"role": "user", "content": [{"type": "text", "text": w.QUESTION}]}]
        else:
            messages = [{"role": "user", "content": w.QUESTION}]
        executions = 0
        for _ in range(self.rounds):
            turn = await self.turn(messages)
            if not turn.call_id:
                if turn.text != w.FINAL_TEXT:
                    return f"final text {turn.text!r}"
                break
            args = json.loads(turn.arguments)
            result = await w.add(**args)
            if result != args["a"] + args["b"]:
                return f"add({args}) gave a wrong sum"
            executions += 1
            self.append(messages, turn, args, str(result))
        if executions != self.rounds - 1:
            return f"{executions} tool executions, expected {self.rounds - 1}"
        return None

    def append(
        self, messages: list[dict[str, Any]], turn: _Turn, args: dict[str, Any], result: str
    ) -> None:
        if self.wire == "gemini":
            call = {"name": "add", "args": args, "id": turn.call_id}
            messages.append({"role": "model", "parts": [{"functionCall": call}]})
            response = {"name": "add", "response": {"output": result}, "id": turn.call_id}
            messages.append({"role": "user", "parts": [{"functionResponse": response}]})
            return
        if self.wire == "anthropic":
            use = {"type": "tool_use", "id": turn.call_id, "name": "add", "input": args}
            messages.append({"role": "assistant", "content": [use]})
            done = {"type": "tool_result", "tool_use_id": turn.call_id, "content": result}
            messages.append({"role": "user", "content": [done]})
            return
        function = {"name": "add", "arguments": turn.arguments}
        call = {"id": turn.call_id, "type": "function", "function": function}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": turn.call_id, "content": result})


async def _bare_wire_batch(bare: _BareClient, n: int) -> list[str | None]:
    problems: list[str | None] = [None] * n

    async def one(i: int) -> None:
        problems[i] = await bare.run()

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return problems


async def wire_bare(job: Job) -> Result:
    out = Outcome()
    with sse_server() as port, anyio.move_on_after(job.timeout_s) as scope:
        async with httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS) as client:
            bare = _BareClient(client, job.wire, port, job.rounds)
            await _bare_wire_batch(bare, WARMUP_RUNS)
            for _ in range(job.repeats):
                w.TALLY.executions = 0
                gc.collect()
                start = time.perf_counter()
                problems = await _bare_wire_batch(bare, job.n)
                out.timed(time.perf_counter() - start)
                out.bare(problems, job.rounds)
    out.metrics["rounds_per_s"] = job.n * job.rounds / out.best_s
    return out.done(scope, job)


CASES: dict[str, Callable[[Job], Awaitable[Result]]] = {"tether": wire_tether, "bare": wire_bare}
