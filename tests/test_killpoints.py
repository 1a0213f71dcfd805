"""The kill-point suite (issue 26): SIGKILL at every durable write point, on both stores and
both backends; another process finishes the run; then, from the store and the fsync'd log:

* the run finished exactly once: status ``finished``, one ``RunFinished`` (the last event,
  ``answered``, with every call's result in its output), ``seq`` gap-free;
* every call whose result the store accepted ran exactly once; a call killed before its
  result was recorded may run again, but never twice under the same epoch;
* each call has one ``ToolCallFinished``; usage is the sum of the ``UsageCharged`` events.

The points (:mod:`tests.killpoint_worker`): ``create`` (before the store has the run:
nothing is recorded, no tool ran, ``rt.submit`` never returned to the submitter, and a
resubmission of the same id runs it once), ``create-after`` (the run recorded, its owner
dead before round 1), ``commit`` (round 2's), ``record_tool`` (round 2's call ran, its
result not recorded), ``park`` (round 2's held call; the next process approves it) and
``finish``. Each stall is before the write reaches the inner store (``create-after``:
after), so the write is lost with the process.
"""

from __future__ import annotations

import importlib
import subprocess
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

import tether
from tether import events as ev

from . import killpoint_worker as worker
from .crash_durable import _errors, _kill, spawn_worker
from .crash_durable import log_lines as _lines
from .pg import PgServer

POINTS = ["create", "create-after", "commit", "record_tool", "park", "finish"]
SQLITE = "tests.test_crash_sqlite:sqlite_store"
POSTGRES = "tests.test_crash_postgres:postgres_store"


def _spawn(
    phase: str, point: str, factory: str, arg: str, workdir: Path, backend: str
) -> subprocess.Popen[bytes]:
    argv = (phase, point, factory, arg, str(workdir), backend)
    return spawn_worker("tests.killpoint_worker", workdir, *argv)


def _kill_at(proc: subprocess.Popen[bytes], workdir: Path, point: str) -> None:
    """SIGKILL ``proc`` once it is blocked at its stalled write."""
    deadline = time.monotonic() + 60
    while f"stall {point}" not in _lines(workdir):
        if proc.poll() is not None:
            raise AssertionError(f"the worker ended early ({proc.returncode}): {_errors(workdir)}")
        if time.monotonic() > deadline:
            _kill(proc)
            raise AssertionError(f"the worker never reached {point}: {_errors(workdir)}")
        time.sleep(0.01)
    assert _kill(proc), f"killed while blocked at {point}"


def _store(factory: str, arg: str) -> tether.RunStore:
    module, function = factory.split(":")
    store: tether.RunStore = getattr(importlib.import_module(module), function)(arg)
    return store


def killpoint(point: str, factory: str, arg: str, workdir: Path, backend: str) -> None:
    """Kill at ``point``, finish in another process, check (see the module docstring)."""
    _kill_at(_spawn("kill", point, factory, arg, workdir, backend), workdir, point)
    if point == "create":
        anyio.run(_check_absent, _store(factory, arg), workdir, backend=backend)
    proc = _spawn("resume", point, factory, arg, workdir, backend)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise
    assert proc.returncode == 0, _errors(workdir)
    anyio.run(_check, _store(factory, arg), workdir, point, backend=backend)


async def _check_absent(store: tether.RunStore, workdir: Path) -> None:
    try:
        assert await store.get(worker.RUN_ID) is None
    finally:
        await store.aclose()
    lines = _lines(workdir)
    assert lines == ["stall create"], lines  # no tool ran; submit never returned


async def _check(store: tether.RunStore, workdir: Path, point: str) -> None:
    lines = _lines(workdir)
    runs = [tuple(line.split()[1:]) for line in lines if line.startswith("effect ")]
    recorded = [line.split()[1] for line in lines if line.startswith("recorded ")]
    per_call = Counter(call for call, _ in runs)
    calls = [f"call-{n}" for n in range(1, worker.ROUNDS + 1)]
    assert sorted(per_call) == calls, lines
    assert sorted(set(recorded)) == calls, lines
    for call in calls:  # never again once the store had its result
        later = lines[lines.index(f"recorded {call}") :]
        assert not [line for line in later if line.startswith(f"effect {call} ")], lines
    assert len(set(runs)) == len(runs), lines  # never twice under one epoch
    # Exactly once each, but the call killed before its result was recorded: twice, the
    # second time under the next owner's epoch.
    again = {"call-2": 2} if point == "record_tool" else {}
    assert per_call == Counter({c: again.get(c, 1) for c in calls}), lines
    if point == "record_tool":
        assert [epoch for call, epoch in runs if call == "call-2"] == ["1", "2"], lines
    assert "ended" not in lines, lines
    try:
        stored = await store.get(worker.RUN_ID)
        assert stored is not None
        assert stored.status == "finished"
        events = [ev.load(e) for e in await store.events(worker.RUN_ID)]
    finally:
        await store.aclose()
    assert [e.seq for e in events] == list(range(len(events)))
    kinds = Counter(type(e).__name__ for e in events)
    assert kinds["RunStarted"] == kinds["RunFinished"] == 1, kinds
    finished = [e.call_id for e in events if isinstance(e, ev.ToolCallFinished)]
    assert sorted(finished) == calls, finished
    if point == "park":
        answered = [(e.call_id, e.approved) for e in events if isinstance(e, ev.ApprovalAnswered)]
        assert answered == [("call-2", True)], answered
        requested = [e.call_id for e in events if isinstance(e, ev.ApprovalRequested)]
        assert requested == ["call-2"], requested  # the lost park left no trace
    end = events[-1]
    assert isinstance(end, ev.RunFinished)
    assert end.termination is tether.Termination.ANSWERED, end.error
    assert end.output == "did k1; did k2; did k3"
    charged = [e for e in events if isinstance(e, ev.UsageCharged)]
    assert end.usage.input_tokens == sum(e.input_tokens for e in charged)
    assert end.usage.output_tokens == sum(e.output_tokens for e in charged)
    assert end.usage.tool_calls == worker.ROUNDS


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_each_write_point_on_sqlite(tmp_path: Path, point: str, backend: str) -> None:
    """SIGKILL at ``point`` on SQLite: the run ends once, no recorded call runs again."""
    killpoint(point, SQLITE, str(tmp_path / "runs.db"), tmp_path, backend)


@pytest.mark.timeout(120)
# About 1 min for both stores and backends: PostgreSQL in the slow tier (pytest -m slow);
# the default tier keeps SQLite's twelve cases.
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_each_write_point_on_postgres(
    pg_server: PgServer, pg_schema: str, tmp_path: Path, point: str, backend: str
) -> None:
    """SIGKILL at ``point`` on PostgreSQL: the run ends once, no recorded call runs again."""
    killpoint(point, POSTGRES, pg_schema, tmp_path, backend)
