"""Tools inside a run (see docs/guides/tools.md): pairing, error classes, terminal tools, repeats,
budgets, concurrency, timeouts and discovery, asserted through events and results."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import attrs
import pytest
import trio.testing

import tether
from tests.helpers import AUTOJUMP, add, assert_consistent, calls, of, run, transitions
from tether import events as ev
from tether.actors import (
    ReplyChannel,
    RunTools,
    ToolActor,
    ToolContext,
    ToolInvocation,
    ToolSettings,
    current_tool_context,
    default_classifier,
)
from tether.providers import (
    Backoff,
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)

pytestmark = pytest.mark.anyio

FAST = ToolSettings(backoff=Backoff(initial=0.001, cap=0.001, jitter=False))

# ----------------------------------------------------------------------------- tools


@tether.tool
async def mistake(note: str) -> str:
    """Always tells the model it got something wrong."""
    calls["mistake"] += 1
    raise tether.ToolError(f"bad note: {note}")


@tether.tool
def shout(text: str) -> str:
    """Upper-case a text (a sync tool, run in a worker thread)."""
    calls["shout"] += 1
    calls[f"thread:{threading.get_ident() != threading.main_thread().ident}"] += 1
    return text.upper()


@tether.tool(terminal=True)
async def finish(answer: str) -> str:
    """Hand in the final answer."""
    calls["finish"] += 1
    if answer == "bad":
        raise tether.ToolError("the answer may not be 'bad'")
    return f"final: {answer}"


def call(name: str, id: str | None = None, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments, id=id)


def tools_reply(*tool_calls: ToolCall) -> Reply:
    return Reply(tool_calls=tool_calls)


def make(
    script: Sequence[Reply] | Callable[[ModelRequest, ProviderContext], Reply],
    tools: Sequence[Any] = (add,),
    **agent_kwargs: Any,
) -> tuple[tether.Agent, ScriptedProvider]:
    provider = ScriptedProvider(script, record=True)
    agent_kwargs.setdefault("tool_settings", FAST)
    return tether.Agent(name="t", provider=provider, tools=tools, **agent_kwargs), provider


def finished(result: tether.RunResult) -> list[ev.ToolCallFinished]:
    return of(result.events, ev.ToolCallFinished)


def outcomes(result: tether.RunResult, round: int | None = None) -> list[str]:
    """Outcomes in the model's order of the calls (of one round, or all)."""
    by_id = {f.call_id: f.outcome for f in finished(result)}
    return [
        by_id[s.call_id]
        for s in of(result.events, ev.ToolCallStarted)
        if round is None or s.round == round
    ]


def run_finished(result: tether.RunResult) -> ev.RunFinished:
    return of(result.events, ev.RunFinished)[0]


def request_tools(provider: ScriptedProvider, index: int) -> list[str]:
    return [t.name for t in provider.requests[index][1].tools]


