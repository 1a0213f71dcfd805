"""Replay and fork (docs/guides/replay.md): recorded runs re-run against the agent's code."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tests.helpers import add, calls
from tether import events as ev
from tether.providers import Fault as ScriptFault
from tether.providers import (
    InvalidRequest,
    ModelRequest,
    ProviderContext,
    Reasoning,
    Reply,
    ScriptedProvider,
    ServerError,
    ToolCall,
)
from tether.runtime import ReplayProvider, TrailError, read_trail
from tether.runtime._playback import comparable

pytestmark = pytest.mark.anyio


@tether.tool
async def lookup(city: str) -> str:
    """The weather in a city."""
    calls["lookup"] += 1
    return f"sunny in {city}"


@tether.tool
async def flaky(x: int) -> str:
    """Fails for negative numbers."""
    calls["flaky"] += 1
    if x < 0:
        raise tether.ToolError("x must be >= 0")
    return str(x)


@attrs.frozen
class Trip:
    city: str
    days: int


def _lookup(city: str, id: str) -> ToolCall:
    return ToolCall(name="lookup", arguments={"city": city}, id=id)


def _ask(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    if point == "tool_call" and subject.name == "lookup":
        return tether.Verdict.ask("confirm the lookup")
    return None


def _deny_flaky(point: tether.PolicyPoint, subject: Any) -> tether.Verdict | None:
    if point == "tool_call" and subject.name == "flaky":
        return tether.Verdict.deny("no flaky today")
    return None


def _agents() -> dict[str, tether.Agent]:
    """A representative set of scripted agents: tools, errors, judges, policies, typed
    output, approvals, reasoning, a provider retry, a sub-agent."""
    child = tether.Agent(
        name="child",
        provider=ScriptedProvider([Reply(tool_calls=[_lookup("Oslo", "k1")]), Reply(text="cold")]),
        tools=[lookup],
    )
    return {
        "plain": tether.Agent(name="plain", provider=ScriptedProvider([Reply(text="hello")])),
        "tools": tether.Agent(
            name="tools",
            provider=ScriptedProvider(
                [
                    Reply(
                        text="let me add",
                        tool_calls=[
                            ToolCall(name="add", arguments={"a": 1, "b": 2}, id="c1"),
                            _lookup("Rome", "c2"),
                        ],
                    ),
                    Reply(tool_calls=[ToolCall(name="flaky", arguments={"x": -1}, id="c3")]),
                    Reply(tool_calls=[ToolCall(name="flaky", arguments={"x": 4}, id="c4")]),
                    Reply(text="3, sunny, 4"),
                ]
            ),
            tools=[add, lookup, flaky],
        ),
        "judged": tether.Agent(
            name="judged",
            provider=ScriptedProvider([Reply(text="short"), Reply(text="a longer answer")]),
            judge=tether.RuleJudge({"long": lambda c: len(c.text) > 8}),
        ),
        "policy": tether.Agent(
            name="policy",
            provider=ScriptedProvider(
                [
                    Reply(tool_calls=[ToolCall(name="flaky", arguments={"x": 1}, id="p1")]),
                    Reply(text="denied, fine"),
                ]
            ),
            tools=[flaky],
            policies=[_deny_flaky],
        ),
        "typed": tether.Agent(
            name="typed",
            provider=ScriptedProvider(
                [
                    Reply(
                        tool_calls=[
                            ToolCall(name="final_result", arguments={"city": "Rome"}, id="t1")
                        ]
                    ),
                    Reply(
                        tool_calls=[
                            ToolCall(
                                name="final_result", arguments={"city": "Rome", "days": 3}, id="t2"
                            )
                        ]
                    ),
                ]
            ),
            output_type=Trip,
        ),
        "approval": tether.Agent(
            name="approval",
            provider=ScriptedProvider(
                [
                    Reply(tool_calls=[_lookup("Paris", "a1"), _lookup("Lima", "a2")]),
                    Reply(text="done"),
                ]
            ),
            tools=[lookup],
            policies=[_ask],
        ),
        "llm_judged": tether.Agent(
            name="llm_judged",
            provider=ScriptedProvider([Reply(text="draft"), Reply(text="better")]),
            judge=tether.LLMJudge(
                provider=ScriptedProvider(
                    [
                        Reply(text='{"criteria": {"clear": {"score": 0.2, "reason": "vague"}}}'),
                        Reply(text="not json"),
                        Reply(text='{"criteria": {"clear": {"score": 0.9, "reason": "ok"}}}'),
                    ],
                    cost_per_mtok=tether.providers.Price(input=1.0, output=2.0),
                ),
                rubric={"clear": "is it clear"},
            ),
        ),
        "reasoning": tether.Agent(
            name="reasoning",
            provider=ScriptedProvider(
                [Reply(text="42", reasoning=[Reasoning(text="think", signature="sig")])]
            ),
        ),
        "retry": tether.Agent(
            name="retry",
            provider=ScriptedProvider(
                [ScriptFault(error=ServerError("boom", status=500)), Reply(text="after")]
            ),
        ),
        "provider_failed": tether.Agent(
            name="provider_failed",
            provider=ScriptedProvider(
                [
                    ScriptFault(error=ServerError("boom", status=500)),
                    ScriptFault(error=InvalidRequest("the request is bad", status=400)),
                ]
            ),
        ),
        "subagent": tether.Agent(
            name="parent",
            provider=ScriptedProvider(
                [
                    Reply(tool_calls=[ToolCall(name="child", arguments={"task": "go"}, id="s1")]),
                    Reply(text="the child said cold"),
                ]
            ),
            tools=[child.as_tool()],
        ),
    }


async def _answer(handle: tether.RunHandle) -> None:
    """Approve the first held call, reject the second."""
    seen = 0
    async for event in handle.events():
        if isinstance(event, ev.ApprovalRequested):
            seen += 1
            if seen == 1:
                handle.approve(event.call_id)
            else:
                handle.reject(event.call_id, "not Lima")


async def record(agent: tether.Agent, path: Path, input: str = "go") -> tether.RunResult:
    """Run ``agent`` once with a JsonlSink on ``path``; its result."""
    sink = tether.JsonlSink(str(path))
    try:
        async with tether.Runtime(event_sink=sink) as rt:
            handle = rt.start(agent, input)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_answer, handle)
                result = await handle.result()
                tg.cancel_scope.cancel()
    finally:
        sink.close()
    return result


@pytest.mark.parametrize("name", list(_agents()))
async def test_recorded_trails_replay_identical(name: str, tmp_path: Path) -> None:
    """Each representative agent's JSONL trail replays identical, and no tool runs again."""
    agent = _agents()[name]
    path = tmp_path / "trail.jsonl"
    recorded = await record(agent, path)
    before = Counter(calls)
    replayed = await tether.replay(str(path), agent)
    assert replayed.identical, str(replayed)
    assert str(replayed) == "identical"
    assert calls == before  # no tool was executed
    assert replayed.result.termination == recorded.termination
    assert replayed.result.output == recorded.output
    assert replayed.replayed_calls == recorded.usage.provider_attempts


