"""The paused-owner probe (issue 26, defect 2), with real processes, on SQLite and PostgreSQL.

An owner process (:mod:`tests.fence_worker`, ``lease_s=1``) runs durable runs
whose tool calls and model requests are logged (fsynced) as they start. The
probe SIGSTOPs it mid-flight for 3 s; meanwhile a second process
(``resume=True``) takes the runs over once their leases expire; then it
SIGCONTs the first. It checks, from the log and the store:

* the stale owner started no tool call and no model request after it was
  continued (its lease deadline had passed: it was stopped for three leases);
* each execution carries its owner's epoch in ``ctx.idempotency_key`` (the
  stale owner's is 1, the new owner's 2), and no call ran twice under one
  epoch; a call that ran under both had been started by the stale owner before
  the stop (in flight, unfinished, so the new owner ran it again: what the
  idempotency key is for);
* every run finished once, answered, with a gap-free trail.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import anyio
import attrs
import pytest

import tether
from tether import events as ev

from . import fence_worker as worker
from .crash_durable import _errors, spawn_worker
from .pg import PgServer, test_dsn

#: How long the owner is stopped: three leases.
STOPPED_S = 3.0


def sqlite_store(path: str) -> tether.RunStore:
    """The SQLite store of the probe (``tests.test_fence_probe:sqlite_store``)."""
    return tether.SQLiteRunStore(path, poll_s=0.02)


def postgres_store(schema: str) -> tether.RunStore:
    """The PostgreSQL store of the probe (``tests.test_fence_probe:postgres_store``)."""
    from tether.postgres import PostgresRunStore

    return PostgresRunStore(test_dsn(), schema=schema)


@attrs.frozen
class Probe:
    """What the probe saw (for the closing note)."""

    runs: int
    taken_over: int
    tool_calls: int
    model_requests: int
    #: Calls in flight at the stop, run again by the new owner (with the new epoch).
    in_flight_reruns: int
    #: Tool calls and model requests the stale owner started after SIGCONT (must be 0).
    stale_starts: int


def _spawn(
    phase: str, factory: str, arg: str, workdir: Path, backend: str
) -> subprocess.Popen[bytes]:
    return spawn_worker("tests.fence_worker", workdir, phase, factory, arg, str(workdir), backend)


def _wait_ready(proc: subprocess.Popen[bytes], workdir: Path, phase: str) -> None:
    deadline = time.monotonic() + 60
    ready = workdir / "ready"
    while time.monotonic() < deadline:
        if ready.exists() and phase in ready.read_text():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the {phase} worker ended early: {_errors(workdir)}")
        time.sleep(0.01)
    raise AssertionError(f"the {phase} worker did not get ready in time")


def _end(proc: subprocess.Popen[bytes]) -> None:
    """A worker left behind by a failed probe: continued, then killed."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
    proc.wait()


def probe(factory: str, arg: str, workdir: Path, backend: str) -> Probe:
    """Run the probe (see the module docstring) and return what it saw."""
    owner = _spawn("own", factory, arg, workdir, backend)
    resumer: subprocess.Popen[bytes] | None = None
    try:
        _wait_ready(owner, workdir, "own")
        time.sleep(0.5)  # every run has a model request or tool calls in flight
        os.kill(owner.pid, signal.SIGSTOP)
        resumer = _spawn("resume", factory, arg, workdir, backend)
        time.sleep(STOPPED_S)
        continued_at = time.monotonic()
        os.kill(owner.pid, signal.SIGCONT)
        assert resumer.wait(timeout=120) == 0, _errors(workdir)
        assert owner.wait(timeout=60) == 0, _errors(workdir)
    finally:
        _end(owner)
        if resumer is not None:
            _end(resumer)
    return _check(factory, arg, workdir, backend, owner.pid, continued_at)


def _check(
    factory: str,
    arg: str,
    workdir: Path,
    backend: str,
    stale: int,
    continued_at: float,
) -> Probe:
    runs: dict[str, list[tuple[int, float, int]]] = defaultdict(list)  # key: (pid, t, epoch)
    requests = stale_starts = 0
    for line in (workdir / "log").read_text().splitlines():
        kind, pid_text, at_text, *rest = line.split()
        pid, at = int(pid_text), float(at_text)
        if pid == stale and at >= continued_at:
            stale_starts += 1
        if kind == "model":
            requests += 1
            continue
        key, idempotency_key = rest
        run_id, call_id, epoch = idempotency_key.split(":")
        assert run_id == key.split("/")[0], line
        assert call_id, line
        runs[key].append((pid, at, int(epoch)))
    assert stale_starts == 0, f"the stale owner started {stale_starts} calls after its lease"
    reruns = 0
    for key, executions in runs.items():
        epochs = [epoch for _, _, epoch in executions]
        assert len(set(epochs)) == len(epochs), f"{key} ran twice under one epoch: {executions}"
        for pid, _, epoch in executions:
            # Each process acts under its own epoch: the creator's 1, the new owner's 2.
            assert epoch == (1 if pid == stale else 2), (key, executions)
        reruns += len(executions) - 1
    module, function = factory.split(":")
    store: tether.RunStore = getattr(importlib.import_module(module), function)(arg)
    taken_over = anyio.run(_check_store, store, runs, backend=backend)
    return Probe(
        runs=worker.RUNS,
        taken_over=taken_over,
        tool_calls=sum(map(len, runs.values())),
        model_requests=requests,
        in_flight_reruns=reruns,
        stale_starts=stale_starts,
    )


async def _check_store(store: tether.RunStore, runs: dict[str, list[object]]) -> int:
    """Every run finished once, answered, gap-free; every call ran. How many were taken over."""
    taken_over = 0
    try:
        for i in range(worker.RUNS):
            run_id = f"fence-{i}"
            stored = await store.get(run_id)
            assert stored is not None, run_id
            assert stored.status == "finished", (run_id, stored.status)
            events = [ev.load(e) for e in await store.events(run_id)]
            assert [e.seq for e in events] == list(range(len(events))), run_id
            finished = [e for e in events if isinstance(e, ev.RunFinished)]
            assert len(finished) == 1, run_id
            assert finished[0] is events[-1], run_id
            assert finished[0].termination is tether.Termination.ANSWERED, finished[0].error
            taken_over += any(isinstance(e, ev.RunResumed) for e in events)
            for r in range(1, worker.ROUNDS + 1):
                for j in range(worker.CALLS):
                    assert runs[f"{run_id}/{r}/{j}"], (run_id, r, j)
    finally:
        await store.aclose()
    return taken_over


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_paused_owner_acts_no_more_on_sqlite(tmp_path: Path, backend: str) -> None:
    """SIGSTOP past the lease, a take-over, SIGCONT: the stale owner starts nothing more."""
    seen = probe(
        "tests.test_fence_probe:sqlite_store", str(tmp_path / "runs.db"), tmp_path, backend
    )
    print(f"SIGSTOP probe on SQLite ({backend}): {seen}")
    assert seen.taken_over > 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_paused_owner_acts_no_more_on_postgres(
    pg_server: PgServer, pg_schema: str, tmp_path: Path, backend: str
) -> None:
    """The same probe on PostgreSQL."""
    seen = probe("tests.test_fence_probe:postgres_store", pg_schema, tmp_path, backend)
    print(f"SIGSTOP probe on PostgreSQL ({backend}): {seen}")
    assert seen.taken_over > 0
