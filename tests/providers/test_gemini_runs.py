"""Whole runs on GeminiProvider against the fake Gemini server (real sockets, both backends).

The fault matrix (429 with RetryInfo, 5xx, a cut stream, malformed JSON, a
refusal, a prompt too long that takes the trim path), a three-turn
conversation whose third turn's requests are asserted exactly, fallback
chains from a rate-limited Gemini to the Chat Completions and Anthropic
fakes, cancellation mid-stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import Backoff, FallbackProvider, ToolUseBlock, price_for

from ..helpers import assert_consistent, kinds, of, task_names
from . import anthropic_wire as anth
from . import gemini_wire as gem
from . import openai_wire as oai
from .fakes import SECRET, Answer, fake_server, json_answer, sse_answer, sse_body

pytestmark = pytest.mark.anyio
STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
FAST = Backoff(initial=0.001, cap=0.01, jitter=False)


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent_on(provider: Any, **kw: Any) -> tether.Agent:
    kw.setdefault("limits", tether.Limits(max_provider_attempts=3))
    return tether.Agent(name="adder", instructions="Add.", provider=provider, tools=[add], **kw)


async def run(agent: tether.Agent, question: str = "What is 2 + 3?") -> tether.RunResult:
    with anyio.fail_after(20):
        async with tether.Runtime() as rt:
            result = await rt.run(agent, question)
    assert_consistent(result)
    return result


def tool_round(stream: bool, n: int = 1) -> Answer:
    return gem.call_reply(stream, ((None, "add", {"a": n + 1, "b": 3}),))


def answer(stream: bool, text: tuple[str, ...] = ("The sum ", "is 5.")) -> Answer:
    return gem.reply(stream, text=text)


def cut_stream() -> Answer:
    """A stream whose connection closes after its first text chunk."""
    body = sse_body(gem.stream_chunks(text=("The sum ", "is 5.")))
    first = body.index(b"\n\n") + 2
    return sse_answer(body[:first], drop=True)


# ------------------------------------------------------------ the fault matrix


@STREAM
async def test_a_tool_run_through_a_429_with_retry_info(stream: bool) -> None:
    """Tool call, a 429 whose RetryInfo says 0s, the answer: retried once, usage and cost right."""
    answers = [tool_round(stream), gem.rate_limited("0.002s"), answer(stream)]
    async with fake_server(*answers) as server:
        provider = gem.provider(server.url, stream=stream, backoff=FAST)
        result = await run(agent_on(provider))
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    (retry,) = of(result.events, ev.ProviderRetry)
    assert (retry.error_type, retry.attempt) == ("rate_limited", 1)
    (tool,) = of(result.events, ev.ToolCallFinished)
    assert (tool.outcome, tool.content) == ("ok", "5")
    _, failed, resent = server.requests
    assert failed.body == resent.body, "a retry resends a byte-identical body"
    contents = resent.json()["contents"]
    assert contents[-1] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "add", "response": {"output": "5"}}}],
    }
    calls = of(result.events, ev.ModelCallFinished)
    assert [c.usage for c in calls] == [gem.EXPECTED_USAGE] * 2
    assert result.usage.output_tokens == 2 * 17  # thinking tokens are output
    price = price_for(gem.MODEL)
    assert price is not None
    assert result.usage.cost_usd == pytest.approx(sum(price.cost(c.usage) for c in calls))
    assert SECRET not in json.dumps([ev.dump(e) for e in result.events])


@pytest.mark.parametrize(
    "fault",
    ["500", "503", "cut_stream", "malformed", "malformed_call"],
)
async def test_transient_faults_are_retried_and_the_run_answers(fault: str) -> None:
    """Each transient fault costs one retry; the second attempt answers."""
    stream = fault in ("cut_stream", "malformed", "malformed_call")
    faulty = {
        "500": gem.error(500, "INTERNAL", "An internal error has occurred."),
        "503": gem.error(503, "UNAVAILABLE", "The model is overloaded."),
        "cut_stream": cut_stream(),
        "malformed": gem.malformed(stream),
        "malformed_call": gem.reply(stream, text=(), finish="MALFORMED_FUNCTION_CALL"),
    }[fault]
    async with fake_server(faulty, answer(stream)) as server:
        result = await run(agent_on(gem.provider(server.url, stream=stream, backoff=FAST)))
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    (retry,) = of(result.events, ev.ProviderRetry)
    expected = {
        "500": "server_error",
        "503": "server_error",
        "cut_stream": "stream_interrupted",
        "malformed": "malformed_response",
        "malformed_call": "stream_error_event",
    }[fault]
    assert retry.error_type == expected
    assert len(server.requests) == 2


@pytest.mark.parametrize("code", [400, 403, 404])
async def test_fatal_statuses_end_the_run_at_once(code: int) -> None:
    status = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}[code]
    bad = gem.error(code, status, "no luck")
    async with fake_server(bad, bad) as server:
        result = await run(agent_on(gem.provider(server.url, backoff=FAST)))
    assert len(server.requests) == 1
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert result.error is not None
    assert f"{status}: no luck" in result.error


@STREAM
async def test_a_safety_stop_ends_the_run_refusal(stream: bool) -> None:
    async with fake_server(gem.reply(stream, text=(), finish="SAFETY")) as server:
        result = await run(agent_on(gem.provider(server.url, stream=stream, backoff=FAST)))
    assert result.termination is tether.Termination.REFUSAL
    (finished,) = of(result.events, ev.ModelCallFinished)
    assert (finished.stop_reason, finished.raw_stop_reason) == ("refusal", "SAFETY")


async def test_a_prompt_too_long_is_trimmed_once_then_answered() -> None:
    """Gemini's "input token count exceeds the maximum" takes the context path: trim, answer."""
    answers = [tool_round(False, 1), tool_round(False, 2), tool_round(False, 3), gem.too_long()]
    async with fake_server(*answers, answer(False)) as server:
        provider = gem.provider(server.url, stream=False, backoff=FAST)
        result = await run(agent_on(provider, context=tether.TruncateOldest(keep_last=2)))
    assert result.termination is tether.Termination.ANSWERED
    finished = of(result.events, ev.ModelCallFinished)
    assert finished[3].stop_reason == "model_context_window_exceeded"
    assert ("continue", "context_trimmed") in [
        (t.kind, t.reason) for t in of(result.events, ev.Transition)
    ]
    sent = server.requests[4].json()["contents"]
    assert len(sent) == 3  # the question, then the newest call and its result
    assert sent[1]["parts"][0]["functionCall"]["args"] == {"a": 4, "b": 3}
    assert sent[2]["parts"][0]["functionResponse"]["name"] == "add"