async def test_replay_is_deterministic(tmp_path: Path) -> None:
    """Two replays of one trail give the same events, timestamps aside."""
    agent = _agents()["tools"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    one = await tether.replay(str(path), agent)
    two = await tether.replay(str(path), agent)

    def strip(events: Any) -> list[dict[str, Any]]:
        return [{k: v for k, v in ev.dump(e).items() if k != "at"} for e in events]

    assert strip(one.events) == strip(two.events)


async def test_replay_from_result_events() -> None:
    """A run's events in memory (``RunResult.events``) replay as a file's do."""
    agent = _agents()["judged"]
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    replayed = await tether.replay(result.events, agent)
    assert replayed.identical


async def test_changed_tool_schema_is_reported(tmp_path: Path) -> None:
    """A tool whose parameters changed rejects the recorded arguments: the divergence
    is at round 1, stage execute, on the call's result."""
    agent = _agents()["tools"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)

    @tether.tool(name="lookup")
    async def lookup2(town: str) -> str:
        """The weather in a town."""
        return town

    changed = attrs.evolve(agent, tools=[add, lookup2, flaky])
    replayed = await tether.replay(str(path), changed)
    d = replayed.divergence
    assert d is not None
    assert (d.round, d.stage) == (1, "execute")
    assert d.expected is not None
    assert d.got is not None
    assert d.expected["type"] == d.got["type"] == "ToolCallFinished"
    assert d.expected["outcome"] == "ok"
    assert d.got["outcome"] == "model_error"
    assert "outcome" in d.fields


async def test_policy_added_is_reported(tmp_path: Path) -> None:
    """A policy added since the recording checks the input: the divergence is its first
    check (round 0, stage input), a PolicyChecked the trail does not have."""
    agent = _agents()["tools"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    changed = attrs.evolve(agent, policies=[_deny_flaky])
    replayed = await tether.replay(str(path), changed)
    d = replayed.divergence
    assert d is not None
    assert (d.round, d.stage) == (0, "input")
    assert d.got is not None
    assert d.got["type"] == "PolicyChecked"


async def test_policy_denying_in_round_2(tmp_path: Path) -> None:
    """A policy that denies only ``flaky`` diverges at round 2 (round 1 calls add, lookup)."""
    agent = _agents()["tools"]
    path = tmp_path / "t.jsonl"
    await record(attrs.evolve(agent, policies=[lambda p, s: None]), path)
    changed = attrs.evolve(agent, policies=[_deny_flaky])
    replayed = await tether.replay(str(path), changed)
    d = replayed.divergence
    assert d is not None
    assert (d.round, d.stage) == (2, "execute")
    assert d.expected is not None
    assert d.got is not None
    assert (d.expected["verdict"], d.got["verdict"]) == ("allow", "deny")


async def test_judge_that_now_fails_is_reported(tmp_path: Path) -> None:
    """A stricter judge fails the answer the recorded one passed: stage judge."""
    agent = _agents()["judged"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    strict = attrs.evolve(agent, judge=tether.RuleJudge({"long": lambda c: len(c.text) > 100}))
    replayed = await tether.replay(str(path), strict)
    d = replayed.divergence
    assert d is not None
    assert (d.round, d.stage) == (2, "judge")
    assert d.expected is not None
    assert d.expected["passed"] is True
    assert d.got is not None
    assert d.got["passed"] is False


async def test_different_arguments_are_reported(tmp_path: Path) -> None:
    """A trail whose model asked for other arguments than the code now validates: the
    recorded response is replayed as it is, so the code's own checks decide."""
    agent = _agents()["tools"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)

    @tether.tool(name="flaky")
    async def strict_flaky(x: int) -> str:
        """Only small numbers."""
        if x < 0:
            raise tether.ToolError("x must be >= 0")
        if x > 3:
            raise tether.ToolError("too big")
        return str(x)

    # live_tools: the tools run, so the changed tool's body decides.
    changed = attrs.evolve(agent, tools=[add, lookup, strict_flaky])
    replayed = await tether.replay(str(path), changed, live_tools=True)
    d = replayed.divergence
    assert d is not None
    assert (d.round, d.stage) == (3, "execute")


async def test_live_tools_execute(tmp_path: Path) -> None:
    """``live_tools=True`` runs the tools again (and is still identical here)."""
    agent = _agents()["tools"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    before = calls["lookup"]
    replayed = await tether.replay(str(path), agent, live_tools=True)
    assert replayed.identical, str(replayed)
    assert calls["lookup"] == before + 1


async def test_more_model_calls_than_recorded(tmp_path: Path) -> None:
    """Code that now asks the model once more than the trail holds diverges, clearly."""
    agent = _agents()["plain"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    picky = attrs.evolve(agent, judge=tether.RuleJudge({"never": lambda c: False}))
    replayed = await tether.replay(str(path), picky)
    assert not replayed.identical
    assert replayed.result.termination != tether.Termination.ANSWERED


async def test_old_trail_without_reasoning_field(tmp_path: Path) -> None:
    """A trail written before ModelCallFinished kept reasoning (no field) still loads and
    replays; a trail cut short is compared up to where it stops, and says so."""
    agent = _agents()["tools"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    import json

    lines = path.read_text().splitlines()
    old = []
    for line in lines:
        data = json.loads(line)
        data.pop("reasoning", None)
        old.append(json.dumps(data))
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(old[: len(old) // 2]) + "\n")
    replayed = await tether.replay(str(cut), agent)
    assert replayed.identical
    assert any("the run's end" in note for note in replayed.notes)
    assert any("reasoning blocks" in note for note in replayed.notes)
    current = await tether.replay(str(path), agent)
    assert current.notes == ()


async def test_trail_errors(tmp_path: Path) -> None:
    """A file with two runs needs run_id; an unknown run, a missing file, a line that is
    not an event are clear errors; a last line torn by a crash is skipped."""
    path = tmp_path / "t.jsonl"
    first = await record(_agents()["plain"], path)
    await record(_agents()["plain"], path)
    with pytest.raises(TrailError, match="holds 2 runs"):
        read_trail(str(path))
    with pytest.raises(TrailError, match="no run 'nope'"):
        read_trail(str(path), "nope")
    with pytest.raises(TrailError, match="cannot read the trail"):
        read_trail(str(tmp_path / "missing.jsonl"))
    assert (await tether.replay(str(path), _agents()["plain"], run_id=first.run_id)).identical
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "Nope"}\n')
    with pytest.raises(TrailError, match=r"bad\.jsonl:1: not a tether event"):
        read_trail(str(bad))
    torn = tmp_path / "torn.jsonl"
    whole = (tmp_path / "t.jsonl").read_text().splitlines()
    torn.write_text("\n".join(whole) + "\n" + whole[0][:20])  # no newline: torn
    assert read_trail(str(torn), first.run_id)[-1].seq == len(first.events) - 1


async def test_replay_provider_in_a_test(tmp_path: Path) -> None:
    """ReplayProvider is a provider: an agent on it answers as recorded, without a model."""
    agent = _agents()["tools"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    provider = ReplayProvider(str(path))
    async with tether.Runtime() as rt:
        result = await rt.run(attrs.evolve(agent, provider=provider), "go")
    assert result.output == "3, sunny, 4"
    assert provider.replayed == provider.recorded_calls == 4
    assert provider.live == 0


# ------------------------------------------------------------------- fork


class _Counting:
    """A scripted provider that counts its requests (across runs)."""

    def __init__(self, replies: list[Reply]) -> None:
        self.count = 0
        self.inner = ScriptedProvider(self._reply)
        self.replies = replies

    def _reply(self, request: ModelRequest, ctx: ProviderContext) -> Reply:
        self.count += 1
        return self.replies[ctx.call_index]


def _four_rounds(counting: _Counting) -> tether.Agent:
    return tether.Agent(name="four", provider=counting.inner, tools=[lookup])


FOUR = [
    Reply(tool_calls=[_lookup("A", "f1")]),
    Reply(tool_calls=[_lookup("B", "f2")]),
    Reply(tool_calls=[_lookup("C", "f3")]),
    Reply(text="A B C"),
]


async def test_fork_at_round_2_of_a_durable_run(tmp_path: Path) -> None:
    """A fork at round 2 of a 4-round durable run (SQLite store) plays rounds 1-2 without
    a model call or a tool execution, then goes on live after its RunForked seam."""
    store = tether.SQLiteRunStore(str(tmp_path / "runs.db"))
    counting = _Counting(FOUR)
    agent = _four_rounds(counting)
    async with tether.Runtime(store=store, agents=[agent]) as rt:
        original = await rt.run(agent, "go")
        assert counting.count == 4
        assert calls["lookup"] == 3
        live = _Counting([Reply(tool_calls=[_lookup("Z", "z1")]), Reply(text="A B Z")])
        forked_agent = tether.Agent(name="four", provider=live.inner, tools=[lookup])
        handle = await rt.fork(original.run_id, at_round=2, agent=forked_agent)
        result = await handle.result()
    assert counting.count == 4  # the recorded rounds made no model call
    assert live.count == 2  # rounds 3 and 4 were live
    provider = handle.agent.provider
    assert isinstance(provider, ReplayProvider)
    assert (provider.replayed, provider.live) == (2, 2)
    assert calls["lookup"] == 3 + 1  # only round 3's call ran
    assert result.output == "A B Z"
    assert result.run_id != original.run_id
    seams = [e for e in result.events if isinstance(e, ev.RunForked)]
    assert len(seams) == 1
    assert (seams[0].from_run, seams[0].at_round, seams[0].round) == (original.run_id, 2, 3)

    # Rounds 1-2 are the recorded ones, event for event.
    def upto2(events: Any) -> list[Any]:
        return [comparable(e) for e in events if e.round <= 2]

    assert upto2(result.events) == upto2(original.events)


async def test_fork_from_a_jsonl_trail(tmp_path: Path) -> None:
    """A fork works from a JSONL trail too, in a Runtime without a store."""
    path = tmp_path / "t.jsonl"
    counting = _Counting(FOUR)
    original = await record(_four_rounds(counting), path)
    live = _Counting([Reply(text="stopped early")])
    async with tether.Runtime() as rt:
        handle = await rt.fork(
            original.run_id,
            at_round=1,
            agent=tether.Agent(name="four", provider=live.inner, tools=[lookup]),
            trail=str(path),
        )
        result = await handle.result()
    assert live.count == 1
    assert result.output == "stopped early"
    (seam,) = [e for e in result.events if isinstance(e, ev.RunForked)]
    assert seam.round == 2
    from tether.cli._trace_cmd import describe

    assert describe(seam) == f"forked from {original.run_id} after its round 1; live from here"


async def test_fork_checks_its_round(tmp_path: Path) -> None:
    """A round the recorded run did not go on from, or no source, is a clear error."""
    path = tmp_path / "t.jsonl"
    original = await record(_four_rounds(_Counting(FOUR)), path)
    async with tether.Runtime() as rt:
        agent = _four_rounds(_Counting(FOUR))
        with pytest.raises(ValueError, match="no round 4 that went on"):
            await rt.fork(original.run_id, at_round=4, agent=agent, trail=str(path))
        with pytest.raises(ValueError, match="needs the recorded run"):
            await rt.fork(original.run_id, at_round=1, agent=agent)


# ------------------------------------------------------------------ cassettes


async def test_cassette_records_then_replays(tmp_path: Path) -> None:
    """The first run records (live: the tool runs), the next replays (no tool runs), and a
    changed policy fails the test with the divergence."""
    from tether.testing import CassetteDiverged, cassette

    agent = _agents()["tools"]
    first_tape = cassette("tools", directory=tmp_path)
    assert first_tape.recording
    recorded = await first_tape.run(agent, "go")
    assert (tmp_path / "tools.jsonl").exists()
    ran = calls["lookup"]
    again = cassette("tools", directory=tmp_path)
    assert not again.recording
    replayed = await again.run(agent, "go")
    assert calls["lookup"] == ran
    assert replayed.output == recorded.output
    with pytest.raises(CassetteDiverged, match="round 0, stage input") as caught:
        await again.run(attrs.evolve(agent, policies=[_deny_flaky]), "go")
    assert caught.value.replay.divergence is not None
    assert cassette("tools", directory=tmp_path, record=True).recording


def test_cassette_names() -> None:
    """A cassette name is a file name, nothing more."""
    from tether.testing import cassette

    with pytest.raises(ValueError, match="cassette name"):
        cassette("../x")


CASSETTE_TEST = """
import os
import pytest
import tether
from tether.providers import Reply, ScriptedProvider
from tether.testing import cassette

TEXT = os.environ["ANSWER"]

@pytest.mark.anyio
async def test_it(anyio_backend):
    agent = tether.Agent(
        name="a",
        provider=ScriptedProvider([Reply(text=TEXT)]),
        judge=tether.RuleJudge({"says": lambda c: c.text == TEXT}),
    )
    result = await cassette("it").run(agent, "q")
    assert result.output == TEXT

@pytest.fixture
def anyio_backend():
    return "asyncio"
"""


def test_cassette_record_flag(tmp_path: Path) -> None:
    """``pytest --record`` records a stale cassette again (a test that fails against it
    without the flag, as test_cassette_records_then_replays shows); the cassette lives
    next to the test file."""
    import os
    import subprocess
    import sys

    from tether.testing import cassette

    (tmp_path / "test_tape.py").write_text(CASSETTE_TEST)
    tape = tmp_path / "cassettes" / "it.jsonl"
    old = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="one")]))
    anyio.run(cassette("it", directory=tmp_path / "cassettes").run, old, "q")
    assert '"one"' in tape.read_text()
    from importlib.metadata import entry_points

    # The plugin is registered for pytest to load wherever tether is installed...
    assert [e.value for e in entry_points(group="pytest11") if e.name == "tether"] == [
        "tether.testing"
    ]
    # ...and loaded by name here, with no other plugin (a quicker start). The test's
    # judge now wants "two": against the cassette's "one" it would fail.
    env = {**os.environ, "ANSWER": "two", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "anyio"]
    command += ["-p", "tether.testing"]
    done = subprocess.run(
        [*command, "--record"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"two"' in tape.read_text()
    assert '"one"' not in tape.read_text()


# ------------------------------------------------------------------ the CLI

AGENT_MODULE = '''
import tether
from tether.providers import Reply, ScriptedProvider, ToolCall

@tether.tool
async def lookup(city: str) -> str:
    """The weather."""
    return "sunny in " + city

agent = tether.Agent(
    name="cli",
    provider=ScriptedProvider(
        [Reply(tool_calls=[ToolCall(name="lookup", arguments={"city": "Rome"}, id="c1")]),
         Reply(text="sunny")]
    ),
    tools=[lookup],
)

def _deny(point, subject):
    if point == "tool_call":
        return tether.Verdict.deny("no lookups")
    return None

def denied():
    return tether.Agent(name="cli", provider=agent.provider, tools=[lookup], policies=[_deny])
'''


async def test_cli_replay_file_and_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tether replay FILE --agent M:A`` says identical (exit 0) or where it diverged
    (exit 1); ``--store URL RUN_ID`` replays a stored run; a bad trail is exit 64."""
    from tether.cli._main import main

    module = tmp_path / "cli_agent.py"
    module.write_text(AGENT_MODULE)
    path = tmp_path / "t.jsonl"
    store = tether.SQLiteRunStore(str(tmp_path / "runs.db"))
    namespace: dict[str, Any] = {}
    exec(compile(AGENT_MODULE, str(module), "exec"), namespace)
    agent = namespace["agent"]
    sink = tether.JsonlSink(str(path))
    try:
        async with tether.Runtime(store=store, agents=[agent], event_sink=sink) as rt:
            result = await rt.run(agent, "go")
    finally:
        sink.close()

    def cli(*argv: str) -> int:
        return main(list(argv))

    assert (
        await anyio.to_thread.run_sync(cli, "replay", str(path), "--agent", f"{module}:agent") == 0
    )
    out = capsys.readouterr().out
    assert f"{result.run_id}: identical" in out
    code = await anyio.to_thread.run_sync(cli, "replay", str(path), "--agent", f"{module}:denied")
    assert code == 1
    out = capsys.readouterr().out
    assert "diverged at round 0, stage input" in out
    assert "recorded:" in out
    assert "replayed:" in out
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    code = await anyio.to_thread.run_sync(
        cli, "replay", "--store", url, result.run_id, "--agent", f"{module}:agent"
    )
    assert code == 0, capsys.readouterr()
    assert "identical" in capsys.readouterr().out
    code = await anyio.to_thread.run_sync(
        cli, "replay", "--store", url, "nope", "--agent", f"{module}:agent", "--backend", "trio"
    )
    assert code == 64
    assert "no events of run 'nope'" in capsys.readouterr().err
    code = await anyio.to_thread.run_sync(
        cli, "replay", str(tmp_path / "missing.jsonl"), "--agent", f"{module}:agent"
    )
    assert code == 64


# ------------------------------------------------------------ cancellation


async def test_cancel_a_replay_leaks_nothing() -> None:
    """Cancelling the caller of ``tether.replay`` while the replayed run waits (in a policy,
    the agent's own code) ends it, and leaves no task behind."""
    from tests.helpers import cancel_once_blocked, task_names

    agent = _agents()["tools"]
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "go")
    gate = anyio.Event()

    async def slow(point: tether.PolicyPoint, subject: Any) -> None:
        if point == "tool_call":
            await gate.wait()

    waiting = attrs.evolve(agent, policies=[slow])
    before = task_names()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_once_blocked, scope)
            await tether.replay(result.events, waiting)
    assert scope.cancelled_caught
    assert task_names() == before


@pytest.mark.parametrize("where", ["provider", "tool"])
async def test_cancel_a_fork_while_live_leaks_nothing(where: str, tmp_path: Path) -> None:
    """A fork cancelled in its live part (its live provider waiting, or its live tool
    running) ends cancelled after its seam, and leaves no task behind."""
    from tests.helpers import task_names

    path = tmp_path / "t.jsonl"
    original = await record(_four_rounds(_Counting(FOUR)), path)
    started = anyio.Event()

    @tether.tool(name="lookup")
    async def stuck(city: str) -> str:
        """Never answers."""
        started.set()
        await anyio.sleep_forever()
        return city

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        started.set()
        return Reply(text="x")

    if where == "provider":
        provider = ScriptedProvider(script, latency_s=3600)
    else:
        provider = ScriptedProvider([Reply(tool_calls=[_lookup("Z", "z9")])])
    agent = tether.Agent(name="four", provider=provider, tools=[stuck])
    async with tether.Runtime() as rt:
        before = task_names()
        handle = await rt.fork(original.run_id, at_round=2, agent=agent, trail=str(path))
        await started.wait()
        await anyio.wait_all_tasks_blocked()
        handle.cancel("enough")
        result = await handle.result()
        assert result.termination == tether.Termination.CANCELLED
        assert any(isinstance(e, ev.RunForked) for e in result.events)
        await anyio.wait_all_tasks_blocked()
        assert task_names() <= before


async def test_demo_trails_replay_identical(tmp_path: Path) -> None:
    """Every path of ``tether demo`` (tools in threads, parallel calls, judge retries, a
    retried fault, a terminal tool, a refusal, max_steps, quality_exhausted), recorded
    together in one JSONL file, replays identical run by run."""
    from tether.cli._demo_agents import build

    demo = build(32, seed=0, latency_scale=0.0)
    assert len({d.path for d in demo}) == 8  # every path
    path = tmp_path / "demo.jsonl"
    sink = tether.JsonlSink(str(path))
    try:
        async with tether.Runtime(event_sink=sink) as rt:
            handles = [rt.start(d.agent, d.input, run_id=d.run_id) for d in demo]
            for handle in handles:
                await handle.result()
    finally:
        sink.close()
    for d in demo:
        replayed = await tether.replay(str(path), d.agent, run_id=d.run_id)
        assert replayed.identical, f"{d.path}: {replayed}"


async def test_llm_judge_replays_without_its_model(tmp_path: Path) -> None:
    """An LLM judge's judgements replay from the trail (its model is not called); a
    threshold raised since the recording makes the passing judgement fail."""
    agent = _agents()["llm_judged"]
    path = tmp_path / "t.jsonl"
    recorded = await record(agent, path)
    assert recorded.termination == tether.Termination.ANSWERED
    judge = agent.judge
    assert isinstance(judge, tether.LLMJudge)
    asked = judge.provider
    assert isinstance(asked, ScriptedProvider)
    # A judge model that must not be asked (priced as the recorded one).
    spare = ScriptedProvider([], record=True, cost_per_mtok=asked.cost_per_mtok)
    replayed = await tether.replay(
        str(path), attrs.evolve(agent, judge=attrs.evolve(judge, provider=spare))
    )
    assert replayed.identical, str(replayed)
    assert spare.requests == []
    strict = tether.LLMJudge(
        provider=spare,
        rubric={"clear": tether.Criterion(description="is it clear", threshold=0.95)},
    )
    d = (await tether.replay(str(path), attrs.evolve(agent, judge=strict))).divergence
    assert d is not None
    assert (d.round, d.stage) == (2, "judge")


async def test_a_sub_agents_own_run_replays(tmp_path: Path) -> None:
    """A sub-agent's run, picked out of the file by its id, replays identical against the
    child agent (its parent's id included)."""
    agents = _agents()
    path = tmp_path / "t.jsonl"
    await record(agents["subagent"], path)
    import json

    child_ids = [
        json.loads(line)["run_id"]
        for line in path.read_text().splitlines()
        if json.loads(line)["type"] == "RunStarted" and json.loads(line).get("parent_run_id")
    ]
    assert len(child_ids) == 1
    # The child agent the parent's tool ran (its code: the lookup tool; its provider's
    # answers come from the trail).
    child = tether.Agent(name="child", provider=ScriptedProvider([]), tools=[lookup])
    replayed = await tether.replay(str(path), child, run_id=child_ids[0])
    assert replayed.identical, str(replayed)


async def test_a_changed_model_shows_in_run_started(tmp_path: Path) -> None:
    """An agent whose model changed since the recording diverges at its RunStarted."""
    agent = _agents()["plain"]
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    other = attrs.evolve(agent, provider=ScriptedProvider([], model="scripted-2"))
    d = (await tether.replay(str(path), other)).divergence
    assert d is not None
    assert d.fields == ("model",)
    assert d.round == 0


async def test_a_parked_durable_run_replays_from_its_store(tmp_path: Path) -> None:
    """A durable run that parked for an approval and was resumed by another Runtime
    replays from the store identical (its RunResumed seam is not compared)."""
    store_path = str(tmp_path / "runs.db")
    agent = _agents()["approval"]
    async with tether.Runtime(store=tether.SQLiteRunStore(store_path), agents=[agent]) as rt:
        handle = rt.start(agent, "go")
        store = tether.SQLiteRunStore(store_path)
        while (run := await store.get(handle.run_id)) is None or run.status != "parked":  # noqa: ASYNC110 (the store is polled)
            await anyio.sleep(0.01)
    async with tether.Runtime(store=tether.SQLiteRunStore(store_path), agents=[agent]) as rt:
        await rt.approve(handle.run_id, "a1")
        await rt.reject(handle.run_id, "a2", "not Lima")
        result = await rt.handle(handle.run_id).result()
    assert any(isinstance(e, ev.RunResumed) for e in result.events)
    replayed = await tether.replay(tether.SQLiteRunStore(store_path), agent, run_id=handle.run_id)
    assert replayed.identical, str(replayed)


async def test_fork_checks_its_live_provider_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork whose live provider has no key fails at ``rt.fork``, as ``rt.start`` does."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    path = tmp_path / "t.jsonl"
    original = await record(_four_rounds(_Counting(FOUR)), path)
    agent = tether.Agent(name="four", provider=tether.providers.AnthropicProvider("claude-x"))
    async with tether.Runtime() as rt:
        with pytest.raises(tether.providers.AuthenticationFailed):
            await rt.fork(original.run_id, at_round=1, agent=agent, trail=str(path))


@attrs.frozen
class LongTrip:
    city: str
    days: int
    budget: int


async def test_typed_output_that_no_longer_validates(tmp_path: Path) -> None:
    """An output type that grew a field rejects the recorded final answer: the divergence
    is at that call's result."""
    agent = _agents()["typed"]
    path = tmp_path / "t.jsonl"
    recorded = await record(agent, path)
    assert recorded.output == Trip(city="Rome", days=3)
    changed = tether.Agent(name="typed", provider=agent.provider, output_type=LongTrip)
    d = (await tether.replay(str(path), changed)).divergence
    assert d is not None
    assert (d.round, d.stage) == (1, "execute")
    assert d.got is not None
    assert "budget: missing required field" in d.got["content"]


async def test_replay_passes_deps(tmp_path: Path) -> None:
    """A policy that reads ``ctx.deps`` replays identical with the run's deps."""

    def by_deps(point: tether.PolicyPoint, subject: Any, ctx: tether.RunContext[Any]) -> Any:
        if point == "tool_call" and subject.name in ctx.deps:
            return tether.Verdict.deny("listed")
        return None

    agent = attrs.evolve(_agents()["tools"], policies=[by_deps])
    path = tmp_path / "t.jsonl"
    sink = tether.JsonlSink(str(path))
    try:
        async with tether.Runtime(event_sink=sink) as rt:
            await rt.run(agent, "go", deps={"flaky"})
    finally:
        sink.close()
    assert (await tether.replay(str(path), agent, deps={"flaky"})).identical
    other = await tether.replay(str(path), agent, deps=set())
    assert other.divergence is not None
    assert (other.divergence.round, other.divergence.stage) == (2, "execute")


async def test_a_forks_live_tool_times_out_as_usual(tmp_path: Path) -> None:
    """A live tool of a fork that outlives its timeout ends ``timeout`` (the tools actor's
    deadline cut, through the played run's actor), and the fork goes on."""
    path = tmp_path / "t.jsonl"
    original = await record(_four_rounds(_Counting(FOUR)), path)

    @tether.tool(name="lookup", timeout_s=0.01)
    async def slow(city: str) -> str:
        """Too slow."""
        await anyio.sleep_forever()
        return city

    provider = ScriptedProvider([Reply(tool_calls=[_lookup("Z", "z1")]), Reply(text="gave up")])
    agent = tether.Agent(
        name="four", provider=provider, tools=[slow], limits=tether.Limits(max_tool_retries=0)
    )
    async with tether.Runtime() as rt:
        handle = await rt.fork(original.run_id, at_round=2, agent=agent, trail=str(path))
        result = await handle.result()
    finished = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    assert [(e.call_id, e.outcome) for e in finished] == [
        ("f1", "ok"),
        ("f2", "ok"),
        ("z1", "timeout"),
    ]
    assert result.output == "gave up"


async def test_cassette_with_approvals(tmp_path: Path) -> None:
    """Recording a cassette answers held calls with ``approve`` (Paris yes, Lima no);
    replaying gives the recorded answers, without asking."""
    from tether.testing import cassette

    agent = _agents()["approval"]
    asked: list[str] = []

    def approve(request: ev.ApprovalRequested) -> bool:
        asked.append(request.call_id)
        return bool(request.arguments["city"] == "Paris")

    recorded = await cassette("ok", directory=tmp_path).run(agent, "go", approve=approve)
    assert sorted(asked) == ["a1", "a2"]
    finished = {e.call_id: e.outcome for e in recorded.events if isinstance(e, ev.ToolCallFinished)}
    assert finished == {"a1": "ok", "a2": "denied"}
    replayed = await cassette("ok", directory=tmp_path).run(agent, "go", approve=approve)
    assert sorted(asked) == ["a1", "a2"]  # not asked again
    assert replayed.output == recorded.output


async def test_calls_cut_mid_stream_replay(tmp_path: Path) -> None:
    """A call a token ceiling cut mid-stream, and one a cancel cut, replay identical: the
    recorded usage crosses the ceiling again; the run is cancelled again with its reason."""
    long_text = "word " * 400
    ceiling = tether.Agent(
        name="ceiling",
        provider=ScriptedProvider(
            [Reply(text=long_text)], chunk_size=8, honor_max_tokens=False, chunk_latency_s=0.001
        ),
        limits=tether.Limits(max_total_tokens=60),
    )
    path = tmp_path / "ceiling.jsonl"
    result = await record(ceiling, path)
    assert result.termination == tether.Termination.TOKEN_CEILING
    replayed = await tether.replay(str(path), ceiling)
    assert replayed.identical, str(replayed)

    started = anyio.Event()

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        started.set()
        return Reply(text=long_text)

    slow = tether.Agent(
        name="slow", provider=ScriptedProvider(script, chunk_size=8, chunk_latency_s=3600)
    )
    path = tmp_path / "cancelled.jsonl"
    sink = tether.JsonlSink(str(path))
    try:
        async with tether.Runtime(event_sink=sink) as rt:
            handle = rt.start(slow, "go")
            await started.wait()
            await anyio.wait_all_tasks_blocked()
            handle.cancel("the user left")
            cancelled = await handle.result()
    finally:
        sink.close()
    assert cancelled.termination == tether.Termination.CANCELLED
    replayed = await tether.replay(str(path), slow)
    assert replayed.identical, str(replayed)
    assert replayed.result.termination == tether.Termination.CANCELLED


async def test_changed_instructions_and_a_removed_tool(tmp_path: Path) -> None:
    """An instructions function whose text changed diverges at RunStarted; a tool removed
    since the recording diverges at its call's result, in round 1's execute stage."""

    def instructions(ctx: tether.RunContext[Any]) -> str:
        return "be brief"

    agent = attrs.evolve(_agents()["tools"], instructions=instructions)
    path = tmp_path / "t.jsonl"
    await record(agent, path)
    assert (await tether.replay(str(path), agent)).identical
    wordy = attrs.evolve(agent, instructions=lambda ctx: "be wordy")
    d = (await tether.replay(str(path), wordy)).divergence
    assert d is not None
    assert (d.round, d.fields) == (0, ("instructions",))
    gone = attrs.evolve(agent, tools=[add, flaky])
    d = (await tether.replay(str(path), gone)).divergence
    assert d is not None
    assert (d.round, d.stage) == (1, "execute")
    assert d.got is not None
    assert d.got["call_id"] == "c2"


# ------------------------------------------------------------ any script

_CALLS = st.one_of(
    st.builds(lambda a, b: ("add", {"a": a, "b": b}), st.integers(-5, 5), st.integers(-5, 5)),
    st.builds(lambda c: ("lookup", {"city": c}), st.sampled_from(["Rome", "Oslo"])),
    st.builds(lambda x: ("flaky", {"x": x}), st.integers(-2, 2)),
    st.just(("add", {"a": "not a number"})),  # fails the tool's argument checks
    st.just(("missing", {})),  # no such tool
)
_ROUNDS = st.lists(st.lists(_CALLS, min_size=0, max_size=3), min_size=1, max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=_ROUNDS, deny=st.booleans(), backend=st.sampled_from(["asyncio", "trio"]))
def test_any_scripted_run_replays_identical(
    rounds: list[list[tuple[str, dict[str, Any]]]], deny: bool, backend: str
) -> None:
    """Whatever the script (tool calls good and bad, parallel or not, a tool that does not
    exist, a policy that denies), the run replays identical from its own events, and two
    replays give the same events."""
    script = [
        Reply(
            text=f"round {i}",
            tool_calls=[
                ToolCall(name=name, arguments=args, id=f"r{i}c{j}")
                for j, (name, args) in enumerate(calls)
            ],
        )
        for i, calls in enumerate(rounds)
    ]
    agent = tether.Agent(
        name="any",
        provider=ScriptedProvider([*script, Reply(text="done")]),
        tools=[add, lookup, flaky],
        policies=[_deny_flaky] if deny else [],
    )

    async def main() -> None:
        async with tether.Runtime() as rt:
            result = await rt.run(agent, "go")
        one = await tether.replay(result.events, agent)
        assert one.identical, str(one)
        two = await tether.replay(result.events, agent)
        assert [comparable(e) for e in one.events] == [comparable(e) for e in two.events]

    anyio.run(main, backend=backend)


async def test_a_fork_plays_recorded_approvals(tmp_path: Path) -> None:
    """The approvals of a fork's played rounds are answered as recorded (nobody is asked);
    its live rounds' approvals wait for the host as usual."""
    path = tmp_path / "t.jsonl"
    original = await record(_agents()["approval"], path)
    provider = ScriptedProvider([Reply(tool_calls=[_lookup("Kyiv", "k9")]), Reply(text="ok")])
    agent = tether.Agent(name="approval", provider=provider, tools=[lookup], policies=[_ask])
    async with tether.Runtime() as rt:
        handle = await rt.fork(original.run_id, at_round=1, agent=agent, trail=str(path))
        asked = []
        async for event in handle.events():
            if isinstance(event, ev.ApprovalRequested):
                asked.append(event.call_id)
                if event.round == 2:
                    handle.approve(event.call_id)
        result = await handle.result()
    assert asked == ["a1", "a2", "k9"]  # requested in the trail all three; answered: k9
    answers = [(e.call_id, e.approved) for e in result.events if isinstance(e, ev.ApprovalAnswered)]
    assert answers == [("a1", True), ("a2", False), ("k9", True)]
    assert result.output == "ok"
