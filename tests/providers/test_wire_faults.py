"""Faults no retry can fix end a run at once with what the user must change; a prompt too
long takes the context path. End to end, over real sockets, for both HTTP providers."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import tether
from tether import events as ev
from tether.providers import Backoff, OpenAIProvider

from ..helpers import assert_consistent, of
from . import anthropic_wire as anth
from . import gemini_wire as gem
from . import openai_wire as oai
from . import wires
from .fakes import SECRET, Answer, fake_server, json_answer, raw_answer, sse_answer, sse_body

pytestmark = pytest.mark.anyio

KINDS = pytest.mark.parametrize("kind", ["anthropic", "openai"])
STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def make_provider(kind: str, url: str, stream: bool = True, **kw: Any) -> Any:
    backoff = Backoff(initial=0.001, cap=0.01, jitter=False)
    return wires.make_provider(kind, url, stream, backoff=backoff, **kw)


async def run(provider: Any, **agent: Any) -> tether.RunResult:
    async with tether.Runtime() as rt:
        result = await rt.run(tether.Agent(name="faults", provider=provider, **agent), "hi")
    assert_consistent(result)
    return result


@KINDS
@STREAM
async def test_a_200_that_is_not_the_api_is_not_retried(kind: str, stream: bool) -> None:
    """A 200 text/html page (a wrong base_url) ends the run at once, naming what came back."""
    page = raw_answer(b"<html>Sign in to the portal</html>", content_type="text/html")
    async with fake_server(page, page, page) as server:
        result = await run(make_provider(kind, server.url, stream))
    assert len(server.requests) == 1
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert "InvalidRequest" in result.error
    assert "content-type 'text/html'" in result.error
    assert "Sign in to the portal" in result.error
    assert "check base_url" in result.error


@KINDS
async def test_a_redirect_is_not_retried_and_names_where_it_points(kind: str) -> None:
    """A 302 ends the run at once; the error names the Location to use instead."""
    moved = Answer(status=302, headers=(("location", "https://elsewhere.example/v2"),))
    async with fake_server(moved, moved, moved) as server:
        result = await run(make_provider(kind, server.url))
    assert len(server.requests) == 1
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert "redirected to 'https://elsewhere.example/v2'" in result.error


@KINDS
async def test_an_in_stream_invalid_request_error_is_fatal_for_both(kind: str) -> None:
    """An invalid_request_error inside a stream is not retried, by either provider."""
    error = {"type": "invalid_request_error", "message": "tools[0] is malformed"}
    if kind == "anthropic":
        body = sse_body([*anth.stream_events(end=False)[:3], ("error", {"error": error})])
    else:
        body = sse_body([(None, {"error": error})])
    answer = sse_answer(body)
    async with fake_server(answer, answer, answer) as server:
        result = await run(make_provider(kind, server.url))
    assert len(server.requests) == 1
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert result.error.startswith("InvalidRequest: ")
    assert "tools[0] is malformed" in result.error


def too_long(kind: str) -> Answer:
    if kind == "anthropic":
        message = "prompt is too long: 201234 tokens > 200000 maximum"
        body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        message = "This model's maximum context length is 8192 tokens."
        body = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        }
    return json_answer(body, status=400)


def tool_round(kind: str, n: int) -> Answer:
    if kind == "anthropic":
        return json_answer(
            anth.message_json(
                text="", tools=((f"toolu_{n}", "add", {"a": n, "b": 1}),), stop="tool_use"
            )
        )
    call = (f"call_{n}", "add", f'{{"a": {n}, "b": 1}}')
    return json_answer(oai.completion_json(text=None, tools=(call,), finish="tool_calls"))


def final(kind: str) -> Answer:
    if kind == "anthropic":
        return json_answer(anth.message_json(text="Done."))
    return json_answer(oai.completion_json(text="Done."))


@KINDS
async def test_a_prompt_too_long_is_trimmed_once_then_answered(kind: str) -> None:
    """A 400 'context length exceeded' takes docs/concepts/round.md's path: trim, go on, answer."""
    answers = [tool_round(kind, 1), tool_round(kind, 2), tool_round(kind, 3), too_long(kind)]
    async with fake_server(*answers, final(kind)) as server:
        provider = make_provider(kind, server.url, stream=False)
        result = await run(provider, tools=[add], context=tether.TruncateOldest(keep_last=2))
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "Done."
    finished = of(result.events, ev.ModelCallFinished)
    assert finished[3].stop_reason == "model_context_window_exceeded"
    assert finished[3].raw_stop_reason is not None
    assert finished[3].raw_stop_reason.startswith("ContextWindowExceeded: ")
    assert ("continue", "context_trimmed") in [
        (t.kind, t.reason) for t in of(result.events, ev.Transition)
    ]
    sent = server.requests[4].json()["messages"]
    assert len(sent) == 3  # the question, then the newest exchange


@KINDS
async def test_a_prompt_too_long_that_cannot_be_trimmed_ends_context_exceeded(kind: str) -> None:
    """With nothing to trim (KeepAll), the run ends context_exceeded, not provider_failed."""
    async with fake_server(too_long(kind), too_long(kind)) as server:
        result = await run(make_provider(kind, server.url, stream=False))
    assert len(server.requests) == 1
    assert result.termination is tether.Termination.CONTEXT_EXCEEDED


