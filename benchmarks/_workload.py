"""The benchmark workload, the bare loop it is compared with, verification, and RSS probes.

The reference workload: ``R`` rounds. In rounds ``1..R-1`` the model asks for
one call of the async tool ``add(a, b)`` with ``a = b = round``; in round ``R``
it answers :data:`FINAL_TEXT`. The model awaits ``anyio.sleep(L)`` per call;
``ScriptedProvider`` skips a zero latency entirely.

The bare loop does the identical work with nothing around it: one coroutine
per run that, for each round, awaits the "model" (``anyio.sleep(L)``, also at
``L == 0``: one checkpoint, so concurrent bare runs really interleave), calls
the same ``add`` coroutine function, and checks the final text. No channels,
no events, no child tasks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import anyio

import tether
from tether import events as ev
from tether.providers import ModelRequest, ProviderContext, Reply, ScriptedProvider, ToolCall

#: The text of the last round's reply; every run must end with it.
FINAL_TEXT = "all sums done"
#: Every run's input.
QUESTION = "please add these numbers"
#: "Forever" for a model call that parks a run (B4, B5): far beyond any benchmark.
PARK_S = 1_000_000.0
#: Keep at most this many problem descriptions per benchmark.
MAX_PROBLEMS = 5


class Tally:
    """Counts executions of :func:`add`, so verification counts real calls."""

    __slots__ = ("executions",)

    def __init__(self) -> None:
        self.executions = 0


TALLY = Tally()


async def add(a: int, b: int) -> int:
    """Add two integers."""
    TALLY.executions += 1
    return a + b


#: The same function as a tether tool (the bare loop calls :func:`add` directly).
ADD_TOOL = tether.tool(add)


# ------------------------------------------------------------------- tether side


def script(rounds: int) -> list[Reply]:
    """The scripted replies of one run: ``rounds - 1`` tool calls, then the text."""
    calls = [
        Reply(tool_calls=(ToolCall(name="add", arguments={"a": i, "b": i}),))
        for i in range(1, rounds)
    ]
    return [*calls, Reply(text=FINAL_TEXT)]


def agent(rounds: int, latency_s: float) -> tether.Agent:
    """The agent every throughput benchmark runs."""
    return tether.Agent(
        name="bench",
        provider=ScriptedProvider(script(rounds), latency_s=latency_s),
        tools=[ADD_TOOL],
        limits=tether.Limits(max_steps=rounds + 1),
    )


class Parking:
    """Counts runs that reached the model call; an event fires when ``target`` have."""

    __slots__ = ("all_parked", "parked", "target")

    def __init__(self, target: int) -> None:
        self.target = target
        self.parked = 0
        self.all_parked = anyio.Event()

    def arrive(self) -> None:
        self.parked += 1
        if self.parked >= self.target:
            self.all_parked.set()


def parking_agent(parking: Parking) -> tether.Agent:
    """An agent whose first model call never returns (the provider sleeps :data:`PARK_S`).

    The script is a callable, which ``ScriptedProvider`` calls before its
    latency sleep: the moment a run is counted, it is inside the model call.
    """

    def park(request: ModelRequest, ctx: ProviderContext) -> Reply:
        parking.arrive()
        return Reply(text=FINAL_TEXT)

    return tether.Agent(
        name="parked",
        provider=ScriptedProvider(park, latency_s=PARK_S),
        tools=[ADD_TOOL],
    )


# --------------------------------------------------------------------- bare side

#: One bare round: the arguments of an ``add`` call, or the final text.
BareStep = tuple[int, int] | str


def bare_script(rounds: int) -> list[BareStep]:
    steps: list[BareStep] = [(i, i) for i in range(1, rounds)]
    steps.append(FINAL_TEXT)
    return steps


async def bare_run(
    steps: Sequence[BareStep], latency_s: float, await_model: bool = True
) -> str | None:
    """One run of the bare loop; returns a problem, or ``None`` when verified.

    The "model" is ``await anyio.sleep(latency_s)``, awaited at ``L == 0`` too
    (one checkpoint per round, as any loop that lets other runs proceed has);
    without ``await_model`` it is skipped at ``L == 0`` (B1 reports both).
    """
    text: str | None = None
    executions = 0
    for step in steps:
        if latency_s or await_model:
            await anyio.sleep(latency_s)
        if isinstance(step, str):
            text = step
        else:
            a, b = step
            if await add(a, b) != a + b:
                return f"add({a}, {b}) gave a wrong sum"
            executions += 1
    if text != FINAL_TEXT:
        return f"final text {text!r}"
    if executions != len(steps) - 1:
        return f"{executions} tool executions, expected {len(steps) - 1}"
    return None


# ------------------------------------------------------------------ verification


class Problems:
    """The problems verification found: a count and the first few descriptions."""

    __slots__ = ("count", "items")

    def __init__(self) -> None:
        self.count = 0
        self.items: list[str] = []

    def add(self, problem: str | None) -> None:
        if problem is None:
            return
        self.count += 1
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(problem)

    def as_list(self) -> list[str]:
        more = self.count - len(self.items)
        return [*self.items, f"... and {more} more"] if more > 0 else list(self.items)


def check_answered(result: tether.RunResult, rounds: int) -> str | None:
    """A finished workload run: answered, the final text, ``rounds - 1`` correct tool calls."""
    rid = result.run_id
    if result.termination is not tether.Termination.ANSWERED:
        return f"{rid}: termination {result.termination.value} ({result.error})"
    if result.output != FINAL_TEXT:
        return f"{rid}: output {result.output!r}"
    finished = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    if len(finished) != rounds - 1 or result.usage.tool_calls != rounds - 1:
        return f"{rid}: {len(finished)} tool calls finished, expected {rounds - 1}"
    for i, event in enumerate(finished, start=1):
        if event.outcome != "ok" or event.content != str(i + i):
            return f"{rid}: round {i} tool call {event.outcome} {event.content!r}"
    return check_trail(result)


def check_cancelled(result: tether.RunResult) -> str | None:
    """A parked run cancelled from outside: ``cancelled``, one ``RunFinished`` at the end."""
    if result.termination is not tether.Termination.CANCELLED:
        return f"{result.run_id}: termination {result.termination.value}, expected cancelled"
    return check_trail(result)


def check_trail(result: tether.RunResult) -> str | None:
    events = result.events
    if not events or not isinstance(events[-1], ev.RunFinished):
        return f"{result.run_id}: the last event is not RunFinished"
    if sum(isinstance(e, ev.RunFinished) for e in events) != 1:
        return f"{result.run_id}: more than one RunFinished"
    if events[-1].seq != len(events) - 1:
        return f"{result.run_id}: event seq has gaps"
    return None


def check_tally(expected: int) -> str | None:
    if TALLY.executions != expected:
        return f"add() ran {TALLY.executions} times, expected {expected}"
    return None


# -------------------------------------------------------------------- RSS probes


def current_rss_kb() -> float | None:
    """Resident set size now, from ``/proc/self/statm`` (Linux); ``None`` elsewhere."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            resident_pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 1024


def reset_peak_rss() -> bool:
    """Reset the kernel's peak RSS (``VmHWM``) to the RSS now; ``False`` where unsupported.

    Writes ``5`` to ``/proc/self/clear_refs`` (Linux 4.0+), so a later
    :func:`peak_rss_kb` shows the peak of what ran after this call only.
    """
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def peak_rss_kb() -> float | None:
    """The peak resident set size: ``VmHWM`` from ``/proc/self/status`` (Linux).

    Elsewhere, ``getrusage``'s ``ru_maxrss``. Not ``ru_maxrss`` on Linux: it is
    the larger of this image's peak and the peak of the image it replaced at
    ``exec``, and ``subprocess`` starts children with ``vfork`` + ``exec``, so
    a child's ``ru_maxrss`` would report the parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])  # kB
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform == "darwin" else float(peak)  # bytes on macOS
