"""The offline demo scenario: many agents on the ``ScriptedProvider``.

Every agent asks about a topic, calls tools (``lookup``, async; ``calc``,
sync, so it runs in a worker thread) and answers; a ``RuleJudge`` wants the
answer to cite its source. Each agent follows one of a few scripted paths,
chosen deterministically from its index and the seed, so that the tally shows
several termination reasons:

========================  ==================================================  =================
path                      script                                              ends
========================  ==================================================  =================
``plain``                 lookup → calc → cited answer                        answered
``parallel``              lookup + calc in one round → cited answer           answered
``judged_retry``          lookup → uncited draft (judge ✗) → cited (✓)        answered
``transient``             an overloaded fault (retried) → lookup → answer     answered
``terminal``              lookup → ``submit`` (a terminal tool)               terminal_tool
``refusal``               a scripted refusal                                  refusal
``wandering``             a new lookup every round, ``max_steps=3``           max_steps
``stubborn``              two uncited drafts, ``max_quality_retries=1``       quality_exhausted
========================  ==================================================  =================

About a quarter of the agents take ``judged_retry``. The scripted latency
varies per agent (10 to 50 ms per model call by default), so the runs overlap.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

import anyio
import attrs

from tether.actors import ToolSpec, tool
from tether.providers import (
    Fault,
    Overloaded,
    Price,
    Reply,
    ScriptedProvider,
    StopReason,
    ToolCall,
)
from tether.runtime import Agent, Candidate, Limits, RuleJudge

Path = Literal[
    "plain",
    "parallel",
    "judged_retry",
    "transient",
    "terminal",
    "refusal",
    "wandering",
    "stubborn",
]

PRICE = Price(input=3.0, output=15.0)

TOPICS = (
    "the boiling point of water at altitude",
    "the speed of sound in air",
    "the tallest mountain on Earth",
    "the half-life of carbon-14",
    "the distance from the Earth to the Moon",
    "the population of Iceland",
    "the melting point of iron",
    "the length of the Nile",
    "the depth of the Mariana Trench",
    "the orbital period of Mars",
)

FACTS = {
    "the boiling point of water at altitude": "water boils near 93 °C at 2,000 m",
    "the speed of sound in air": "sound travels about 343 m/s in dry air at 20 °C",
    "the tallest mountain on Earth": "Mount Everest rises 8,849 m above sea level",
    "the half-life of carbon-14": "carbon-14 has a half-life of about 5,730 years",
    "the distance from the Earth to the Moon": "the Moon is about 384,400 km away on average",
    "the population of Iceland": "Iceland has about 390,000 inhabitants",
    "the melting point of iron": "iron melts at 1,538 °C",
    "the length of the Nile": "the Nile is about 6,650 km long",
    "the depth of the Mariana Trench": "the Challenger Deep is about 10,935 m deep",
    "the orbital period of Mars": "Mars orbits the Sun every 687 Earth days",
}

#: Where the uncommon paths sit in every block of 40 agents; the rest are
#: ``judged_retry`` (one in four) or ``plain``/``parallel``.
_SPECIAL: dict[int, Path] = {
    3: "transient",
    11: "refusal",
    17: "wandering",
    23: "terminal",
    31: "stubborn",
    37: "transient",
}


@attrs.frozen(kw_only=True)
class DemoAgent:
    """One agent of the demo and the input it gets."""

    index: int
    run_id: str
    path: Path
    agent: Agent
    input: str


async def lookup(topic: str) -> str:
    """Look a topic up in the reference notes; returns one sentence."""
    await anyio.sleep(0.005)
    return FACTS.get(topic, f"no notes on {topic!r}")


def calc(a: float, b: float, op: Literal["+", "-", "*", "/"] = "*") -> float:
    """Compute ``a op b``."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise ValueError("division by zero; pick another divisor")
    return a / b


def submit(answer: str) -> str:
    """Hand in the final answer; this ends the run."""
    return answer


LOOKUP: ToolSpec = tool(lookup)
CALC: ToolSpec = tool(calc)
SUBMIT: ToolSpec = tool(submit, terminal=True)


def _cites_source(candidate: Candidate) -> tuple[float, str]:
    if "[source:" in candidate.text:
        return 0.92, "cites its source"
    return 0.35, "the answer cites no source; end it with [source: <tool>]"


