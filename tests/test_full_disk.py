"""A full disk (issue 26, defect 4): each run has one ending, and the caller is told it.

A child process (:mod:`tests.full_disk_worker`) runs 60 durable runs on SQLite
with every file it writes limited to 192 KiB (``RLIMIT_FSIZE``; ``SIGXFSZ``
ignored, so writes fail with ``EFBIG``). Its callers get ``answered`` (an end
that fitted) or ``store_failed``; whatever the store holds must be what the
caller was told, every ``store_failed`` reported is recorded (the store keeps room
for every running run's end, and refuses a new run it has no such room for), and a
later Runtime without the limit and with ``resume=True`` gives no run a second,
different ending.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

import tether

from .full_disk_worker import LEASE_S, RUNS, agent

pytestmark = pytest.mark.anyio

LIMIT = 192 * 1024
ROOT = Path(__file__).resolve().parent.parent


async def endings(store: tether.RunStore, run_ids: list[str]) -> dict[str, str | None]:
    """Each stored run's termination; ``None``: not finished. Runs not stored are left out."""
    out: dict[str, str | None] = {}
    for run_id in run_ids:
        stored = await store.get(run_id)
        if stored is not None:
            out[run_id] = None if stored.result is None else stored.result["termination"]
    return out


@pytest.mark.timeout(300)
async def test_a_full_disk_gives_each_run_one_ending(tmp_path: Path, anyio_backend: str) -> None:
    db = tmp_path / "runs.db"
    child = await anyio.run_process(
        [sys.executable, "-m", "tests.full_disk_worker", str(db), str(LIMIT), anyio_backend],
        cwd=ROOT,
        check=False,
    )
    assert child.returncode == 0, child.stderr.decode()[-3000:]
    report = json.loads(child.stdout)
    told: dict[str, str] = report["told"]
    # Every store_failed was recorded: no owner said it could not (its RuntimeWarning).
    assert report["unrecorded"] == []
    assert len(told) == RUNS
    assert set(told.values()) <= {"answered", "store_failed"}
    assert "store_failed" in told.values()  # the disk did fill
    store = tether.SQLiteRunStore(db, poll_s=0.02)
    ids = sorted(told)
    before = await endings(store, ids)
    assert {i: t for i, t in before.items() if t is not None} == {
        i: told[i] for i, t in before.items() if t is not None
    }
    # Without the limit, a Runtime resumes whatever is claimable (nothing, if every
    # ending reported was recorded): no run may end differently from what its caller got.
    async with tether.Runtime(store=store, agents=[agent()], resume=True, lease_s=LEASE_S) as rt:
        with anyio.fail_after(60):  # until every stored run has finished, here or before
            while None in (await endings(store, ids)).values() or rt.running:  # noqa: ASYNC110
                await anyio.sleep(0.1)
    after = await endings(store, ids)
    differ = {i for i, t in after.items() if t is not None and t != told[i]}
    assert not differ, differ
    # A run the store never recorded (its create found no room) cannot be resumed.
    missing = [i for i in ids if await store.get(i) is None]
    assert all(told[i] == "store_failed" for i in missing)
    assert sum(t is not None for t in after.values()) + len(missing) == RUNS
    await store.aclose()