def assert_paired(result: tether.RunResult) -> None:
    """Every tool_use is answered by the next message, one result per id, in order."""
    messages = result.messages
    answered: list[str] = []
    for i, message in enumerate(messages):
        uses = [b.id for b in message.content if isinstance(b, ToolUseBlock)]
        if not uses:
            continue
        assert message.role == "assistant"
        reply = messages[i + 1]
        assert reply.role == "user"
        ids = [b.tool_use_id for b in reply.content if isinstance(b, ToolResultBlock)]
        assert ids == uses
        answered += ids
    every = [b.tool_use_id for m in messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert sorted(every) == sorted(answered)
    assert len(set(answered)) == len(answered)
    started = Counter(e.call_id for e in of(result.events, ev.ToolCallStarted))
    ended = Counter(e.call_id for e in finished(result))
    assert started == ended
    assert set(started.values()) <= {1}
    assert sorted(started) == sorted(answered)


def result_block(result: tether.RunResult, call_id: str) -> ToolResultBlock:
    (block,) = (
        b
        for m in result.messages
        for b in m.content
        if isinstance(b, ToolResultBlock) and b.tool_use_id == call_id
    )
    return block


# ------------------------------------------------------------------ a tool round


async def test_tool_round_is_continue_and_consumes_no_quality_retry() -> None:
    """A tool round is a `continue` (tool_use) and leaves quality_retries at 0 with a judge."""
    judge = tether.RuleJudge({"ok": lambda c: True})
    agent, provider = make(
        [tools_reply(call("add", a=1, b=2)), tools_reply(call("add", a=2, b=2)), Reply(text="4")],
        judge=judge,
    )
    result = await run(agent)
    assert transitions(result) == [
        ("continue", "tool_use"),
        ("continue", "tool_use"),
        ("complete", "answered"),
    ]
    assert result.usage.quality_retries == 0
    assert result.usage.steps == 3
    assert result.usage.tool_calls == 2
    assert [j.round for j in of(result.events, ev.Judged)] == [3]
    assert result.passed is True
    assert len(provider.requests) == 3


# ------------------------------------------------------------------ pairing rule


def _deny_zero(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    if point == "tool_call" and subject.input.get("a") == 0:
        return tether.Verdict.deny("zero is not allowed")
    return None


def _block_zero(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    if point == "tool_call" and subject.input.get("a") == 0:
        return tether.Verdict.block("zero stops everything")
    return None


PAIRING_CASES = {
    "ok": ([call("add", a=1, b=2), call("add", a=3, b=4)], {}, ["ok", "ok"], "answered"),
    "unknown": ([call("nope"), call("add", a=1, b=2)], {}, ["model_error", "ok"], "answered"),
    "bad_arguments": (
        [call("add", a="x", b=1), call("add", a=1, b=2)],
        {},
        ["model_error", "ok"],
        "answered",
    ),
    "denied": (
        [call("add", a=0, b=1), call("add", a=1, b=2)],
        {"policies": [_deny_zero]},
        ["denied", "ok"],
        "answered",
    ),
    "cancelled": (
        [call("add", a=0, b=1), call("add", a=1, b=2)],
        {"policies": [_block_zero]},
        ["cancelled", "cancelled"],
        "policy_blocked",
    ),
}


@pytest.mark.parametrize("case", list(PAIRING_CASES))
async def test_pairing_rule_one_result_per_tool_use_in_order(case: str) -> None:
    """Every tool_use gets exactly one tool_result with its id, in the model's order."""
    round_calls, kwargs, expected, termination = PAIRING_CASES[case]
    agent, _ = make([tools_reply(*round_calls), Reply(text="done")], **kwargs)
    result = await run(agent)
    assert result.termination == termination
    assert outcomes(result) == expected
    assert_paired(result)
    for f in finished(result):
        assert f.is_error == (f.outcome != "ok")
        assert result_block(result, f.call_id).is_error == f.is_error
        assert result_block(result, f.call_id).content == f.content


async def test_pairing_rule_for_nudged_calls() -> None:
    """A nudged repeat still gets its own tool_result, in order with the round's others."""
    agent, _ = make(
        [
            tools_reply(call("add", a=1, b=2)),
            tools_reply(call("add", a=1, b=2), call("add", a=5, b=5)),
            Reply(text="done"),
        ]
    )
    result = await run(agent)
    assert outcomes(result, round=2) == ["nudged", "ok"]
    assert calls["add"] == 2
    assert_paired(result)


async def test_pairing_rule_when_the_run_is_cancelled_mid_tool() -> None:
    """Calls in flight when the run is cancelled are answered `cancelled`; the rest too."""
    entered = anyio.Event()

    @tether.tool
    async def hang() -> str:
        """Wait forever."""
        entered.set()
        await anyio.sleep_forever()
        return "never"

    agent, provider = make(
        [tools_reply(call("hang"), call("add", a=1, b=2)), Reply(text="done")],
        tools=[hang, add],
    )
    async with tether.Runtime() as rt:
        handle = rt.start(agent, "q")
        with anyio.fail_after(5):
            await entered.wait()
        handle.cancel("user pressed stop")
        result = await handle.result()
    assert_consistent(result)
    assert result.termination == "cancelled"
    assert run_finished(result).error == "user pressed stop"
    by_name = {f.name: f.outcome for f in finished(result)}
    assert by_name["hang"] == "cancelled"
    assert_paired(result)
    assert len(provider.requests) == 1


# --------------------------------------------------------------- model mistakes


async def test_unknown_tool_is_a_model_error_naming_available_tools() -> None:
    """An unknown tool gets a model_error result naming the available tools; the run goes on."""
    agent, provider = make(
        [tools_reply(call("multiply", a=2, b=3)), Reply(text="6")], tools=[add, shout]
    )
    result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.is_error, done.attempts) == ("model_error", True, 0)
    assert "multiply" in done.content
    assert "add" in done.content
    assert "shout" in done.content
    assert result.termination == "answered"
    assert transitions(result)[0] == ("continue", "tool_use")
    # The model saw the error before answering.
    last = provider.requests[1][1].messages[-1]
    assert [b.is_error for b in last.content if isinstance(b, ToolResultBlock)] == [True]


@pytest.mark.parametrize(
    ("arguments", "needles"),
    [
        pytest.param({"a": "1", "b": 2}, ["a", "int"], id="wrong_type"),
        pytest.param({"a": 1}, ["b", "missing"], id="missing"),
        pytest.param({"a": 1, "b": 2, "c": 3}, ["unknown argument", "'c'"], id="unknown_name"),
        pytest.param('{"a": 1', ["JSON object", "string"], id="not_json"),
    ],
)
async def test_bad_arguments_are_a_model_error_naming_the_problem(
    arguments: Any, needles: list[str]
) -> None:
    """Invalid arguments never reach the tool: a model_error names the problem, the run goes on."""
    agent, provider = make(
        [tools_reply(ToolCall(name="add", arguments=arguments)), Reply(text="ok")]
    )
    result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.is_error, done.attempts) == ("model_error", True, 0)
    assert "add" in done.content
    for needle in needles:
        assert needle in done.content
    assert calls["add"] == 0
    assert result.termination == "answered"
    assert len(provider.requests) == 2
    assert_paired(result)


# --------------------------------------------------------------- error classes


async def test_tool_error_goes_back_to_the_model_with_its_message() -> None:
    """`ToolError` becomes a model_error result carrying its message; no retry."""
    agent, _ = make([tools_reply(call("mistake", note="x")), Reply(text="ok")], tools=[mistake])
    result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.attempts, done.content) == ("model_error", 1, "bad note: x")
    assert calls["mistake"] == 1
    assert result.termination == "answered"


