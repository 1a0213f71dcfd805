"""The benchmarks' quick mode keeps working: every row is there and every run verified.

No timing is asserted: the numbers of a quick run mean nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The rows each benchmark prints per backend in quick mode (B3 and B4: two sizes).
EXPECTED_ROWS = {
    "B1": 1,
    "B2": 1,
    "B3": 4,
    "B4": 2,
    "B5": 2,
    "B6": 2,
    "B7": 3,
    "B8": 2,
    "B9": 1,
    "B10": 1,
    "IMPORT": 1,
}


@pytest.mark.slow  # .ci/run also runs `python -m benchmarks --quick` as a step of its own
@pytest.mark.timeout(180)
def test_quick_benchmarks_print_every_row_verified(tmp_path: Path) -> None:
    """`benchmarks --quick` prints and writes every expected row, each measured and verified."""
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--backend", "asyncio", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    table = [line for line in proc.stdout.splitlines() if line.startswith(("| B", "| IMPORT"))]
    for bench, count in EXPECTED_ROWS.items():
        rows = [line for line in table if line.startswith(f"| {bench} | asyncio |")]
        assert len(rows) == count, f"{bench}: {rows}"
    assert "verification: passed" in proc.stdout

    report = json.loads(out.read_text())
    assert report["ok"] is True
    assert report["mode"] == "quick"
    rows = report["rows"]
    assert {r["bench"] for r in rows} == set(EXPECTED_ROWS)
    assert len(rows) == sum(EXPECTED_ROWS.values())
    for row in rows:
        assert row["ok"], row
        assert row["backend"] == "asyncio"
        assert row["verified"].startswith("✓"), row
        # Every row has both sides measured (no missing value on either).
        for side in ("tether", "bare"):
            assert row[side], row
            assert not row[side].startswith("—"), row


def test_only_rejects_an_unknown_benchmark() -> None:
    """`benchmarks --only B99` exits 2 with "unknown benchmark"."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "B99"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "unknown benchmark" in proc.stderr


@pytest.mark.slow  # Ray clusters of 1 and 2 hosts
@pytest.mark.timeout(180)
def test_ray_scaling_quick_prints_every_side_verified() -> None:
    """`benchmarks.ray_scaling --quick`: the plain Runtime and RayRuntimes of 1 and 2 hosts,
    every row measured on every side, every run verified."""
    pytest.importorskip("ray")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["RAY_AUTH_MODE"] = "disabled"  # a throwaway local cluster needs no token
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.ray_scaling", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "`python -m benchmarks.ray_scaling --quick` · caller on asyncio" in out
    assert "ray 2." in out
    header = "| measure | plain Runtime (this process) | RayRuntime, 1 host | RayRuntime, 2 hosts |"
    assert header in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    prefixes = ("| rounds/s", "| start-to-result", "| overhead per run", "| for reference")
    assert len(rows) == 1 + len(prefixes), rows
    for row, prefix in zip(rows[1:], prefixes, strict=True):
        assert row.startswith(prefix), row
    for row in rows[1:3]:  # both measures, on every side
        cells = row.strip("| ").split(" | ")
        assert len(cells) == 4, row
        assert "—" not in cells, row
    assert "verification: passed" in out


@pytest.mark.slow  # Ray clusters of 1 and 2 hosts
@pytest.mark.timeout(240)
def test_ray_scaling_study_prints_rounds_and_calls_for_every_fleet() -> None:
    """`benchmarks.ray_scaling --study` at a small size (the lead runs the 5,000-run one):
    rounds/s of the plain Runtime and of each fleet, Ray calls per round, all verified."""
    pytest.importorskip("ray")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["RAY_AUTH_MODE"] = "disabled"
    args = ["--study", "--runs", "60", "--rounds", "2", "--study-hosts", "1,2"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.ray_scaling", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "## tether over Ray: scaling — the scaling study" in out
    header = "| measure | plain Runtime (this process) | RayRuntime, 1 host | RayRuntime, 2 hosts |"
    assert header in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 3, rows
    assert rows[1].startswith("| rounds/s, 60 runs at once, R=2, L=50 ms |"), rows[1]
    assert rows[2].startswith("| Ray calls per round"), rows[2]
    cells = rows[2].strip("| ").split(" | ")
    assert cells[1] == "—"
    assert all(float(c) >= 0 for c in cells[2:]), cells
    assert "verification: passed" in out
