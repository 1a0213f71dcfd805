"""``FallbackProvider``: runs that fall over from one provider to the next.

Whole runs against two fake servers on 127.0.0.1 (an Anthropic one and an
OpenAI one, either as the primary), and scripted chains for the accounting,
the gates and cancellation during a switch.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import (
    Backoff,
    ContextWindowExceeded,
    FallbackProvider,
    Fault,
    InvalidRequest,
    Overloaded,
    Price,
    RateLimited,
    Reply,
    ScriptedProvider,
    ServerError,
    StopReason,
    TokenUsage,
    ToolCall,
    price_for,
)

from ..helpers import AUTOJUMP, assert_consistent, kinds, of, until_event
from . import anthropic_wire as anth
from . import openai_wire as oai
from . import responses_wire as rsp
from . import wires
from .fakes import (
    REQUEST,
    Answer,
    collect,
    failure,
    fake_server,
    json_answer,
    sse_answer,
    sse_body,
)

pytestmark = pytest.mark.anyio

FAST = Backoff(initial=0.01, cap=0.05, jitter=False)
PAIRS = [("anthropic", "openai"), ("openai", "anthropic")]
#: With the Responses API too, either way round.
ALL_PAIRS = [
    *PAIRS,
    ("openai-responses", "anthropic"),
    ("anthropic", "openai-responses"),
    ("openai", "openai-responses"),
]


@tether.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def make(kind: str, url: str, stream: bool = True, **kw: Any) -> Any:
    kw.setdefault("backoff", FAST)
    return wires.make_provider(kind, url, stream, **kw)


def error(kind: str, status: int, retry_after: str | None = None) -> Answer:
    """An error answer in ``kind``'s wire format."""
    names = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}
    name = names.get(status, "api_error" if status != 529 else "overloaded_error")
    body = (
        anth.error_body(name, "no luck")
        if kind == "anthropic"
        else oai.error_body("no luck", name if status != 400 else "invalid_request_error")
    )  # the Responses API's error body is Chat Completions' shape
    headers = [("retry-after", retry_after)] if retry_after is not None else []
    return json_answer(body, status=status, headers=headers)


def tool_round(kind: str, stream: bool) -> Answer:
    if kind == "openai-responses":
        call = rsp.function_call("call_1", "add", '{"a": 2, "b": 3}')
        return rsp.reply(stream, text="Adding.", output=[call])
    if kind == "anthropic":
        if stream:
            events = anth.stream_events(
                text=("Adding.",),
                tools=(("toolu_1", "add", ('{"a": 2, "b": 3}',)),),
                stop="tool_use",
            )
            return sse_answer(sse_body(events))
        body = anth.message_json(
            text="Adding.", tools=(("toolu_1", "add", {"a": 2, "b": 3}),), stop="tool_use"
        )
        return json_answer(body)
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
    }
    if stream:
        chunks = oai.stream_chunks(text=("Adding.",), tool_deltas=(call,), finish="tool_calls")
        return sse_answer(sse_body(chunks))
    body = oai.completion_json(
        text="Adding.", tools=(("call_1", "add", '{"a": 2, "b": 3}'),), finish="tool_calls"
    )
    return json_answer(body)


def answer(kind: str, stream: bool) -> Answer:
    return wires.WIRES[kind].reply(stream, text=("The sum ", "is 5."))


def model_of(kind: str) -> str:
    return str(wires.WIRES[kind].MODEL)


def agent_on(provider: Any, **limits: Any) -> tether.Agent:
    limits.setdefault("max_provider_attempts", 2)
    return tether.Agent(
        name="adder",
        instructions="Add.",
        provider=provider,
        tools=[add],
        limits=tether.Limits(**limits),
    )


async def run(agent: tether.Agent, **runtime: Any) -> tether.RunResult:
    with anyio.fail_after(20):
        async with tether.Runtime(**runtime) as rt:
            result = await rt.run(agent, "What is 2 + 3?")
    assert_consistent(result)
    return result