@AUTOJUMP
async def test_transient_error_is_retried_with_backoff_until_success(anyio_backend: Any) -> None:
    """A `TransientToolError` is retried after the exact backoff (trio: virtual time); 2nd is ok."""
    stamps: list[float] = []

    @tether.tool
    async def flaky() -> str:
        """Fails once."""
        stamps.append(anyio.current_time())
        if len(stamps) == 1:
            raise tether.TransientToolError("try again")
        return "fine"

    settings = ToolSettings(backoff=Backoff(initial=0.02, cap=0.02, jitter=False))
    agent, _ = make([tools_reply(call("flaky")), Reply(text="ok")], [flaky], tool_settings=settings)
    result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.is_error, done.attempts, done.content) == ("ok", False, 2, "fine")
    assert stamps[1] - stamps[0] == pytest.approx(0.02)
    assert result.usage.tool_calls == 1
    assert result.termination == "answered"


@pytest.mark.parametrize("retries", [0, 2])
async def test_transient_error_gives_up_after_max_tool_retries(retries: int) -> None:
    """An always-transient failure is tried `max_tool_retries + 1` times, then transient_error."""
    attempts: list[int] = []

    @tether.tool
    async def down() -> str:
        """Always down."""
        attempts.append(1)
        raise tether.TransientToolError("service down")

    agent, _ = make(
        [tools_reply(call("down")), Reply(text="gave up")],
        [down],
        limits=tether.Limits(max_tool_retries=retries),
    )
    result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.is_error, done.attempts) == ("transient_error", True, retries + 1)
    assert "service down" in done.content
    assert len(attempts) == retries + 1
    assert result.termination == "answered"


@pytest.mark.parametrize(
    "error",
    [tether.FatalToolError("credentials revoked"), PermissionError("credentials revoked")],
    ids=["FatalToolError", "PermissionError"],
)
async def test_fatal_error_ends_the_run_without_another_model_call(error: Exception) -> None:
    """`FatalToolError` and `PermissionError` end the run `fatal_tool_error` at once."""

    @tether.tool
    async def vault() -> str:
        """Open the vault."""
        calls["vault"] += 1
        raise error

    agent, provider = make([tools_reply(call("vault")), Reply(text="unreachable")], [vault])
    result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.is_error, done.attempts) == ("fatal_error", True, 1)
    assert calls["vault"] == 1
    assert result.termination == "fatal_tool_error"
    assert transitions(result) == [("complete", "fatal_tool_error")]
    assert "vault" in run_finished(result).error
    assert "credentials revoked" in run_finished(result).error
    assert len(provider.requests) == 1
    assert result.output is None


def _always(kind: str) -> Callable[[BaseException], Any]:
    def classify(exc: BaseException) -> Any:
        return kind if isinstance(exc, ValueError) else default_classifier(exc)

    return classify


def _broken(exc: BaseException) -> Any:
    raise RuntimeError("classifier bug")


@pytest.mark.parametrize(
    ("classifier", "outcome", "attempts", "termination"),
    [
        pytest.param(None, "model_error", 1, "answered", id="default"),
        pytest.param(_always("fatal"), "fatal_error", 1, "fatal_tool_error", id="fatal"),
        pytest.param(_always("transient"), "transient_error", 2, "answered", id="transient"),
        pytest.param(_always("model"), "model_error", 1, "answered", id="model"),
        pytest.param(_always("nonsense"), "fatal_error", 1, "fatal_tool_error", id="invalid"),
        pytest.param(_broken, "fatal_error", 1, "fatal_tool_error", id="raises"),
    ],
)
async def test_classifier_decides_other_exceptions(
    classifier: Any, outcome: str, attempts: int, termination: str
) -> None:
    """A custom classifier changes how a plain exception is treated; a broken one is fatal."""

    @tether.tool
    async def parse(text: str) -> int:
        """Parse an int."""
        return int(text)

    settings = FAST if classifier is None else attrs.evolve(FAST, classifier=classifier)
    agent, provider = make(
        [tools_reply(call("parse", text="x")), Reply(text="ok")],
        [parse],
        tool_settings=settings,
        limits=tether.Limits(max_tool_retries=1),
    )
    result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.attempts) == (outcome, attempts)
    assert "ValueError" in done.content
    assert result.termination == termination
    assert len(provider.requests) == (1 if termination == "fatal_tool_error" else 2)


async def test_unserializable_result_is_fatal_with_a_clear_error() -> None:
    """A result with no JSON form is a fatal_error: the run ends `fatal_tool_error`."""

    @tether.tool
    async def weird() -> object:
        """Return something odd."""
        return object()

    agent, provider = make([tools_reply(call("weird")), Reply(text="unreachable")], [weird])
    result = await run(agent)
    (done,) = finished(result)
    assert done.outcome == "fatal_error"
    assert result.termination == "fatal_tool_error"
    error = run_finished(result).error
    assert error is not None
    assert "weird" in error
    assert "object" in error
    assert "serialize" in error
    assert len(provider.requests) == 1