async def test_a_prompt_too_long_that_cannot_be_trimmed_ends_context_exceeded() -> None:
    async with fake_server(gem.too_long(), gem.too_long()) as server:
        result = await run(agent_on(gem.provider(server.url, stream=False, backoff=FAST)))
    assert len(server.requests) == 1
    assert result.termination is tether.Termination.CONTEXT_EXCEEDED


async def test_cancelling_a_run_mid_stream_leaks_nothing() -> None:
    """A run cancelled while its Gemini stream is parked between chunks ends cancelled, no task
    left behind."""
    body = sse_body(gem.stream_chunks(text=("The sum ", "is 5.")))
    first = body.index(b"\n\n") + 2
    slow = sse_answer(body, at=[first], part_delay=5.0)
    before = task_names()
    async with fake_server(slow) as server:
        provider = gem.provider(server.url, backoff=FAST)
        with anyio.fail_after(10):
            async with tether.Runtime() as rt:
                handle = rt.start(agent_on(provider), "What is 2 + 3?")
                async for event in handle.events(deltas=True):
                    if isinstance(event, ev.TextDelta):
                        break
                handle.cancel()
                result = await handle.result()
    assert_consistent(result)
    assert result.termination is tether.Termination.CANCELLED
    assert task_names() <= before


# ------------------------------------------------------------- a conversation