# ------------------------------------------------------------- the done-when


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize(("first", "second"), ALL_PAIRS)
async def test_a_rate_limited_primary_falls_over_and_the_run_answers(
    first: str, second: str, stream: bool
) -> None:
    """Primary rate-limited past its attempts: the secondary answers, each call at its own price."""
    primary_answers = [tool_round(first, stream), error(first, 429, "0"), error(first, 429, "0")]
    async with (
        fake_server(*primary_answers) as one,
        fake_server(answer(second, stream)) as two,
    ):
        primary, secondary = make(first, one.url, stream), make(second, two.url, stream)
        result = await run(agent_on(FallbackProvider([primary, secondary])))
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    assert (len(one.requests), len(two.requests)) == (3, 1)

    (switch,) = of(result.events, ev.ProviderFallback)
    assert (switch.from_model, switch.to_model) == (model_of(first), model_of(second))
    assert (switch.from_provider, switch.to_provider) == (first, second)
    assert switch.error_type == "rate_limited"
    assert switch.round == 2
    round_two = [e for e in result.events if e.round == 2]
    assert [k for k in kinds(round_two) if k.startswith(("Model", "Provider"))] == [
        "ModelCallStarted",
        "ProviderRetry",
        "ModelCallStarted",
        "ProviderFallback",
        "ModelCallStarted",
        "ModelCallFinished",
    ]
    assert [e.attempt for e in of(round_two, ev.ModelCallStarted)] == [1, 2, 3]
    assert result.usage.model_calls == 2
    assert result.usage.provider_attempts == 4

    # The same request went on: the tool's result is in the secondary's body.
    body = two.requests[0].json()
    assert "5" in repr(body["input" if second == "openai-responses" else "messages"][-1])

    # Both providers' charges, each at its own price.
    calls = of(result.events, ev.ModelCallFinished)
    assert [c.model for c in calls] == [model_of(first), model_of(second)]
    charges = [c for c in of(result.events, ev.UsageCharged) if c.source == "model"]
    assert len(charges) == 2
    prices = [price_for(model_of(first)), price_for(model_of(second))]
    assert None not in prices
    assert prices[0] != prices[1]
    for charge, call, price in zip(charges, calls, prices, strict=True):
        assert charge.cost_usd == pytest.approx(price.cost(call.usage))
    assert result.usage.cost_usd == pytest.approx(sum(c.cost_usd or 0 for c in charges))


@pytest.mark.parametrize("status", [400, 401])
@pytest.mark.parametrize(("first", "second"), ALL_PAIRS)
async def test_a_fatal_request_error_is_not_passed_on(first: str, second: str, status: int) -> None:
    """A 400 (or 401) ends the run provider_failed; the secondary is never asked."""
    async with fake_server(error(first, status)) as one, fake_server(answer(second, True)) as two:
        chain = FallbackProvider([make(first, one.url), make(second, two.url)])
        result = await run(agent_on(chain))
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert not of(result.events, ev.ProviderFallback)
    assert (len(one.requests), len(two.requests)) == (1, 0)
    expected = "InvalidRequest" if status == 400 else "AuthenticationFailed"
    assert (result.error or "").startswith(expected)


@pytest.mark.parametrize(("first", "second"), ALL_PAIRS)
async def test_every_provider_failing_ends_provider_failed_naming_each(
    first: str, second: str
) -> None:
    """Both providers spend their attempts: provider_failed, the error names each one's failure."""
    async with (
        fake_server(error(first, 503), error(first, 503)) as one,
        fake_server(error(second, 529), error(second, 529)) as two,
    ):
        chain = FallbackProvider([make(first, one.url), make(second, two.url)])
        result = await run(agent_on(chain))
    assert result.termination is tether.Termination.PROVIDER_FAILED
    assert (len(one.requests), len(two.requests)) == (2, 2)
    assert result.usage.provider_attempts == 4
    assert result.usage.model_calls == 1
    (switch,) = of(result.events, ev.ProviderFallback)
    assert switch.error_type == "server_error"
    error_text = result.error or ""
    assert error_text.startswith("every provider tried failed: ")
    assert f"{first}:{model_of(first)}: ServerError" in error_text
    assert f"{second}:{model_of(second)}: Overloaded" in error_text


@pytest.mark.parametrize(("first", "second"), PAIRS)
async def test_streaming_through_the_fallback(first: str, second: str) -> None:
    """A stream cut mid-way on the primary: its partial usage is charged at its price, and the
    secondary's stream is the whole answer (nothing of the cut stream is in it)."""
    if first == "anthropic":
        cut = anth.stream_events(text=("The sum is",), end=False)[:-1]
    else:
        cut = oai.stream_chunks(text=("The sum is",), finish=None, done=False)
    async with (
        fake_server(sse_answer(sse_body(cut), drop=True)) as one,
        fake_server(answer(second, True)) as two,
    ):
        chain = FallbackProvider([make(first, one.url), make(second, two.url)])
        result = await run(agent_on(chain, max_provider_attempts=1))
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "The sum is 5."
    (switch,) = of(result.events, ev.ProviderFallback)
    assert switch.error_type in ("stream_interrupted", "connection_dropped")
    (call,) = of(result.events, ev.ModelCallFinished)
    assert call.model == model_of(second)
    # The cut stream had reported usage: charged at the primary's price, before the switch.
    first_charge, second_charge = of(result.events, ev.UsageCharged)
    assert first_charge.seq < switch.seq < second_charge.seq
    partial = (
        TokenUsage(input_tokens=25, output_tokens=1, cache_read_tokens=7, cache_write_tokens=3)
        if first == "anthropic"
        else oai.EXPECTED_USAGE
    )
    price = price_for(model_of(first))
    assert price is not None
    assert first_charge.cost_usd == pytest.approx(price.cost(partial))


