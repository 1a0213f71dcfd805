"""The crash-and-resume test of a run store (docs/guides/durable.md), reusable for any store.

:func:`crash_and_resume` starts :data:`~tests.crash_worker.RUNS` runs in a
subprocess (:mod:`tests.crash_worker`), kills it with SIGKILL at a random
moment, resumes in a second process, kills that one too at a random moment,
finishes in a third, and then checks, for every run, from the store alone:

* it finished, with exactly one ``RunFinished``, the last event;
* ``seq`` is gap-free from 0 across every ``RunResumed`` seam;
* its usage is the sum of its stored ``UsageCharged`` events;
* no tool call ran again after the store had accepted its result (a finished
  call), and every call of the answered run ran at least once.

A store's test module calls it with ``"module:function"``, a function of one
string that makes the store (in the worker processes and here), and that
string: a SQLite path, a PostgreSQL DSN.
"""

from __future__ import annotations

import importlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import attrs

import tether
from tether import events as ev

from . import crash_worker as worker

ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Tally:
    """What a crash test saw (for the README and the closing note)."""

    runs: int
    resumed: int
    seams: int
    reruns_of_unfinished_calls: int
    calls: int


def spawn_worker(module: str, workdir: Path, *argv: str) -> subprocess.Popen[bytes]:
    """``python -m module *argv`` from the repository root, its stderr in a file of
    ``workdir`` (``argv[0]``, the phase, names it; :func:`_errors` reads them all)."""
    # stderr to a file: a pipe of a killed process would be left open.
    with (workdir / f"{argv[0]}-{time.monotonic_ns()}.err").open("wb") as err:
        return subprocess.Popen([sys.executable, "-m", module, *argv], cwd=ROOT, stderr=err)


def log_lines(workdir: Path) -> list[str]:
    """The lines a worker logged (its ``log`` file in ``workdir``), none if none yet."""
    path = workdir / "log"
    return path.read_text().splitlines() if path.exists() else []


def _spawn(
    phase: str, factory: str, arg: str, workdir: Path, backend: str
) -> subprocess.Popen[bytes]:
    return spawn_worker("tests.crash_worker", workdir, phase, factory, arg, str(workdir), backend)


def _errors(workdir: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(workdir.glob("*.err")))


def _wait_ready(proc: subprocess.Popen[bytes], workdir: Path, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    ready = workdir / "ready"
    while time.monotonic() < deadline:
        if ready.exists() and len(ready.read_text().splitlines()) >= count:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the worker ended early ({proc.returncode}): {_errors(workdir)}")
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    raise AssertionError("the worker did not get ready in time")


def _kill(proc: subprocess.Popen[bytes]) -> bool:
    """SIGKILL ``proc``; whether it was still running (else it had finished its work)."""
    alive = proc.poll() is None
    if alive:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return alive


def crash_and_resume(factory: str, arg: str, workdir: Path, backend: str, seed: int) -> Tally:
    """Run the crash test (see the module docstring) and return its tally."""
    rng = random.Random(seed)
    first = _spawn("start", factory, arg, workdir, backend)
    _wait_ready(first, workdir, 1, 30)
    time.sleep(rng.uniform(0.05, 0.5))
    _kill(first)
    second = _spawn("resume", factory, arg, workdir, backend)
    _wait_ready(second, workdir, 2, 30)
    time.sleep(rng.uniform(0.1, 0.5) + worker.LEASE_S)
    _kill(second)
    third = _spawn("resume", factory, arg, workdir, backend)
    try:
        third.wait(timeout=60)
    except subprocess.TimeoutExpired:
        third.kill()
        third.wait()
        raise
    assert third.returncode == 0, _errors(workdir)
    module, function = factory.split(":")
    store: tether.RunStore = getattr(importlib.import_module(module), function)(arg)
    return anyio.run(_check, store, workdir, backend=backend)


async def _check(store: tether.RunStore, workdir: Path) -> Tally:
    effects: Counter[str] = Counter()
    recorded: set[str] = set()
    again: list[str] = []
    for line in (workdir / "log").read_text().splitlines():
        what, key = line.split()
        if what == "recorded":
            recorded.add(key)
        else:
            effects[key] += 1
            if key in recorded:
                again.append(key)
    resumed = seams = 0
    try:
        for i in range(worker.RUNS):
            run_id = f"crash-{i}"
            stored = await store.get(run_id)
            assert stored is not None, run_id
            assert stored.status == "finished", (run_id, stored.status)
            events = [ev.load(e) for e in await store.events(run_id)]
            assert [e.seq for e in events] == list(range(len(events))), run_id
            finished = [e for e in events if isinstance(e, ev.RunFinished)]
            assert len(finished) == 1, run_id
            assert finished[0] is events[-1], run_id
            end = finished[0]
            assert end.termination is tether.Termination.ANSWERED, (run_id, end.error)
            charged = [e for e in events if isinstance(e, ev.UsageCharged)]
            assert end.usage.input_tokens == sum(e.input_tokens for e in charged), run_id
            assert end.usage.output_tokens == sum(e.output_tokens for e in charged), run_id
            n = sum(isinstance(e, ev.RunResumed) for e in events)
            seams += n
            resumed += n > 0
            for r in range(1, worker.ROUNDS + 1):
                for j in range(worker.CALLS):
                    assert effects[f"{run_id}/{r}/{j}"] >= 1, (run_id, r, j)
    finally:
        await store.aclose()
    assert not again, f"finished tool calls ran again: {again}"
    reruns = sum(n - 1 for key, n in effects.items() if n > 1)
    return Tally(
        runs=worker.RUNS,
        resumed=resumed,
        seams=seams,
        reruns_of_unfinished_calls=reruns,
        calls=sum(effects.values()),
    )