TURNS = [
    ("1 + 2?", {"a": 1, "b": 2}, "3", "It is 3."),
    ("and 3 + 4?", {"a": 3, "b": 4}, "7", "That makes 7."),
    ("now 5 + 6?", {"a": 5, "b": 6}, "11", "11, then."),
]


def gemini_turn(n: int) -> list[dict[str, Any]]:
    """Turn ``n`` as the Gemini API carries it (calls with the server's ids)."""
    question, args, result, text = TURNS[n]
    return [
        {"role": "user", "parts": [{"text": question}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "add", "args": args, "id": f"c{n}"}}],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "add", "response": {"output": result}, "id": f"c{n}"}}
            ],
        },
        {"role": "model", "parts": [{"text": text}]},
    ]


async def test_three_turn_conversation_over_sse(tmp_path: Path) -> None:
    """Turn 3 sends both earlier turns, calls and results included, exactly; the store holds
    all three."""
    answers = []
    for n, (_, args, _, text) in enumerate(TURNS):
        answers.append(gem.call_reply(True, ((f"c{n}", "add", args),)))
        answers.append(gem.reply(True, text=(text[:4], text[4:])))
    store = tether.SQLiteConversationStore(tmp_path / "chats.db")
    async with fake_server(*answers) as server:
        agent = tether.Agent(
            name="calc",
            instructions="Use the tools.",
            provider=gem.provider(server.url),
            tools=[add],
        )
        results = []
        async with tether.Runtime(conversations=store) as rt:
            for question, *_ in TURNS:
                results.append(await rt.run(agent, question, conversation="user-42"))
    for n, result in enumerate(results):
        assert_consistent(result)
        assert result.termination is tether.Termination.ANSWERED
        assert result.output == TURNS[n][3]
    assert len(server.requests) == 6
    first, second = (r.json() for r in server.requests[4:6])
    earlier = [*gemini_turn(0), *gemini_turn(1)]
    system = {"role": "user", "parts": [{"text": "Use the tools."}]}
    declarations = [
        {
            "functionDeclarations": [
                {
                    "name": "add",
                    "description": "Add two integers.",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                        "required": ["a", "b"],
                    },
                }
            ]
        }
    ]
    assert first == {
        "contents": [*earlier, gemini_turn(2)[0]],
        "systemInstruction": system,
        "tools": declarations,
        "generationConfig": {"maxOutputTokens": 4096},
    }
    assert second == {**first, "contents": [*earlier, *gemini_turn(2)[:3]]}
    for request in server.requests[4:6]:
        assert request.path == gem.path(True)
    stored = await store.load("user-42")
    assert stored == list(results[-1].messages)
    assert len(stored) == 12
    await store.aclose()


# ------------------------------------------------------------------ fallback


def other_answer(kind: str) -> Answer:
    if kind == "anthropic":
        return json_answer(anth.message_json(text="The sum is 5."))
    return json_answer(oai.completion_json(text="The sum is 5."))


def other_provider(kind: str, url: str) -> Any:
    wire = anth if kind == "anthropic" else oai
    return wire.provider(url, stream=False, backoff=FAST)