# --------------------------------------------------------------- terminal tools


async def test_terminal_tool_success_ends_the_run_with_its_result() -> None:
    """A terminal tool that succeeds this round ends the run `terminal_tool`, output = result."""
    agent, provider = make(
        [tools_reply(call("add", a=1, b=1), call("finish", answer="42")), Reply(text="extra")],
        [add, finish],
    )
    result = await run(agent)
    assert result.termination == "terminal_tool"
    assert result.output == "final: 42"
    assert run_finished(result).output == "final: 42"
    assert transitions(result) == [("complete", "terminal_tool")]
    assert len(provider.requests) == 1
    assert result.usage.steps == 1
    assert result.ok


async def test_failing_terminal_tool_is_not_completion() -> None:
    """A terminal tool that fails returns an error to the model and the run continues."""
    agent, provider = make(
        [tools_reply(call("finish", answer="bad")), Reply(text="plain answer")], [add, finish]
    )
    result = await run(agent)
    (done,) = finished(result)
    assert done.outcome == "model_error"
    assert transitions(result) == [("continue", "tool_use"), ("complete", "answered")]
    assert result.termination == "answered"
    assert result.output == "plain answer"
    assert len(provider.requests) == 2


async def test_earlier_terminal_record_never_ends_a_later_round() -> None:
    """Only this round's successful terminal call ends a run; past or nudged ones do not."""
    agent, provider = make(
        [
            tools_reply(call("finish", answer="bad")),
            # The same terminal call again (nudged, not run) plus a plain tool.
            tools_reply(call("finish", answer="bad"), call("add", a=1, b=2)),
            tools_reply(call("add", a=2, b=2)),
            Reply(text="4"),
        ],
        [add, finish],
    )
    result = await run(agent)
    assert outcomes(result) == ["model_error", "nudged", "ok", "ok"]
    assert calls["finish"] == 1
    assert transitions(result) == [
        ("continue", "tool_use"),
        ("continue", "tool_use"),
        ("continue", "tool_use"),
        ("complete", "answered"),
    ]
    assert result.termination == "answered"
    assert result.output == "4"
    assert len(provider.requests) == 4


# --------------------------------------------------------------- repeat detection


async def test_repeated_call_is_nudged_not_executed() -> None:
    """The same call (name and arguments, any key order) as last round is nudged, not run."""
    agent, _ = make(
        [
            tools_reply(call("add", a=1, b=2)),
            tools_reply(ToolCall(name="add", arguments={"b": 2, "a": 1})),
            tools_reply(call("add", a=9, b=9)),
            tools_reply(call("add", a=1, b=2)),  # not the *previous* round's call: runs
            Reply(text="done"),
        ]
    )
    result = await run(agent)
    assert outcomes(result) == ["ok", "nudged", "ok", "ok"]
    (nudged,) = (f for f in finished(result) if f.outcome == "nudged")
    assert nudged.is_error
    assert nudged.attempts == 0
    assert "same" in nudged.content
    assert calls["add"] == 3
    assert result.usage.tool_calls == 3
    assert result.usage.steps == 5
    assert result.termination == "answered"


def test_repeat_key_is_the_sorted_compact_json_of_the_arguments() -> None:
    """The repeat key (kept in checkpoints) is JSONEncoder's sorted compact text, else repr."""
    from tether.runtime import _repeats

    encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr)
    circular: dict[str, Any] = {}
    circular["self"] = circular
    cases: list[Any] = [
        {},
        {"b": [1, 2.5, None, True], "a": {"d": "é\u2028", "c": float("inf")}},
        "text",
        {"x": object},
        {1: 2, "a": 3},  # keys that cannot be sorted: repr
        circular,  # repr
    ]
    for value in cases:
        try:
            expected = encoder.encode(value)
        except (TypeError, ValueError):
            expected = repr(value)
        assert _repeats.canonical(value) == expected


async def test_model_stuck_repeating_ends_at_max_steps() -> None:
    """A model that repeats one call forever is nudged each time and ends at `max_steps`."""
    agent, provider = make(
        lambda request, ctx: tools_reply(call("add", a=1, b=2)),
        limits=tether.Limits(max_steps=4),
    )
    result = await run(agent)
    assert outcomes(result) == ["ok", "nudged", "nudged", "nudged"]
    assert calls["add"] == 1
    assert result.termination == "max_steps"
    assert result.usage.steps == 4
    assert len(provider.requests) == 4
    (hit,) = of(result.events, ev.CeilingHit)
    assert (hit.ceiling, hit.limit, hit.used) == ("max_steps", 4, 4)


# --------------------------------------------------------------- max_tool_calls