async def test_the_fallback_provider_streams_on_its_own() -> None:
    """Outside a run, stream() tries each provider once: a 503 passes on, a 400 does not."""
    async with (
        fake_server(error("anthropic", 503), error("anthropic", 400)) as one,
        fake_server(answer("openai", True)) as two,
    ):
        chain = FallbackProvider([make("anthropic", one.url), make("openai", two.url)])
        items = await collect(chain, REQUEST)
        assert items[-1].text == "The sum is 5."
        assert items[-1].model == oai.MODEL
        exc = await failure(chain, REQUEST)
        assert isinstance(exc, InvalidRequest)
        assert len(two.requests) == 1


# ------------------------------------------------------------- scripted chains


def scripted(*items: Any, model: str, price: Price | None = None, **kw: Any) -> ScriptedProvider:
    return ScriptedProvider(list(items), model=model, cost_per_mtok=price, **kw)


async def test_the_run_stays_on_the_provider_that_answered() -> None:
    """After a switch, later rounds go straight to the secondary; the primary is asked no more."""
    primary = scripted(Fault(error=Overloaded("busy")), model="a", record=True)
    secondary = scripted(
        Reply(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})]),
        Reply(text="5"),
        model="b",
        record=True,
    )
    result = await run(agent_on(FallbackProvider([primary, secondary]), max_provider_attempts=1))
    assert result.termination is tether.Termination.ANSWERED
    assert (len(primary.requests), len(secondary.requests)) == (1, 2)
    assert [ctx.call_index for ctx, _ in secondary.requests] == [0, 1]
    assert len(of(result.events, ev.ProviderFallback)) == 1
    assert result.summary() == "Model(fallback:b) → Tools(1) → Model → answered"


@AUTOJUMP
async def test_each_provider_has_its_own_attempts_and_backoff() -> None:
    """Attempts are numbered on across the chain, but each provider has max_provider_attempts
    of its own, and its backoff starts from its own first attempt."""
    slow = Fault(error=ServerError("down"))
    primary = scripted(slow, slow, model="a", backoff=Backoff(initial=0.5, jitter=False))
    secondary = scripted(
        slow,
        Reply(text="5"),
        model="b",
        backoff=Backoff(initial=1.0, multiplier=10.0, jitter=False),
    )
    result = await run(agent_on(FallbackProvider([primary, secondary]), max_provider_attempts=2))
    assert result.termination is tether.Termination.ANSWERED
    assert [e.attempt for e in of(result.events, ev.ModelCallStarted)] == [1, 2, 3, 4]
    retries = of(result.events, ev.ProviderRetry)
    assert [(r.attempt, r.wait_s) for r in retries] == [(1, 0.5), (3, 1.0)]
    assert (result.usage.model_calls, result.usage.provider_attempts) == (1, 4)


@pytest.mark.parametrize("shared", [False, True], ids=["run-budget", "runtime-budget"])
async def test_the_clamp_uses_the_price_of_the_provider_the_request_goes_to(shared: bool) -> None:
    """max_tokens is clamped at the primary's output price, then at the secondary's."""
    cheap = Price(input=1.0, output=10.0)
    dear = Price(input=1.0, output=100.0)
    primary = scripted(Fault(error=RateLimited("slow")), model="a", price=cheap)
    secondary = scripted(Reply(text="5"), model="b", price=dear)
    limits = tether.Limits(max_cost_usd=0.01)
    chain = FallbackProvider([primary, secondary])
    if shared:
        agent = agent_on(chain, max_provider_attempts=1)
        async with tether.Runtime(limits=limits) as rt:
            result = await rt.run(agent, "q")
            status = rt.budget
        assert status is not None
        assert (status.reserved_tokens, status.reserved_cost_usd) == (0, 0.0)
        assert_consistent(result)
    else:
        result = await run(agent_on(chain, max_provider_attempts=1, max_cost_usd=0.01))
    assert result.termination is tether.Termination.ANSWERED
    caps = [e.max_tokens for e in of(result.events, ev.ModelCallStarted)]
    assert caps == [1000, 100]  # $0.01 at $10 and at $100 per million output tokens
    (charge,) = of(result.events, ev.UsageCharged)
    (call,) = of(result.events, ev.ModelCallFinished)
    assert charge.cost_usd == pytest.approx(dear.cost(call.usage))