@pytest.mark.parametrize("second", ["openai", "anthropic"])
async def test_a_rate_limited_gemini_falls_over_and_the_run_answers(second: str) -> None:
    """Gemini rate-limited past its attempts: the next provider gets the same request, tool
    call and result included, in its own wire format, and answers."""
    primary = [tool_round(False), gem.rate_limited("0s"), gem.rate_limited("0s")]
    async with fake_server(*primary) as one, fake_server(other_answer(second)) as two:
        chain = FallbackProvider(
            [gem.provider(one.url, stream=False, backoff=FAST), other_provider(second, two.url)]
        )
        result = await run(agent_on(chain, limits=tether.Limits(max_provider_attempts=2)))
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    assert (len(one.requests), len(two.requests)) == (3, 1)
    (switch,) = of(result.events, ev.ProviderFallback)
    assert (switch.from_provider, switch.to_provider) == ("gemini", second)
    assert switch.error_type == "rate_limited"
    round_two = [e for e in result.events if e.round == 2]
    assert [k for k in kinds(round_two) if k.startswith(("Model", "Provider"))] == [
        "ModelCallStarted",
        "ProviderRetry",
        "ModelCallStarted",
        "ProviderFallback",
        "ModelCallStarted",
        "ModelCallFinished",
    ]
    body = two.requests[0].json()
    # The call Gemini made (an id tether gave it) and its result, in the other's format.
    (call,) = [b for m in result.messages for b in m.content if isinstance(b, ToolUseBlock)]
    assert call.id.startswith("gemini-call-")
    assert call.id in json.dumps(body["messages"])
    assert "5" in json.dumps(body["messages"][-1])


# ------------------------------------------------------------------ thinking


async def test_with_thinking_on_signatures_come_back_unchanged(tmp_path: Path) -> None:
    """thinking_budget on: the call's thoughtSignature goes back on the call with its result,
    and, through the conversation store, both turns' signatures go back on turn 2, unchanged."""
    final_text = gem.response_json(
        text=None, extra_parts=({"text": "It is 5.", "thoughtSignature": "c2lnLWZpbmFs"},)
    )
    answers = [
        sse_answer(sse_body(gem.thinking_chunks())),
        sse_answer(sse_body([(None, final_text)])),
        answer(True, ("Still 5.",)),
    ]
    store = tether.SQLiteConversationStore(tmp_path / "chats.db")
    async with fake_server(*answers) as server:
        agent = agent_on(
            gem.provider(server.url, backoff=FAST),
            settings=tether.ModelSettings(thinking_budget=2048),
        )
        async with tether.Runtime(conversations=store) as rt:
            first = await rt.run(agent, "What is 2 + 3?", conversation="c")
            second = await rt.run(agent, "Sure?", conversation="c")
    await store.aclose()
    for result in (first, second):
        assert_consistent(result)
        assert result.termination is tether.Termination.ANSWERED
    assert (first.output, second.output) == ("It is 5.", "Still 5.")
    model_turn = {
        "role": "model",
        "parts": [
            {"text": "I should add.", "thought": True},
            {
                "functionCall": {"name": "add", "args": {"a": 2, "b": 3}},
                "thoughtSignature": gem.SIG_CALL,
            },
            {"text": "Adding now."},
            {"text": "", "thoughtSignature": gem.SIG_TEXT},
        ],
    }
    result_turn = {
        "role": "user",
        "parts": [{"functionResponse": {"name": "add", "response": {"output": "5"}}}],
    }
    question = {"role": "user", "parts": [{"text": "What is 2 + 3?"}]}
    bodies = [r.json() for r in server.requests]
    assert bodies[1]["contents"] == [question, model_turn, result_turn]
    assert bodies[2]["contents"] == [
        question,
        model_turn,
        result_turn,
        {"role": "model", "parts": [{"text": "It is 5.", "thoughtSignature": "c2lnLWZpbmFs"}]},
        {"role": "user", "parts": [{"text": "Sure?"}]},
    ]
    for body in bodies:
        assert body["generationConfig"]["thinkingConfig"] == {
            "thinkingBudget": 2048,
            "includeThoughts": True,
        }