async def test_max_tool_calls_counts_across_rounds() -> None:
    """Two calls a round with max_tool_calls=3: the 4th call is denied, the run ends."""

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        n = ctx.call_index
        return tools_reply(call("add", a=n, b=0), call("add", a=n, b=1))

    agent, provider = make(script, limits=tether.Limits(max_tool_calls=3))
    result = await run(agent)
    assert outcomes(result) == ["ok", "ok", "ok", "denied"]
    (denied,) = (f for f in finished(result) if f.outcome == "denied")
    assert (denied.call_id, denied.is_error, denied.attempts) == ("call_1_1", True, 0)
    assert "3" in denied.content
    assert calls["add"] == 3
    assert result.usage.tool_calls == 3
    assert result.termination == "max_tool_calls"
    (hit,) = of(result.events, ev.CeilingHit)
    assert (hit.ceiling, hit.limit, hit.used) == ("max_tool_calls", 3, 3)
    assert transitions(result)[-1] == ("complete", "max_tool_calls")
    assert len(provider.requests) == 2
    assert_paired(result)


async def test_max_tool_calls_allows_the_whole_budget_in_one_round() -> None:
    """Five calls in one round with max_tool_calls=5 all run; the model then answers."""
    agent, _ = make(
        [tools_reply(*(call("add", a=i, b=i) for i in range(5))), Reply(text="sums")],
        limits=tether.Limits(max_tool_calls=5),
    )
    result = await run(agent)
    assert outcomes(result) == ["ok"] * 5
    assert result.usage.tool_calls == 5
    assert result.termination == "answered"
    assert of(result.events, ev.CeilingHit) == []


# --------------------------------------------------------------- concurrency


async def test_calls_of_one_round_run_concurrently() -> None:
    """Two calls that each wait for the other can only finish when run concurrently."""
    ping_seen, pong_seen = anyio.Event(), anyio.Event()

    @tether.tool
    async def ping() -> str:
        """Ping."""
        ping_seen.set()
        with anyio.fail_after(2):
            await pong_seen.wait()
        return "ping"

    @tether.tool
    async def pong() -> str:
        """Pong."""
        pong_seen.set()
        with anyio.fail_after(2):
            await ping_seen.wait()
        return "pong"

    agent, _ = make([tools_reply(call("ping"), call("pong")), Reply(text="ok")], [ping, pong])
    result = await run(agent)
    assert outcomes(result) == ["ok", "ok"]
    assert sorted(f.content for f in finished(result)) == ["ping", "pong"]


@pytest.mark.parametrize("max_parallel", [1, 2, 3])
async def test_parallel_calls_are_bounded_by_max_parallel(max_parallel: int) -> None:
    """At most `ToolSettings.max_parallel` calls of a round run at once."""
    active, peak = [0], [0]

    @tether.tool
    async def work(n: int) -> int:
        """Do some work."""
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        await anyio.wait_all_tasks_blocked()  # every call that can start has started
        active[0] -= 1
        return n

    settings = attrs.evolve(FAST, max_parallel=max_parallel)
    agent, _ = make(
        [tools_reply(*(call("work", n=i) for i in range(5))), Reply(text="ok")],
        [work],
        tool_settings=settings,
    )
    result = await run(agent)
    assert outcomes(result) == ["ok"] * 5
    assert peak[0] == max_parallel


async def test_sequential_tools_never_overlap() -> None:
    """Tools marked sequential run one at a time, after the parallel ones, in the model's order."""
    active, log = [0], []

    @tether.tool(sequential=True)
    async def write(n: int) -> int:
        """Write a record."""
        active[0] += 1
        log.append(("write", n, active[0]))
        await anyio.wait_all_tasks_blocked()
        active[0] -= 1
        return n

    @tether.tool
    async def read(n: int) -> int:
        """Read a record."""
        active[0] += 1
        log.append(("read", n, active[0]))
        await anyio.wait_all_tasks_blocked()
        active[0] -= 1
        return n

    agent, _ = make(
        [
            tools_reply(
                call("write", n=1), call("read", n=1), call("write", n=2), call("read", n=2)
            ),
            Reply(text="ok"),
        ],
        [write, read],
    )
    result = await run(agent)
    assert outcomes(result) == ["ok"] * 4
    writes = [(n, seen) for kind, n, seen in log if kind == "write"]
    assert writes == [(1, 1), (2, 1)]
    assert max(seen for kind, _, seen in log if kind == "read") == 2
    assert_paired(result)


# --------------------------------------------------------------- timeouts, sync tools


@AUTOJUMP
@pytest.mark.parametrize("retries", [0, 1])
async def test_async_tool_timeout(retries: int, anyio_backend: Any) -> None:
    """An async tool past its `timeout_s` is cancelled: `timeout` after retries (trio: virtual)."""

    @tether.tool(timeout_s=0.05)
    async def slow() -> str:
        """Takes forever."""
        calls["slow"] += 1
        await anyio.sleep(10)
        return "late"

    agent, _ = make(
        [tools_reply(call("slow")), Reply(text="moved on")],
        [slow],
        limits=tether.Limits(max_tool_retries=retries),
    )
    with anyio.fail_after(5):
        result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.is_error, done.attempts) == ("timeout", True, retries + 1)
    assert "slow" in done.content
    assert "0.05" in done.content
    assert calls["slow"] == retries + 1
    assert result.termination == "answered"