@pytest.mark.parametrize("second_refuses", [False, True])
async def test_a_refusal_tries_the_next_provider_first(second_refuses: bool) -> None:
    """docs/guides/providers.md: a refusal goes on to the next provider; the run ends refusal
    only when the last one refuses too."""
    no = Reply(text="I cannot help with that.", stop_reason=StopReason.REFUSAL)
    primary = scripted(no, model="a")
    secondary = scripted(no if second_refuses else Reply(text="5"), model="b")
    result = await run(agent_on(FallbackProvider([primary, secondary])))
    (switch,) = of(result.events, ev.ProviderFallback)
    assert (switch.error_type, switch.message) == ("refusal", "I cannot help with that.")
    calls = of(result.events, ev.ModelCallFinished)
    second = "refusal" if second_refuses else "end_turn"
    assert [c.stop_reason for c in calls] == ["refusal", second]
    assert result.usage.model_calls == 1
    assert result.usage.steps == 1
    if second_refuses:
        assert result.termination is tether.Termination.REFUSAL
    else:
        assert result.termination is tether.Termination.ANSWERED
        assert result.output == "5"


def _bug(request: Any, ctx: Any) -> Any:
    raise RuntimeError("a parser bug")


@pytest.mark.parametrize(
    ("script", "ending"),
    [
        ([Fault(error=InvalidRequest("bad"))], tether.Termination.PROVIDER_FAILED),
        ([Fault(error=ContextWindowExceeded("long"))], tether.Termination.CONTEXT_EXCEEDED),
        (_bug, tether.Termination.PROVIDER_FAILED),
    ],
    ids=["invalid-request", "context-window", "provider-bug"],
)
async def test_what_retrying_elsewhere_cannot_fix_is_not_passed_on(
    script: Any, ending: tether.Termination
) -> None:
    """A fatal error, a prompt too long (the run trims instead) and a provider's bug stay put."""
    primary = ScriptedProvider(script, model="a")
    secondary = scripted(Reply(text="5"), model="b", record=True)
    result = await run(agent_on(FallbackProvider([primary, secondary])))
    assert result.termination is ending
    assert not of(result.events, ev.ProviderFallback)
    assert not secondary.requests


async def test_an_unpriced_provider_in_use_makes_the_cost_unknown() -> None:
    """Falling over to an unpriced model makes the run's cost None, as an unpriced run's is."""
    primary = scripted(Fault(error=ServerError("down")), model="a", price=Price(input=1, output=1))
    secondary = scripted(Reply(text="5"), model="b")
    result = await run(agent_on(FallbackProvider([primary, secondary]), max_provider_attempts=1))
    assert result.termination is tether.Termination.ANSWERED
    assert result.usage.cost_usd is None


@AUTOJUMP
async def test_each_provider_keeps_its_own_gate() -> None:
    """The primary's 429 pauses the primary's gate only: the secondary answers at once, and a
    later run on the primary waits the pause out."""
    async with (
        fake_server(error("anthropic", 429, "30"), answer("anthropic", True)) as one,
        fake_server(answer("openai", True)) as two,
    ):
        # The pause is capped by the primary's backoff cap.
        primary = make("anthropic", one.url, backoff=Backoff(initial=0.01, cap=60, jitter=False))
        secondary = make("openai", two.url)
        chain = agent_on(FallbackProvider([primary, secondary]), max_provider_attempts=1)
        async with tether.Runtime() as rt:
            start = anyio.current_time()
            result = await rt.run(chain, "q")
            fell_over_in = anyio.current_time() - start
            later = await rt.run(agent_on(primary), "q")
    assert result.termination is tether.Termination.ANSWERED
    assert fell_over_in < 1.0
    assert not of(result.events, ev.ProviderWait)
    assert later.termination is tether.Termination.ANSWERED
    (wait,) = of(later.events, ev.ProviderWait)
    assert wait.wait_s == pytest.approx(30.0, abs=0.5)