def _concise(candidate: Candidate) -> tuple[float, str]:
    words = len(candidate.text.split())
    if words <= 60:
        return 1.0, f"{words} words"
    return 0.5, f"{words} words; keep it under 60"


JUDGE = RuleJudge({"cites_source": _cites_source, "concise": _concise}, threshold=0.7)


def paths(count: int, seed: int) -> list[Path]:
    """The path of each agent: the same counts for a given ``count``, shuffled by ``seed``."""
    chosen: list[Path] = []
    for i in range(count):
        special = _SPECIAL.get(i % 40)
        if special is not None:
            chosen.append(special)
        elif i % 4 == 1:
            chosen.append("judged_retry")
        else:
            chosen.append("parallel" if i % 3 == 0 else "plain")
    random.Random(seed).shuffle(chosen)
    return chosen


def _script(path: Path, topic: str, rng: random.Random) -> list[Reply | Fault]:
    fact = FACTS[topic]
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    look = ToolCall(name="lookup", arguments={"topic": topic})
    mult = ToolCall(name="calc", arguments={"a": a, "b": b, "op": "*"})
    answer = Reply(text=f"In short: {fact}. (Also, {a} × {b} = {a * b}.) [source: lookup]")
    draft = Reply(text=f"I believe {fact}.")
    if path == "plain":
        return [
            Reply(text="Let me look that up.", tool_calls=[look]),
            Reply(tool_calls=[mult]),
            answer,
        ]
    if path == "parallel":
        return [Reply(text="Checking two things at once.", tool_calls=[look, mult]), answer]
    if path == "judged_retry":
        return [Reply(tool_calls=[look]), draft, answer]
    if path == "transient":
        overloaded = Overloaded("overloaded (scripted)", status=529)
        return [Fault(error=overloaded), Reply(tool_calls=[look]), answer]
    if path == "terminal":
        hand_in = ToolCall(name="submit", arguments={"answer": f"{fact} [source: lookup]"})
        return [Reply(tool_calls=[look]), Reply(tool_calls=[hand_in])]
    if path == "refusal":
        return [Reply(text="I can't help with that request.", stop_reason=StopReason.REFUSAL)]
    if path == "wandering":
        others = [t for t in TOPICS if t != topic]
        return [
            Reply(tool_calls=[ToolCall(name="lookup", arguments={"topic": t})])
            for t in [topic, *others[:4]]
        ]
    # stubborn: never cites its source
    return [Reply(tool_calls=[look]), draft, Reply(text=f"As I said, {fact}.")]


#: Characters per streamed chunk of the scripted answers.
CHUNK_CHARS = 6


def build(count: int, *, seed: int = 0, latency_scale: float = 1.0) -> Sequence[DemoAgent]:
    """The demo's agents, deterministic for ``(count, seed)``."""
    if count < 1:
        raise ValueError(f"the demo needs at least one agent, got {count}")
    rng = random.Random(seed)
    width = max(3, len(str(count - 1)))
    agents: list[DemoAgent] = []
    for i, path in enumerate(paths(count, seed)):
        topic = TOPICS[rng.randrange(len(TOPICS))]
        latency = rng.uniform(0.010, 0.050) * latency_scale
        # Streamed in small chunks, so the live view has text to show as it arrives.
        provider = ScriptedProvider(
            _script(path, topic, rng),
            latency_s=latency,
            chunk_size=CHUNK_CHARS,
            chunk_latency_s=latency / 10,
            cost_per_mtok=PRICE,
        )
        limits = Limits(max_steps=6, max_quality_retries=2, timeout_s=30)
        if path == "wandering":
            limits = attrs.evolve(limits, max_steps=3)
        elif path == "stubborn":
            limits = attrs.evolve(limits, max_quality_retries=1)
        agent = Agent(
            name="demo-researcher",
            instructions="Answer briefly. Use the tools. Cite your source as [source: <tool>].",
            provider=provider,
            tools=[LOOKUP, CALC, SUBMIT],
            judge=JUDGE,
            limits=limits,
            discovery="off",
        )
        agents.append(
            DemoAgent(
                index=i,
                run_id=f"agent-{i:0{width}d}",
                path=path,
                agent=agent,
                input=f"What do you know about {topic}?",
            )
        )
    return agents


__all__ = ["DemoAgent", "build", "paths"]