@AUTOJUMP
@pytest.mark.parametrize(("run_timeout", "outcome"), [(30.0, "timeout"), (5.0, "cancelled")])
async def test_tool_timeout_against_the_run_deadline(
    run_timeout: float, outcome: str, anyio_backend: Any
) -> None:
    """The nearer of a tool's timeout (10 s) and the run's deadline ends the call (virtual)."""

    @tether.tool(timeout_s=10)
    async def slow() -> str:
        """Takes forever."""
        await anyio.sleep(1000)
        return "late"

    agent, _ = make(
        [tools_reply(call("slow")), Reply(text="moved on")],
        [slow],
        limits=tether.Limits(max_tool_retries=0, timeout_s=run_timeout),
    )
    start = anyio.current_time()
    with anyio.fail_after(2000):
        result = await run(agent)
    (done,) = finished(result)
    assert done.outcome == outcome
    if outcome == "timeout":
        assert result.termination == "answered"
        assert anyio.current_time() - start == pytest.approx(10)
    else:
        assert result.termination == "deadline"
        assert anyio.current_time() - start == pytest.approx(5)
    assert_consistent(result)


async def test_an_async_tool_sees_its_timeout_as_its_deadline() -> None:
    """Inside a call, anyio.current_effective_deadline() is the call's timeout away, and a
    scope the tool opens nests inside the call's (on trio the call's is a native scope)."""

    @tether.tool(timeout_s=7)
    async def when() -> str:
        """Says how long the call may take."""
        left = anyio.current_effective_deadline() - anyio.current_time()
        with anyio.move_on_after(0.01) as own:
            await anyio.sleep(5)
        return f"{left:.1f} {own.cancelled_caught}"

    agent, _ = make([tools_reply(call("when")), Reply(text="ok")], [when])
    result = await run(agent)
    (done,) = finished(result)
    assert (done.outcome, done.content) == ("ok", "7.0 True")
    assert result.termination == "answered"


async def test_a_call_timeout_scope_is_the_backend_scope_move_on_after_makes(
    anyio_backend: Any,
) -> None:
    """The tool actor's timeout scope class and clock, per backend: trio's scope on trio,
    anyio's on asyncio (made without the backend lookup), each on the backend's clock."""
    from tether.actors import _spawn, _tools

    make_scope, clock = _tools._timeout_scopes()
    scope = make_scope(deadline=clock() + 5)
    with scope:
        assert anyio.current_effective_deadline() == pytest.approx(anyio.current_time() + 5)
    assert not scope.cancelled_caught
    if anyio_backend == "trio":
        import trio

        assert isinstance(scope, trio.CancelScope)
    else:
        assert isinstance(scope, anyio.CancelScope)
        assert clock is not anyio.current_time or not _spawn.anyio_checked()


def test_outside_a_loop_the_call_timeout_scope_is_anyio_public_pair() -> None:
    """With no loop running, the tool actor falls back on anyio.CancelScope and current_time."""
    from tether.actors import _tools

    assert _tools._timeout_scopes() == (anyio.CancelScope, anyio.current_time)


async def test_sync_and_async_tools_both_work() -> None:
    """A sync tool runs in a worker thread and an async tool on the loop; both return."""
    agent, _ = make(
        [tools_reply(call("shout", text="hi"), call("add", a=2, b=3)), Reply(text="ok")],
        [shout, add],
    )
    result = await run(agent)
    assert [(f.outcome, f.content) for f in finished(result)] in (
        [("ok", "HI"), ("ok", "5")],
        [("ok", "5"), ("ok", "HI")],
    )
    assert calls["thread:True"] == 1
    assert result.termination == "answered"


@AUTOJUMP
async def test_sync_tool_past_its_timeout_is_abandoned(anyio_backend: Any) -> None:
    """A sync tool past its timeout is abandoned: `timeout`, late result dropped (trio: virtual)."""
    release, returned = threading.Event(), threading.Event()

    @tether.tool(timeout_s=0.05)
    def stuck() -> str:
        """Blocks its thread."""
        release.wait(5)
        returned.set()
        return "late result"

    agent, _ = make(
        [tools_reply(call("stuck")), Reply(text="moved on")],
        [stuck],
        limits=tether.Limits(max_tool_retries=0),
    )
    try:
        with anyio.fail_after(3):
            result = await run(agent)
    finally:
        release.set()
        # Let the abandoned thread finish before the test's event loop closes.
        assert await anyio.to_thread.run_sync(returned.wait, 5)
    (done,) = finished(result)
    assert (done.outcome, done.attempts) == ("timeout", 1)
    assert result.termination == "answered"
    assert result.output == "moved on"
    assert all("late result" not in f.content for f in finished(result))


async def test_plain_functions_are_wrapped_as_tools() -> None:
    """Plain functions (sync or async) in `Agent(tools=...)` become tools automatically."""

    def double(x: int) -> int:
        """Double a number."""
        return 2 * x

    async def negate(x: int) -> int:
        """Negate a number."""
        return -x

    agent, provider = make(
        [tools_reply(call("double", x=4), call("negate", x=4)), Reply(text="ok")],
        [double, negate],
    )
    assert all(isinstance(t, tether.ToolSpec) for t in agent.tools)
    result = await run(agent)
    assert sorted(f.content for f in finished(result)) == ["-4", "8"]
    assert request_tools(provider, 0) == ["double", "negate"]
    descriptions = {t.name: t.description for t in provider.requests[0][1].tools}
    assert descriptions == {"double": "Double a number.", "negate": "Negate a number."}