@pytest.mark.parametrize("shared", [False, True], ids=["run-budget", "runtime-budget"])
@pytest.mark.parametrize("at", ["switch", "secondary"])
async def test_cancelling_during_a_fallback_leaks_nothing(at: str, shared: bool) -> None:
    """Cancelled at the switch or in the secondary's call: cancelled, consistent, no task left."""
    primary = scripted(Fault(error=RateLimited("slow"), after_text="par"), model="a")
    secondary = scripted(Reply(text="5"), model="b", latency_s=30.0)
    agent = agent_on(
        FallbackProvider([primary, secondary]), max_provider_attempts=1, max_total_tokens=10_000
    )
    runtime: dict[str, Any] = {"limits": tether.Limits(max_total_tokens=10_000)} if shared else {}
    before = {t.id for t in anyio.get_running_tasks()}
    with anyio.fail_after(20):
        async with tether.Runtime(**runtime) as rt:
            handle = rt.start(agent, "q")
            if at == "switch":
                async for event in handle.events():
                    if isinstance(event, ev.ProviderFallback):
                        break
            else:
                await until_event(ev.ProviderFallback)(handle)
            handle.cancel("changed my mind")
            result = await handle.result()
            status = rt.budget
    assert {t.id for t in anyio.get_running_tasks()} == before, "a task outlived the Runtime"
    assert_consistent(result)
    assert result.termination is tether.Termination.CANCELLED
    assert len(of(result.events, ev.ProviderFallback)) == 1
    if status is not None:
        assert (status.reserved_tokens, status.reserved_cost_usd) == (0, 0.0)


def test_bad_chains_are_refused_with_a_clear_error() -> None:
    """A chain must be a list of at least two providers, none itself a chain."""
    one = scripted(Reply(text="x"), model="a")
    with pytest.raises(TypeError, match="list of providers"):
        FallbackProvider(one)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least two"):
        FallbackProvider([one])
    with pytest.raises(TypeError, match=r"providers\[1\] must implement"):
        FallbackProvider([one, "gpt-4.1"])  # type: ignore[list-item]
    inner = FallbackProvider([one, one])
    with pytest.raises(TypeError, match="itself a FallbackProvider"):
        FallbackProvider([one, inner])
    chain = FallbackProvider([one, scripted(Reply(text="y"), model="b")])
    assert (chain.name, chain.model, chain.gate_key()) == ("scripted", "a", None)


def test_model_settings_must_suit_every_provider_of_the_chain() -> None:
    """check_settings asks each provider of the chain; one that cannot say is refused."""
    asked: list[tuple[str, object]] = []

    class Picky(ScriptedProvider):
        def check_settings(self, settings: object) -> None:
            asked.append((self.model, settings))
            if settings == "bad":
                raise ValueError(f"{self.model} cannot honour {settings}")

    chain = FallbackProvider([Picky([], model="a"), Picky([], model="b")])
    chain.check_settings("good")
    assert asked == [("a", "good"), ("b", "good")]
    with pytest.raises(ValueError, match="a cannot honour bad"):
        chain.check_settings("bad")
    silent = FallbackProvider([Picky([], model="a"), _Silent([], model="s")])
    with pytest.raises(ValueError, match=r"providers\[1\] \(_Silent\) does not say"):
        silent.check_settings("good")


class _Silent(ScriptedProvider):
    """A provider with no check_settings (as the scripted one is, before model settings)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "check_settings":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_the_context_window_is_the_tightest_of_the_chain() -> None:
    """A history is bounded to fit every provider a request may go to."""

    plain = scripted(Reply(text="x"), model="a")
    assert FallbackProvider([plain, plain]).context_window is None
    assert FallbackProvider([plain, _Windowed(8_000), _Windowed(9_000)]).context_window == 8_000


def test_native_output_only_where_every_provider_has_it() -> None:
    """Typed output's native mode needs every provider of the chain to have one."""
    native, plain = _Windowed(1), _Windowed(2)
    native.native_output = True  # type: ignore[attr-defined]
    assert FallbackProvider([native, native]).native_output is True
    assert FallbackProvider([native, plain]).native_output is False


class _Windowed:
    """The least of a provider that states its context window."""

    name, model, backoff = "windowed", "w", Backoff()

    def __init__(self, window: int) -> None:
        self.context_window = window

    def stream(self, request: Any, ctx: Any) -> Any:
        raise NotImplementedError

    def price(self) -> None:
        return None

    def gate_key(self) -> None:
        return None
