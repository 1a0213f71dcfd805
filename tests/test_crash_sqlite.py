"""The crash-and-resume test on SQLite (docs/guides/durable.md): SIGKILL twice, resume, check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tether

from .approval_crash import approval_crash
from .crash_durable import crash_and_resume


def sqlite_store(path: str) -> tether.RunStore:
    """The store of the workers and the check (``tests.test_crash_sqlite:sqlite_store``)."""
    return tether.SQLiteRunStore(path, poll_s=0.02)


# A crash campaign: asyncio in the default tier, trio in the slow one (pytest -m slow).
@pytest.mark.parametrize("backend", ["asyncio", pytest.param("trio", marks=pytest.mark.slow)])
def test_sqlite_survives_sigkill(tmp_path: Path, backend: str) -> None:
    """200 runs killed twice mid-flight end once each, gap-free, paid in full, no call redone."""
    seed = int(os.environ.get("TETHER_CRASH_SEED", "0")) or int.from_bytes(os.urandom(4), "big")
    tally = crash_and_resume(
        "tests.test_crash_sqlite:sqlite_store", str(tmp_path / "runs.db"), tmp_path, backend, seed
    )
    print(f"crash test ({backend}, seed {seed}): {tally}")
    assert tally.runs == 200


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_approved_call_runs_once_across_crashes_on_sqlite(tmp_path: Path, backend: str) -> None:
    """Parked, approved in a process SIGKILLed at the round's commit after its tools were
    recorded, claimed by another killed there too, finished by a third: each call ran once,
    one ApprovalRequested, one seam, seq gap-free, usage exact."""
    approval_crash(
        "tests.test_crash_sqlite:sqlite_store", str(tmp_path / "runs.db"), tmp_path, backend, 1
    )