async def test_a_chain_of_three_wire_formats_answers_when_the_first_two_are_limited() -> None:
    """Gemini → Chat Completions → Anthropic: Gemini and OpenAI rate-limited, Anthropic answers
    the same request (the tool call Gemini made, its result) in its own format."""
    limited = oai.error_body("slow down", "rate_limit_error")
    openai_429 = json_answer(limited, status=429, headers=[("retry-after", "0")])
    async with (
        fake_server(tool_round(False), gem.rate_limited("0s"), gem.rate_limited("0s")) as one,
        fake_server(openai_429, openai_429) as two,
        fake_server(other_answer("anthropic")) as three,
    ):
        chain = FallbackProvider(
            [
                gem.provider(one.url, stream=False, backoff=FAST),
                other_provider("openai", two.url),
                other_provider("anthropic", three.url),
            ]
        )
        result = await run(agent_on(chain, limits=tether.Limits(max_provider_attempts=2)))
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    assert (len(one.requests), len(two.requests), len(three.requests)) == (3, 2, 1)
    switches = of(result.events, ev.ProviderFallback)
    assert [(s.from_provider, s.to_provider) for s in switches] == [
        ("gemini", "openai"),
        ("openai", "anthropic"),
    ]
    messages = three.requests[0].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][0]["type"] == "tool_use"
    assert messages[2]["content"][0]["content"] == "5"


async def test_a_long_stream_is_cut_at_the_token_ceiling() -> None:
    """Every chunk reports usage so far; with a budget, the first report gives the exact
    prompt, the estimate follows the text, and the run ends at its ceiling mid-stream."""
    text = tuple(f"word{i} " * 8 for i in range(3000))
    body = sse_body(gem.stream_chunks(text=text))
    async with fake_server(sse_answer(body, at=range(4096, len(body), 4096))) as server:
        provider = gem.provider(server.url, backoff=FAST)
        result = await run(agent_on(provider, limits=tether.Limits(max_total_tokens=2_000)))
    assert result.termination is tether.Termination.TOKEN_CEILING
    assert result.usage.input_tokens == 30  # the first report's, exactly
    # Cut at the first text delta whose estimate crosses: at most one delta (18 tokens) over.
    assert 2_000 <= result.usage.total_tokens <= 2_000 + 18


async def test_gemini_then_responses_then_anthropic_answers_when_the_first_two_are_limited() -> (
    None
):
    """The issue's chain: Gemini and the Responses API rate-limited, Anthropic answers the
    same request (Gemini's tool call and its result) in the Messages format."""
    from . import responses_wire as resp

    limited = resp.error_body("Rate limit reached", "rate_limit_error")
    responses_429 = json_answer(limited, status=429, headers=[("retry-after", "0")])
    async with (
        fake_server(tool_round(False), gem.rate_limited("0s"), gem.rate_limited("0s")) as one,
        fake_server(responses_429, responses_429) as two,
        fake_server(other_answer("anthropic")) as three,
    ):
        chain = FallbackProvider(
            [
                gem.provider(one.url, stream=False, backoff=FAST),
                resp.provider(two.url, stream=False, backoff=FAST),
                other_provider("anthropic", three.url),
            ]
        )
        result = await run(agent_on(chain, limits=tether.Limits(max_provider_attempts=2)))
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    assert (len(one.requests), len(two.requests), len(three.requests)) == (3, 2, 1)
    switches = of(result.events, ev.ProviderFallback)
    assert [(s.from_provider, s.to_provider, s.error_type) for s in switches] == [
        ("gemini", "openai-responses", "rate_limited"),
        ("openai-responses", "anthropic", "rate_limited"),
    ]
    # The Responses API got Gemini's call and its result as items, by the id tether made.
    (call,) = [b for m in result.messages for b in m.content if isinstance(b, ToolUseBlock)]
    items = two.requests[0].json()["input"]
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert [(o["call_id"], o["output"]) for o in outputs] == [(call.id, "5")]
    messages = three.requests[0].json()["messages"]
    assert messages[1]["content"][0] == {
        "type": "tool_use",
        "id": call.id,
        "name": "add",
        "input": {"a": 2, "b": 3},
    }