async def test_a_keyless_compatible_server_failing_says_no_key_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Against a non-OpenAI host with no key configured, a 401 says that no key was sent."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    denied = json_answer({"error": {"message": "unauthorized"}}, status=401)
    async with fake_server(denied) as server:
        provider = OpenAIProvider(oai.MODEL, base_url=f"{server.url}/v1", api_key=None)
        result = await run(provider)
    assert "authorization" not in server.requests[0].headers
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert "no API key was sent: none is configured" in result.error
    assert "OPENAI_API_KEY" in result.error


@pytest.mark.parametrize("kind", ["anthropic", "openai", "gemini"])
async def test_httpcore_debug_logs_never_show_a_key_a_server_echoes(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A response header echoing the key is scrubbed from httpcore's DEBUG log records."""
    body = {
        "anthropic": lambda: anth.message_json(text="ok"),
        "openai": lambda: oai.completion_json(text="ok"),
        "gemini": lambda: gem.response_json(text="ok"),
    }[kind]()
    answer = json_answer(body, headers=[("x-echo-key", SECRET)])
    caplog.set_level(logging.DEBUG, logger="httpcore")
    caplog.set_level(logging.DEBUG, logger="httpx")
    async with fake_server(answer) as server:
        result = await run(make_provider(kind, server.url, stream=False))
    assert result.termination is tether.Termination.ANSWERED
    headers = [r for r in caplog.records if "receive_response_headers.complete" in r.getMessage()]
    assert headers
    assert "[redacted]" in headers[0].getMessage()
    assert SECRET not in caplog.text


# ------------------------------------------------ no usage reports, runaway answers


def _endless(kind: str, pieces: int = 4000) -> Answer:
    """A long stream of text that reports no usage and is cut into many parts."""
    text = tuple(f"word{i} " * 8 for i in range(pieces))
    if kind == "anthropic":
        events = anth.stream_events(text=text, end=False)
        body = sse_body(
            [
                (name, {k: v for k, v in data.items() if k != "usage"})
                if isinstance(data, dict) and data.get("type") == "message_delta"
                else (name, _strip_usage(data))
                for name, data in events
            ]
        )
    else:
        body = sse_body(oai.stream_chunks(text=text, usage=None, finish=None, done=False))
    return sse_answer(body, at=range(4096, len(body), 4096))


def _strip_usage(data: Any) -> Any:
    if isinstance(data, dict) and data.get("type") == "message_start":
        message = {k: v for k, v in data["message"].items() if k != "usage"}
        return {**data, "message": message}
    return data


@KINDS
async def test_a_stream_that_never_reports_usage_is_cut_by_its_estimate(kind: str) -> None:
    """Token ceilings bind on tether's estimate when the provider reports no usage."""
    async with fake_server(_endless(kind)) as server:
        provider = make_provider(kind, server.url)
        result = await run(provider, limits=tether.Limits(max_total_tokens=2_000))
    assert result.termination is tether.Termination.TOKEN_CEILING
    assert result.usage.estimated
    charges = of(result.events, ev.UsageCharged)
    assert charges
    assert all(c.estimated for c in charges)
    # Cut at the first text delta whose estimate crosses: past the budget by at most
    # the input and that one delta (72 bytes here, 18 tokens).
    assert 2_000 <= result.usage.total_tokens <= 2_000 + result.usage.input_tokens + 18


@KINDS
async def test_an_answer_without_usage_is_counted_by_estimate(kind: str) -> None:
    """A whole answer with no usage is charged by estimate, marked, never as 0 tokens."""
    if kind == "anthropic":
        body = anth.message_json(text="x" * 400)
        body.pop("usage", None)
    else:
        body = {**oai.completion_json(text="x" * 400), "usage": None}
    async with fake_server(json_answer(body)) as server:
        result = await run(make_provider(kind, server.url, stream=False))
    assert result.termination is tether.Termination.ANSWERED
    assert result.usage.estimated
    assert result.usage.output_tokens == 100  # 400 bytes / 4
    assert result.usage.input_tokens > 0
    finished = of(result.events, ev.ModelCallFinished)
    assert finished[0].usage.estimated


async def test_a_late_usage_report_replaces_the_estimate_exactly() -> None:
    """With a budget, a stream is charged by estimate until its report; then exactly by it."""
    text = tuple("lorem ipsum " * 20 for _ in range(10))
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    answer = sse_answer(sse_body(oai.stream_chunks(text=text, usage=usage)))
    async with fake_server(answer) as server:
        provider = make_provider("openai", server.url)
        result = await run(provider, limits=tether.Limits(max_total_tokens=100_000))
    assert result.termination is tether.Termination.ANSWERED
    assert (result.usage.input_tokens, result.usage.output_tokens) == (7, 3)
    assert not result.usage.estimated


@KINDS
@STREAM
async def test_an_answer_past_max_response_bytes_ends_the_call(kind: str, stream: bool) -> None:
    """A body past max_response_bytes is a fatal ResponseTooLarge, not read whole or retried."""
    if stream:
        answer = _endless(kind)
    else:
        big = "y" * 300_000
        answer = json_answer(
            anth.message_json(text=big) if kind == "anthropic" else oai.completion_json(text=big)
        )
    async with fake_server(answer, answer) as server:
        provider = make_provider(kind, server.url, stream, max_response_bytes=64 * 1024)
        result = await run(provider)
    assert len(server.requests) == 1
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert result.error.startswith("ResponseTooLarge: ")
    assert "65,536 bytes" in result.error