# --------------------------------------------------------------- discovery


@tether.tool
async def get_weather(city: str) -> str:
    """Look up the weather forecast for a city."""
    calls["get_weather"] += 1
    return f"sunny in {city}"


@tether.tool
async def send_email(to: str) -> str:
    """Send an email message."""
    return "sent"


@tether.tool
async def convert_currency(amount: float) -> float:
    """Convert money between currencies."""
    return amount


CATALOGUE = [get_weather, send_email, convert_currency]


async def test_discovery_first_promotes_tools_found_by_search() -> None:
    """`discovery="first"` offers only search_tools; a found tool is callable next round."""
    agent, provider = make(
        [
            tools_reply(call("get_weather", city="Oslo")),  # not found yet: unknown
            tools_reply(call("search_tools", query="weather forecast")),
            tools_reply(call("get_weather", city="Oslo")),
            Reply(text="sunny"),
        ],
        CATALOGUE,
        discovery="first",
    )
    result = await run(agent)
    assert request_tools(provider, 0) == ["search_tools"]
    assert request_tools(provider, 1) == ["search_tools"]
    assert request_tools(provider, 2) == ["search_tools", "get_weather"]
    first, search, weather = finished(result)
    assert first.outcome == "model_error"
    assert "search_tools" in first.content
    assert search.outcome == "ok"
    assert "get_weather" in search.content
    assert "send_email" not in search.content
    assert (weather.outcome, weather.content) == ("ok", "sunny in Oslo")
    assert calls["get_weather"] == 1
    assert result.termination == "answered"


async def test_discovered_tools_stay_callable_after_a_quality_retry() -> None:
    """Tools found by search remain offered after a quality retry."""
    judge = tether.RuleJudge({"long": lambda c: len(c.text) > 5})
    agent, provider = make(
        [
            tools_reply(call("search_tools", query="weather")),
            Reply(text="rain"),
            Reply(text="rain all week"),
        ],
        CATALOGUE,
        discovery="first",
        judge=judge,
    )
    result = await run(agent)
    assert transitions(result) == [
        ("continue", "tool_use"),
        ("retry", "judgement_failed"),
        ("complete", "answered"),
    ]
    assert "get_weather" in request_tools(provider, 2)


@pytest.mark.parametrize(
    ("discovery", "threshold", "registered"),
    [
        ("first", 20, True),
        ("off", 1, False),
        ("auto", 2, True),
        ("auto", 3, False),
        ("auto", 20, False),
    ],
)
async def test_discovery_setting_decides_search_tools(
    discovery: str, threshold: int, registered: bool
) -> None:
    """`first` always registers search_tools, `off` never, `auto` above the threshold."""
    agent, provider = make(
        [Reply(text="hi")], CATALOGUE, discovery=discovery, discovery_threshold=threshold
    )
    result = await run(agent)
    names = request_tools(provider, 0)
    if registered:
        assert names == ["search_tools"]
    else:
        assert names == ["get_weather", "send_email", "convert_currency"]
    assert result.termination == "answered"


async def test_search_tools_is_unknown_when_discovery_is_off() -> None:
    """With discovery off, a `search_tools` call is an unknown tool."""
    agent, _ = make(
        [tools_reply(call("search_tools", query="weather")), Reply(text="ok")],
        CATALOGUE,
        discovery="off",
    )
    result = await run(agent)
    (done,) = finished(result)
    assert done.outcome == "model_error"
    assert "unknown tool" in done.content


# ------------------------------------------------------------------ the tool context


async def test_tool_context_is_the_calls_own_on_every_read() -> None:
    """current_tool_context() in a call names its run and call, and is one object throughout:
    read twice, from a child task, or in a sync tool's worker thread."""
    seen: dict[str, list[ToolContext | None]] = {}

    @tether.tool
    async def peek(n: int) -> str:
        """Look at the context."""
        reads = [current_tool_context()]
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _read_into(reads))
        reads.append(current_tool_context())
        context = reads[0]
        assert context is not None
        seen[context.call_id] = reads
        return "ok"

    @tether.tool
    def peek_sync(n: int) -> str:
        """Look at the context from a worker thread."""
        reads = [current_tool_context(), current_tool_context()]
        context = reads[0]
        assert context is not None
        seen[context.call_id] = reads
        return "ok"

    agent, _ = make(
        [
            tools_reply(call("peek", n=1), call("peek_sync", n=2), call("peek", n=3)),
            tools_reply(call("peek", n=4)),
            Reply(text="done"),
        ],
        [peek, peek_sync],
        limits=tether.Limits(max_total_tokens=10_000, max_cost_usd=5.0),
    )
    assert current_tool_context() is None
    result = await run(agent)
    assert current_tool_context() is None
    started = [e.call_id for e in of(result.events, ev.ToolCallStarted)]
    assert sorted(seen) == sorted(started)
    assert len(set(started)) == 4
    for call_id, reads in seen.items():
        first = reads[0]
        assert all(read is first for read in reads)
        assert first is not None
        assert (first.run_id, first.call_id) == (result.run_id, call_id)
        assert first.run_child is not None
        assert isinstance(first.remaining_tokens, int)
        assert first.remaining_tokens <= 10_000
        assert first.remaining_cost_usd is not None
        assert first.remaining_cost_usd <= 5.0


