"""The soak (docs/guides/limits.md): many varied runs with injected faults and random cancels.

``python -m benchmarks.soak [--runs 10000] [--faults 0.05] [--cancels 0.05]
[--stops 0.01] [--seed 0] [--concurrency 500] [--backend asyncio|trio|both]``

One :class:`tether.Runtime` per backend; ``--concurrency`` workers start runs
one after another, so at most that many are in flight. Every run gets an agent
of one of several kinds on the offline ``ScriptedProvider`` (0–20 ms latency per
model call, chunked streaming for some):

=============  =================================================================
kind           script
=============  =================================================================
``chat``       an answer
``tools``      1–3 rounds of tool calls (async ``fetch``, sync ``compute``,
               sometimes both in one round), then an answer
``judged``     a tool round, a draft the ``RuleJudge`` fails, then one it passes
``stubborn``   drafts the judge always fails (``max_quality_retries=1``)
``terminal``   a tool round, then the terminal tool ``submit``
``wander``     a new tool call every round under ``max_steps=3``
``tokens``     a long answer under ``max_total_tokens``
``slow``       slow model calls under ``timeout_s``
=============  =================================================================

Each model call is preceded, with probability ``--faults``, by one injected
fault: a transient provider error (``RateLimited``, ``ServerError``,
``StreamInterrupted`` or ``ConnectionDropped``, the last two after partial
output), a fatal one (``InvalidRequest``), or a provider bug (the script raises
``RuntimeError``, which tether reports as a ``ProviderBug``). Each tool call
fails with the same probability (``ToolError``, ``TransientToolError`` once or
always, ``FatalToolError``, or a plain ``RuntimeError``), and each judged draft
may make the judge's criterion raise.

``--cancels`` of the runs get ``handle.cancel()`` and ``--stops`` get
``handle.stop()``, at a random moment: 0–50 ms after the start, or at the k-th
event seen on ``handle.events()``.

Every run's result is checked (see :func:`check`): the event trail, usage
against the ``UsageCharged`` events, tool-call pairing, the cancel / stop
contract; and no task outlives the Runtime. The exit status is 1 when a run
ended ``crashed`` or an invariant was broken.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import attrs

import tether
from tether import events as ev
from tether.providers import (
    ConnectionDropped,
    Fault,
    InvalidRequest,
    ModelRequest,
    ProviderContext,
    RateLimited,
    Reply,
    ScriptedProvider,
    ServerError,
    StreamInterrupted,
    ToolCall,
)

KINDS = ("chat", "tools", "judged", "stubborn", "terminal", "wander", "tokens", "slow")
KIND_WEIGHTS = (15, 30, 20, 5, 10, 8, 6, 6)
PROVIDER_FAULTS = (
    "rate_limited",
    "server_error",
    "stream_interrupted",
    "connection_dropped",
    "invalid_request",
    "provider_bug",
)
TOOL_FAULTS = ("tool_error", "transient_once", "transient_always", "fatal", "tool_bug")
#: Keep at most this many violation descriptions.
MAX_SHOWN = 3


# ----------------------------------------------------------------------- tools

#: Tokens of ``transient_once`` calls that already failed once (they pass on retry).
_FAILED_ONCE: set[str] = set()


def _misbehave(mode: str, token: str) -> None:
    if mode == "tool_error":
        raise tether.ToolError("no such record; try another key")
    if mode == "transient_once":
        if token not in _FAILED_ONCE:
            _FAILED_ONCE.add(token)
            raise tether.TransientToolError("the backend timed out (once)")
        _FAILED_ONCE.discard(token)
    elif mode == "transient_always":
        raise tether.TransientToolError("the backend is down")
    elif mode == "fatal":
        raise tether.FatalToolError("credentials revoked")
    elif mode == "tool_bug":
        raise RuntimeError("a bug in the tool")


async def fetch(key: str, mode: str = "ok", token: str = "", delay_ms: int = 0) -> str:
    """Fetch a record by key (async)."""
    if delay_ms:
        await anyio.sleep(delay_ms / 1000)
    _misbehave(mode, token)
    return f"record {key}: 42"


def compute(a: int, b: int, mode: str = "ok", token: str = "") -> int:
    """Multiply two numbers (sync: runs in a worker thread)."""
    _misbehave(mode, token)
    return a * b


def submit(answer: str) -> str:
    """Hand in the final answer; this ends the run."""
    return answer


TOOLS = [tether.tool(fetch), tether.tool(compute), tether.tool(submit, terminal=True)]


# ----------------------------------------------------------------------- judge

PASS_MARK = "[ok]"
JUDGE_CRASH_MARK = "[judge-crash]"


def _checked(candidate: tether.Candidate) -> tuple[float, str]:
    if JUDGE_CRASH_MARK in candidate.text:
        raise RuntimeError("a bug in the judge")
    if PASS_MARK in candidate.text:
        return 1.0, "checked"
    return 0.2, f"mark a checked answer with {PASS_MARK}"


JUDGE = tether.RuleJudge({"checked": _checked})


# ------------------------------------------------------------------------ plan


class ProviderBugItem:
    """A script item that makes the script itself raise (not a ProviderError)."""

    __slots__ = ()


Item = Reply | Fault | ProviderBugItem


@attrs.define
class Plan:
    """One run: its agent, its script, what was injected, and the cancel/stop to send."""

    index: int
    kind: str
    agent: tether.Agent
    injected: list[str]
    #: ``None``, ``"cancel"`` or ``"stop"``.
    interrupt: str | None = None
    #: ``("delay", seconds)`` or ``("event", k)``.
    moment: tuple[str, float] = ("delay", 0.0)


class Script:
    """A scripted conversation: item ``i`` answers request ``i``; past the end, an answer."""

    __slots__ = ("items",)

    def __init__(self, items: list[Item]) -> None:
        self.items = items

    def __call__(self, request: ModelRequest, ctx: ProviderContext) -> Reply | Fault:
        if ctx.call_index >= len(self.items):
            return Reply(text=f"a late answer {PASS_MARK}")
        item = self.items[ctx.call_index]
        if isinstance(item, ProviderBugItem):
            raise RuntimeError("a bug in the provider's parser")
        return item


def _provider_fault(rng: random.Random, injected: list[str]) -> Item:
    name = rng.choice(PROVIDER_FAULTS)
    injected.append(name)
    partial = "partial output that never fin"
    if name == "rate_limited":
        return Fault(error=RateLimited("rate limited (injected)", status=429, retry_after=0.01))
    if name == "server_error":
        return Fault(error=ServerError("internal error (injected)", status=500))
    if name == "stream_interrupted":
        return Fault(error=StreamInterrupted("stream cut (injected)"), after_text=partial)
    if name == "connection_dropped":
        after = partial if rng.random() < 0.5 else ""
        return Fault(error=ConnectionDropped("connection reset (injected)"), after_text=after)
    if name == "invalid_request":
        return Fault(error=InvalidRequest("invalid request (injected)", status=400))
    return ProviderBugItem()


def _tool_call(rng: random.Random, p: Plan, faults: float, n: int) -> ToolCall:
    mode = "ok"
    if rng.random() < faults:
        mode = rng.choice(TOOL_FAULTS)
        p.injected.append(mode)
    token = f"{p.index}:{n}"
    if rng.random() < 0.5:
        args: dict[str, Any] = {
            "key": f"k{n}",
            "mode": mode,
            "token": token,
            "delay_ms": rng.randint(0, 5),
        }
        return ToolCall(name="fetch", arguments=args)
    return ToolCall(
        name="compute",
        arguments={"a": rng.randint(1, 9), "b": rng.randint(1, 9), "mode": mode, "token": token},
    )


def _tool_reply(rng: random.Random, p: Plan, faults: float, n: int) -> Reply:
    count = 2 if rng.random() < 0.3 else 1
    calls = [_tool_call(rng, p, faults, n * 10 + i) for i in range(count)]
    return Reply(text="let me check" if rng.random() < 0.5 else "", tool_calls=calls)


def _answer(rng: random.Random, p: Plan, faults: float, passing: bool = True) -> Reply:
    text = "the answer is 42, as the records show"
    if passing:
        text += f" {PASS_MARK}"
    if rng.random() < faults:
        p.injected.append("judge_crash")
        text += f" {JUDGE_CRASH_MARK}"
    return Reply(text=text)


def plan(index: int, seed: int, faults: float, cancels: float, stops: float) -> Plan:
    """The run number ``index`` of the soak: the same for a given seed, on both backends."""
    rng = random.Random(f"soak:{seed}:{index}")
    kind = rng.choices(KINDS, weights=KIND_WEIGHTS)[0]
    p = Plan(index=index, kind=kind, agent=None, injected=[])  # type: ignore[arg-type]
    limits = tether.Limits()
    judge: tether.RuleJudge | None = None
    latency = rng.uniform(0.0, 0.020)
    replies: list[Reply]
    if kind == "chat":
        replies = [_answer(rng, p, 0.0)]
    elif kind == "tools":
        rounds = rng.randint(1, 3)
        replies = [_tool_reply(rng, p, faults, n) for n in range(rounds)]
        replies.append(_answer(rng, p, 0.0))
    elif kind == "judged":
        judge = JUDGE
        replies = [
            _tool_reply(rng, p, faults, 0),
            _answer(rng, p, faults, passing=False),
            _answer(rng, p, faults),
        ]
    elif kind == "stubborn":
        judge = JUDGE
        limits = tether.Limits(max_quality_retries=1)
        replies = [_answer(rng, p, faults, passing=False) for _ in range(2)]
    elif kind == "terminal":
        hand_in = Reply(tool_calls=[ToolCall(name="submit", arguments={"answer": "42"})])
        replies = [_tool_reply(rng, p, faults, 0), hand_in]
    elif kind == "wander":
        limits = tether.Limits(max_steps=3)
        replies = [_tool_reply(rng, p, faults, n) for n in range(5)]
    elif kind == "tokens":
        limits = tether.Limits(max_total_tokens=rng.randint(40, 400))
        replies = [_tool_reply(rng, p, faults, 0), Reply(text="forty-two " * 200 + PASS_MARK)]
    else:  # slow
        limits = tether.Limits(timeout_s=rng.uniform(0.01, 0.06))
        latency = rng.uniform(0.005, 0.020)
        replies = [_tool_reply(rng, p, faults, n) for n in range(2)]
        replies.append(_answer(rng, p, 0.0))
    items: list[Item] = []
    for reply in replies:
        if rng.random() < faults:
            items.append(_provider_fault(rng, p.injected))
        items.append(reply)
    chunked = rng.random() < 0.5
    provider = ScriptedProvider(
        Script(items),
        latency_s=latency,
        chunk_size=rng.randint(8, 32) if chunked else None,
        chunk_latency_s=0.001 if chunked and rng.random() < 0.5 else 0.0,
    )
    p.agent = tether.Agent(
        name=f"soak-{kind}", provider=provider, tools=TOOLS, judge=judge, limits=limits
    )
    roll = rng.random()
    if roll < cancels:
        p.interrupt = "cancel"
    elif roll < cancels + stops:
        p.interrupt = "stop"
    if p.interrupt is not None:
        if rng.random() < 0.5:
            p.moment = ("delay", rng.uniform(0.0, 0.050))
        else:
            p.moment = ("event", float(rng.randint(0, 20)))
    return p


# ---------------------------------------------------------------------- checks


def consistency(result: tether.RunResult) -> list[str]:
    """What tests/helpers.py assert_consistent checks, as a list of problems."""
    problems: list[str] = []
    events = result.events
    if [e.seq for e in events] != list(range(len(events))):
        problems.append("event seq has gaps")
    finished = [e for e in events if isinstance(e, ev.RunFinished)]
    if len(finished) != 1:
        problems.append(f"{len(finished)} RunFinished events")
    if not events or not isinstance(events[-1], ev.RunFinished):
        problems.append("the last event is not RunFinished")
    elif events[-1].termination != result.termination:
        problems.append(
            f"RunFinished says {events[-1].termination}, the result {result.termination}"
        )
    charges = [e for e in events if isinstance(e, ev.UsageCharged)]
    charged = (sum(c.input_tokens for c in charges), sum(c.output_tokens for c in charges))
    usage = (result.usage.input_tokens, result.usage.output_tokens)
    if charged != usage:
        problems.append(f"usage {usage} != charged {charged}")
    started = sorted(e.call_id for e in events if isinstance(e, ev.ToolCallStarted))
    ended = sorted(e.call_id for e in events if isinstance(e, ev.ToolCallFinished))
    if started != ended:
        problems.append(f"tool calls started {started} != finished {ended}")
    blocks = [b for m in result.messages for b in m.content]
    uses = sorted(b.id for b in blocks if isinstance(b, tether.providers.ToolUseBlock))
    results = sorted(
        b.tool_use_id for b in blocks if isinstance(b, tether.providers.ToolResultBlock)
    )
    if uses != results:
        problems.append(f"tool_use {uses} != tool_result {results}")
    return problems


@attrs.define
class Sent:
    """A cancel or stop as sent: when (``time.time()``, the clock of event ``at``)."""

    what: str
    at: float
    done_before: bool


def interrupt_problems(result: tether.RunResult, sent: Sent) -> tuple[str, list[str]]:
    """How the run answered a cancel / stop: ``(outcome, problems)``.

    The outcome is ``honoured``, ``already_done`` (finished before it was sent),
    ``decided`` (the loop had decided its ending before the cancel landed, which
    tether keeps), ``ended_in_round`` (a stop in the round that ended the run
    anyway) or ``lost`` (a violation: the run went on to another ending).
    """
    if sent.done_before:
        return "already_done", []
    events = result.events
    if sent.what == "cancel":
        if result.termination is tether.Termination.CANCELLED and result.error == "soak cancel":
            return "honoured", []
        decided = any(
            isinstance(e, ev.Transition) and e.kind == "complete" and e.at <= sent.at
            for e in events
        )
        if decided:
            return "decided", []
        return "lost", [
            f"cancelled while running, ended {result.termination.value} ({result.error!r})"
        ]
    # stop: the round in flight finishes, then the run ends cancelled "stopped".
    rounds_before = [e.round for e in events if e.at <= sent.at]
    stop_round = max([1, *rounds_before])
    last_round = events[-1].round if events else 0
    if result.termination is tether.Termination.CANCELLED and result.error == "stopped":
        if last_round > stop_round:
            return "lost", [f"stopped in round {stop_round}, ended in round {last_round}"]
        return "honoured", []
    if last_round <= stop_round:
        return "ended_in_round", []
    return "lost", [
        f"stopped in round {stop_round}, ended {result.termination.value} in round {last_round}"
    ]


# --------------------------------------------------------------------- the soak


@attrs.define
class Tally:
    backend: str
    runs: int = 0
    terminations: Counter[str] = attrs.field(factory=Counter)
    injected: Counter[str] = attrs.field(factory=Counter)
    interrupts: Counter[str] = attrs.field(factory=Counter)
    violations: int = 0
    shown: list[str] = attrs.field(factory=list)
    crashed: list[str] = attrs.field(factory=list)
    leaked: list[str] = attrs.field(factory=list)
    #: Runs lost when an exception escaped the Runtime, and what escaped.
    lost: int = 0
    runtime_deaths: list[str] = attrs.field(factory=list)
    wall_s: float = 0.0

    def violation(self, text: str) -> None:
        self.violations += 1
        if len(self.shown) < MAX_SHOWN:
            self.shown.append(text)

    @property
    def ok(self) -> bool:
        return not self.crashed and not self.violations and not self.terminations["crashed"]


def describe(p: Plan, result: tether.RunResult) -> str:
    return (
        f"run #{p.index} ({result.run_id}) kind={p.kind} injected={p.injected or '-'} "
        f"interrupt={p.interrupt or '-'} termination={result.termination.value} "
        f"error={result.error!r} summary: {result.summary()}"
    )


async def one_run(rt: tether.Runtime, p: Plan, tally: Tally) -> None:
    handle = rt.start(p.agent, f"soak question {p.index}")
    sent: Sent | None = None
    seen: list[ev.Event] | None = None

    def send() -> Sent:
        done = handle.done
        if p.interrupt == "cancel":
            handle.cancel("soak cancel")
        else:
            handle.stop()
        return Sent(p.interrupt or "", time.time(), done)

    how, value = p.moment
    if p.interrupt is not None and how == "delay":
        await anyio.sleep(value)
        sent = send()
    elif p.interrupt is not None:
        seen = []
        async for event in handle.events():
            seen.append(event)
            if sent is None and len(seen) > value:
                sent = send()
        if sent is None:
            sent = send()
    result = await handle.result()

    tally.runs += 1
    tally.terminations[result.termination.value] += 1
    tally.injected.update(p.injected)
    problems = consistency(result)
    if seen is not None and seen != list(result.events):
        problems.append("handle.events() saw a different trail than the result's")
    if sent is not None:
        outcome, more = interrupt_problems(result, sent)
        tally.interrupts[f"{sent.what}s sent"] += 1
        tally.interrupts[f"{sent.what} {outcome}"] += 1
        problems += more
    if result.termination is tether.Termination.CRASHED:
        tally.crashed.append(describe(p, result))
    if problems:
        tally.violation(f"{describe(p, result)}: {'; '.join(problems)}")


def _leaves(exc: BaseException) -> str:
    """The leaf exceptions of a (nested) exception group, with where each was raised."""
    if isinstance(exc, BaseExceptionGroup):
        return ", ".join(_leaves(e) for e in exc.exceptions)
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        where = f" at {'/'.join(tb.tb_frame.f_code.co_filename.rsplit('/', 2)[-2:])}:{tb.tb_lineno}"
        tb = tb.tb_next
    return f"{type(exc).__name__}({exc}){where}"


def _task_names() -> set[str]:
    return {f"{t.name}#{t.id}" for t in anyio.get_running_tasks()}


async def soak(
    backend: str,
    *,
    runs: int,
    faults: float,
    cancels: float,
    stops: float,
    seed: int,
    concurrency: int,
) -> Tally:
    tally = Tally(backend)
    plans = iter(range(runs))
    before = _task_names()
    started = time.perf_counter()

    async def worker(rt: tether.Runtime, in_flight: set[int]) -> None:
        for index in plans:
            in_flight.add(index)
            await one_run(rt, plan(index, seed, faults, cancels, stops), tally)
            in_flight.discard(index)

    # One Runtime; should an exception escape it (a bug: a run's failure must
    # never reach the Runtime's task group), it is recorded and the remaining
    # runs go on in a fresh Runtime, so one bug does not hide the others.
    while tally.runs + tally.lost < runs:
        progress = tally.runs + tally.lost
        in_flight: set[int] = set()
        try:
            async with tether.Runtime() as rt, anyio.create_task_group() as tg:
                for _ in range(min(concurrency, runs)):
                    tg.start_soon(worker, rt, in_flight)
        except Exception as exc:
            tally.lost += len(in_flight)
            tally.runtime_deaths.append(_leaves(exc))
            tally.violation(
                f"the Runtime raised {_leaves(exc)}; {len(in_flight)} runs in flight lost "
                f"(#{', #'.join(map(str, sorted(in_flight)[:5]))}...)"
            )
        if tally.runs + tally.lost == progress:
            break
    tally.wall_s = time.perf_counter() - started
    await anyio.lowlevel.checkpoint()
    tally.leaked = sorted(_task_names() - before)
    if tally.leaked:
        tally.violation(f"{len(tally.leaked)} tasks outlived the Runtime: {tally.leaked[:5]}")
    return tally


# ---------------------------------------------------------------------- report


def table(tallies: Sequence[Tally]) -> str:
    """The tally as a Markdown table, one column per backend."""
    rows: list[tuple[str, list[str]]] = [
        ("runs", [f"{t.runs:,}" for t in tallies]),
    ]
    names = sorted({n for t in tallies for n in t.terminations} - {"crashed"})
    for name in names:
        rows.append((f"`{name}`", [f"{t.terminations[name]:,}" for t in tallies]))
    rows.append(("**crashed**", [f"**{t.terminations['crashed']}**" for t in tallies]))
    rows.append(("invariant violations", [str(t.violations) for t in tallies]))
    rows.append(("tasks leaked", [str(len(t.leaked)) for t in tallies]))
    rows.append(
        (
            "exceptions out of the Runtime (runs lost)",
            [f"{len(t.runtime_deaths)} ({t.lost})" for t in tallies],
        )
    )
    faults = sorted({n for t in tallies for n in t.injected})
    total = [sum(t.injected.values()) for t in tallies]
    rows.append(("faults injected", [f"{n:,}" for n in total]))
    for name in faults:
        rows.append((f"  {name}", [f"{t.injected[name]:,}" for t in tallies]))
    for what in ("cancel", "stop"):
        rows.append(
            (
                f"{what}s sent / honoured",
                [
                    f"{t.interrupts[f'{what}s sent']} / {t.interrupts[f'{what} honoured']}"
                    for t in tallies
                ],
            )
        )
        others = sorted(
            {
                k
                for t in tallies
                for k in t.interrupts
                if k.startswith(f"{what} ") and k != f"{what} honoured"
            }
        )
        for k in others:
            rows.append((f"  {k}", [str(t.interrupts[k]) for t in tallies]))
    rows.append(("wall time", [f"{t.wall_s:.1f} s" for t in tallies]))
    lines = [
        "| | " + " | ".join(t.backend for t in tallies) + " |",
        "|---|" + "---|" * len(tallies),
    ]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--faults", type=float, default=0.05)
    parser.add_argument("--cancels", type=float, default=0.05)
    parser.add_argument("--stops", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=500)
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    args = parser.parse_args(argv)
    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    tallies: list[Tally] = []
    for backend in backends:

        async def go(backend: str = backend) -> Tally:
            return await soak(
                backend,
                runs=args.runs,
                faults=args.faults,
                cancels=args.cancels,
                stops=args.stops,
                seed=args.seed,
                concurrency=args.concurrency,
            )

        tally = anyio.run(go, backend=backend)
        tallies.append(tally)
        print(
            f"{backend}: {tally.runs} runs in {tally.wall_s:.1f} s, "
            f"{tally.terminations['crashed']} crashed, {tally.violations} violations",
            flush=True,
        )
    print()
    print(table(tallies))
    failed = False
    for t in tallies:
        for text in t.runtime_deaths:
            print(f"\n{t.backend} EXCEPTION OUT OF THE RUNTIME: {text}")
        for text in t.crashed[:MAX_SHOWN]:
            print(f"\n{t.backend} CRASHED: {text}")
        for text in t.shown:
            print(f"\n{t.backend} VIOLATION: {text}")
        failed = failed or not t.ok
    print("\nsoak: " + ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
