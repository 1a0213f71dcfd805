"""``python -m benchmarks.ray_failover [--lease 2] [--host-timeout 2] [--backend asyncio|trio]``.

How long a :class:`tether.ray.RayRuntime`'s failover takes, by kind of death
(docs/guides/ray.md, "Failover"). A 2-host fleet with an SQLite store shared
by the hosts; 3 runs on each host (8 tool rounds of 0.3 s each, a checkpoint
after each); once two rounds are checkpointed, host 0's process is:

* ``sigkill``: SIGKILLed, and not restarted by Ray (``max_restarts=0``);
* ``sigkill-restarted``: SIGKILLed, and restarted by Ray (``max_restarts=1``);
* ``sigstop``: SIGSTOPped (alive to Ray, answering nothing), SIGCONT at the end.

For each it prints, over the dead host's 3 runs, the time from the kill to the
run's ``RunResumed`` seam on the host that took it over (the resume), and to the
moment the caller blocked in ``result()`` had the answer, and checks that every
run answered once (exit status 1 if not; never for a timing). The bound stated
in the docs is ``lease_s`` (the lease runs out) + ``lease_s / 3`` (the surviving
hosts look for claimable runs at that pace); the callers' side adds at most
``host_timeout_s`` + 0.5 s to stop waiting on a host that does not answer.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall

DEATHS = {
    "sigkill": (signal.SIGKILL, 0),
    "sigkill-restarted": (signal.SIGKILL, 1),
    "sigstop": (signal.SIGSTOP, 0),
}


@tether.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _walker() -> tether.Agent:
    def script(request: Any, ctx: Any) -> Reply:
        if ctx.call_index < 8:
            return Reply(tool_calls=[ToolCall(name="add", arguments={"a": ctx.call_index, "b": 1})])
        return Reply(text="walked")

    provider = ScriptedProvider(script, latency_s=0.3)
    return tether.Agent(name="walker", provider=provider, tools=[add])


async def _one(death: str, lease_s: float, host_timeout_s: float, db: Path) -> list[str]:
    from tether.ray import RayRuntime

    sig, restarts = DEATHS[death]
    agent = _walker()
    store = tether.SQLiteRunStore(db, poll_s=0.05)
    problems: list[str] = []
    async with RayRuntime(
        hosts=2,
        agents=[agent],
        store=store,
        lease_s=lease_s,
        host_timeout_s=host_timeout_s,
        host_options={"max_restarts": restarts},
    ) as rt:
        doomed = [rt.start(agent, f"doomed {i}", host=0) for i in range(3)]
        safe = [rt.start(agent, f"safe {i}", host=1) for i in range(3)]
        victim = rt.hosts[0]
        assert victim is not None
        answered: dict[str, float] = {}
        results: dict[str, tether.RunResult[Any]] = {}
        killed = 0.0
        killed_wall = 0.0

        async def wait(handle: Any) -> None:
            results[handle.run_id] = await handle.result()
            answered[handle.run_id] = time.monotonic()

        try:
            async with anyio.create_task_group() as tg:
                for handle in doomed + safe:
                    tg.start_soon(wait, handle)
                async for event in doomed[0].events():
                    if isinstance(event, ev.ToolCallFinished) and event.round >= 2:
                        break
                killed, killed_wall = time.monotonic(), time.time()
                os.kill(victim.pid, sig)
        finally:
            if sig == signal.SIGSTOP:
                os.kill(victim.pid, signal.SIGCONT)
    resumes, answers = [], []
    for handle in doomed:
        result = results[handle.run_id]
        seams = [e for e in result.events if isinstance(e, ev.RunResumed)]
        if result.termination is not tether.Termination.ANSWERED or len(seams) != 1:
            problems.append(f"{death}: {handle.run_id} ended {result.termination.value}")
            continue
        resumes.append(seams[0].at - killed_wall)
        answers.append(answered[handle.run_id] - killed)
    for handle in safe:
        if results[handle.run_id].termination is not tether.Termination.ANSWERED:
            problems.append(f"{death}: the other host's {handle.run_id} did not answer")
    if resumes:
        print(
            f"{death:<18} resumed {min(resumes):5.2f}-{max(resumes):5.2f} s after the kill, "
            f"answered {min(answers):5.2f}-{max(answers):5.2f} s after it"
        )
    return problems


async def _main(args: argparse.Namespace) -> int:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    print(
        f"lease_s={args.lease:g}, host_timeout_s={args.host_timeout:g}, caller on {args.backend}; "
        f"a run's remaining work after the kill is up to 6 rounds of 0.3 s"
    )
    problems: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n, death in enumerate(DEATHS):
                problems += await _one(death, args.lease, args.host_timeout, Path(tmp) / f"{n}.db")
    finally:
        ray.shutdown()
    for problem in problems:
        print("FAILED:", problem)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_failover")
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--host-timeout", type=float, default=2.0)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args(argv)
    return anyio.run(_main, args, backend=args.backend)


if __name__ == "__main__":
    sys.exit(main())