async def _read_into(reads: list[ToolContext | None]) -> None:
    reads.append(current_tool_context())


async def test_tool_actor_context_per_call_and_across_retries() -> None:
    """The ToolActor gives each call its context (the same across its retries), or None."""
    seen: list[ToolContext | None] = []

    @tether.tool
    async def flaky(n: int) -> int:
        """Fails once."""
        seen.append(current_tool_context())
        if len(seen) == 1:
            raise tether.TransientToolError("again")
        return n

    actor = ToolActor(FAST, 2, anyio.CapacityLimiter(1))

    async def run_child(agent: object, task: str) -> tether.actors.ToolOutput:
        raise AssertionError("not called")

    run_context = ToolContext(
        run_id="r1", run_child=run_child, remaining_tokens=7, remaining_cost_usd=0.5
    )
    use = ToolUseBlock(id="c9", name="flaky", input={"n": 4})
    reply: ReplyChannel[Any] = ReplyChannel(2)
    invocation = ToolInvocation(call=use, spec=flaky)
    await actor.handle(RunTools(invocations=(invocation,), reply=reply, context=run_context))
    done = await reply.receive()
    assert (done.outcome, done.content, done.attempts) == ("ok", "4", 2)
    assert len(seen) == 2
    assert seen[0] is seen[1]
    assert seen[0] == ToolContext(
        run_id="r1", call_id="c9", run_child=run_child, remaining_tokens=7, remaining_cost_usd=0.5
    )
    assert seen[0] is not None
    assert seen[0].run_child is run_child
    assert current_tool_context() is None

    seen.clear()
    reply = ReplyChannel(2)
    await actor.handle(RunTools(invocations=(invocation,), reply=reply))
    assert (await reply.receive()).attempts == 2
    assert seen == [None, None]


# ------------------------------------------------ the tool actor's one timeout scope

#: Timeouts on trio's virtual clock, and on asyncio's real one (short, never asserted).
VIRTUAL_OR_REAL = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(
            ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio-autojump"
        ),
        pytest.param("asyncio", id="asyncio"),
    ],
)


@VIRTUAL_OR_REAL
async def test_a_cut_call_is_retried_in_its_context_and_the_actor_serves_on(
    anyio_backend: Any,
) -> None:
    """A lone call cut by the actor's scope is finished as before: its retry sees the same
    context, its ToolDone the same outcome and attempts; later calls are timed anew."""
    seen: list[ToolContext | None] = []
    slow_attempts = {1, 4, 5}  # round 1's first attempt; both of round 3's

    @tether.tool(timeout_s=0.05)
    async def flaky(n: int) -> int:
        """Slow on some attempts."""
        seen.append(current_tool_context())
        if len(seen) in slow_attempts:
            await anyio.sleep(30)
        return n

    agent, _ = make(
        [
            tools_reply(call("flaky", n=1)),
            tools_reply(call("flaky", n=2)),
            tools_reply(call("flaky", n=3)),
            tools_reply(call("flaky", n=4)),
            Reply(text="done"),
        ],
        [flaky],
        limits=tether.Limits(max_tool_retries=1),
    )
    with anyio.fail_after(20):
        result = await run(agent)
    assert [(f.outcome, f.attempts) for f in finished(result)] == [
        ("ok", 2),
        ("ok", 1),
        ("timeout", 2),
        ("ok", 1),
    ]
    assert "timed out after 0.05s" in finished(result)[2].content
    assert seen[0] is seen[1]  # the cut attempt's retry runs in the call's context
    assert seen[3] is seen[4]
    assert len({id(c) for c in seen}) == 4
    assert result.termination == "answered"


@VIRTUAL_OR_REAL
async def test_a_short_timeout_after_a_long_one_and_after_idling_still_cuts(
    anyio_backend: Any,
) -> None:
    """The scope's deadline follows each call: a 0.05 s call after a 60 s one is cut at its
    own deadline, also after the actor idled past an earlier call's deadline."""

    @tether.tool(timeout_s=60)
    async def patient() -> str:
        """Quick, under a long timeout."""
        return "p"

    @tether.tool(timeout_s=0.05)
    async def hasty(hang: bool) -> str:
        """Hangs when told to."""
        if hang:
            await anyio.sleep(1000)
        return "h"

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        steps = [
            tools_reply(call("hasty", hang=False)),
            tools_reply(call("patient")),
            tools_reply(call("hasty", hang=True)),
            tools_reply(call("hasty", hang=False)),
            tools_reply(call("hasty", hang=True)),
            Reply(text="done"),
        ]
        return steps[ctx.call_index]

    provider = ScriptedProvider(script, latency_s=0.1)  # idles past a 0.05 s deadline
    agent = tether.Agent(
        name="t",
        provider=provider,
        tools=[patient, hasty],
        tool_settings=FAST,
        limits=tether.Limits(max_tool_retries=0),
    )
    with anyio.fail_after(30):
        result = await run(agent)
    assert [f.outcome for f in finished(result)] == ["ok", "ok", "timeout", "ok", "timeout"]
    assert result.termination == "answered"
