"""The approval-crash probe: an approved call must run once across crashes, for any store.

:func:`approval_crash` runs :mod:`tests.approval_worker`'s phases in processes
of their own: a run parks on ``Verdict.ask``; another process approves it and
resumes it, its tools finish and are recorded, and it is SIGKILLed at the
round's commit; ``stalls`` more ``resume=True`` processes claim it and are
killed at the same point; a last one finishes it. Then, from the store alone:

* each tool ran exactly once (the approved one included);
* one ``ApprovalRequested``, one ``ApprovalAnswered`` and one ``ToolCallStarted``
  per call in the whole trail;
* one ``RunResumed`` (the killed owners' seams were never committed), right
  after the park's events;
* ``seq`` gap-free, one ``RunFinished`` (last, ``answered``), usage the sum of the
  ``UsageCharged`` events, two tool calls and two model calls counted.
"""

from __future__ import annotations

import importlib
import subprocess
import time
from collections import Counter
from pathlib import Path

import anyio

import tether
from tether import events as ev

from . import approval_worker as worker
from .crash_durable import _errors, _kill, spawn_worker
from .crash_durable import log_lines as _lines


def _spawn(
    phase: str, factory: str, arg: str, workdir: Path, backend: str
) -> subprocess.Popen[bytes]:
    return spawn_worker(
        "tests.approval_worker", workdir, phase, factory, arg, str(workdir), backend
    )


def _kill_at_commit(proc: subprocess.Popen[bytes], workdir: Path, commits: int) -> None:
    """SIGKILL ``proc`` once it is blocked in its round's commit (the ``commits``-th)."""
    deadline = time.monotonic() + 60
    while _lines(workdir).count("commit") < commits:
        if proc.poll() is not None:
            raise AssertionError(f"the worker ended early ({proc.returncode}): {_errors(workdir)}")
        if time.monotonic() > deadline:
            _kill(proc)
            raise AssertionError(f"the worker never reached its commit: {_errors(workdir)}")
        time.sleep(0.01)
    assert _kill(proc), "killed while blocked in its commit"


def _run(proc: subprocess.Popen[bytes], workdir: Path) -> None:
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise
    assert proc.returncode == 0, _errors(workdir)


def approval_crash(factory: str, arg: str, workdir: Path, backend: str, stalls: int) -> None:
    """Run the probe (see the module docstring); assertions fail on any breach."""
    _run(_spawn("park", factory, arg, workdir, backend), workdir)
    _kill_at_commit(_spawn("approve", factory, arg, workdir, backend), workdir, 1)
    for n in range(stalls):
        _kill_at_commit(_spawn("stall", factory, arg, workdir, backend), workdir, n + 2)
    _run(_spawn("finish", factory, arg, workdir, backend), workdir)
    module, function = factory.split(":")
    store: tether.RunStore = getattr(importlib.import_module(module), function)(arg)
    anyio.run(_check, store, workdir, backend=backend)


async def _check(store: tether.RunStore, workdir: Path) -> None:
    lines = _lines(workdir)
    effects = Counter(line.split()[1] for line in lines if line.startswith("effect "))
    assert effects == {"pay": 1, "note": 1}, lines
    # Both were recorded before the first kill: every later process reused them.
    assert lines.index("recorded pay") < lines.index("commit"), lines
    assert lines.index("recorded note") < lines.index("commit"), lines
    try:
        stored = await store.get(worker.RUN_ID)
        assert stored is not None
        assert stored.status == "finished"
        events = [ev.load(e) for e in await store.events(worker.RUN_ID)]
    finally:
        await store.aclose()
    assert [e.seq for e in events] == list(range(len(events)))
    kinds = Counter(type(e).__name__ for e in events)
    requested = [e.call_id for e in events if isinstance(e, ev.ApprovalRequested)]
    answered = [(e.call_id, e.approved) for e in events if isinstance(e, ev.ApprovalAnswered)]
    started = [e.call_id for e in events if isinstance(e, ev.ToolCallStarted)]
    finished = [(e.call_id, e.outcome) for e in events if isinstance(e, ev.ToolCallFinished)]
    assert requested == ["pay-1"], requested
    assert answered == [("pay-1", True)], answered
    assert started == ["pay-1", "note-1"], started
    assert sorted(finished) == [("note-1", "ok"), ("pay-1", "ok")], finished
    assert kinds["RunStarted"] == kinds["RunResumed"] == kinds["RunFinished"] == 1, kinds
    [seam] = [e for e in events if isinstance(e, ev.RunResumed)]
    assert isinstance(events[seam.seq - 1], ev.ApprovalRequested)  # the park's last event
    assert seam.from_round == 1
    end = events[-1]
    assert isinstance(end, ev.RunFinished)
    assert end.termination is tether.Termination.ANSWERED, end.error
    assert end.output == "paid pay; noted note"
    charged = [e for e in events if isinstance(e, ev.UsageCharged)]
    assert len(charged) == 2
    assert end.usage.input_tokens == sum(e.input_tokens for e in charged)
    assert end.usage.output_tokens == sum(e.output_tokens for e in charged)
    assert (end.usage.steps, end.usage.tool_calls) == (2, 2)
