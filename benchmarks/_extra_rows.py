"""The rows that run in child processes of their own: B10 (a durable round on
PostgreSQL, :mod:`benchmarks.durable_pg`) and IMPORT (``import tether``'s time).

- **B10** B2's workload and sizes with a ``PostgresRunStore`` against no store
  (``python -m benchmarks.durable_pg --json``; the server named by
  ``TETHER_TEST_POSTGRES``, by default 127.0.0.1:5432 db ``test``), beside the
  bare loop's B2.
- **IMPORT** the cumulative µs of ``python -X importtime -c "import tether,
  <backend>"`` against ``import anyio, <backend>`` (what a program on the bare
  loop imports), each the minimum of several fresh interpreters, and the
  modules each leaves in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ._cases import Job, Result
from ._report import Plan, Row, Runner, _bare, _fmt, _fraction, _n, _num, _ratio, _times, _verified

#: The folder holding the ``benchmarks`` package, for child processes.
ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _b10_child(plan: Plan, backend: str) -> Result:
    """``durable_pg``'s best rounds/s without a store and with PostgreSQL, or the problem."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.durable_pg",
        "--runs",
        str(plan.b2_runs),
        "--rounds",
        str(plan.b2_rounds),
        "--repeats",
        str(max(2, plan.b2_repeats)),
        "--backend",
        backend,
        "--json",
    ]
    try:
        proc = subprocess.run(
            command,
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=plan.timeout_s + 120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"problems": ["durable_pg hung past its timeout"], "timed_out": True}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = " ".join(proc.stderr.strip().splitlines()[-2:])
        return {"problems": [f"durable_pg failed (exit {proc.returncode}): {tail}"]}
    best = json.loads(lines[-1])["rounds_per_s"]
    runs = plan.b2_runs * (max(2, plan.b2_repeats) + 1) * 2  # both sides, warm-up excluded
    return {"postgres": best["postgres"], "none": best["none"], "verified_runs": runs}


def bench_b10(plan: Plan, backend: str, run: Runner) -> list[Row]:
    """B2's workload with a ``PostgresRunStore``, against no store and the bare loop."""
    t = _b10_child(plan, backend)
    b = run(_bare(Job("B9", "tether", backend, plan.b2_runs, plan.b2_rounds, 0.0)), False)
    durable, plain = _num(t.get("postgres")), _num(t.get("none"))
    br = _num(b.get("rounds_per_s"))
    verified, problems = _verified(t, b)
    change = (_ratio(durable, plain) - 1) * 100
    return [
        Row(
            "B10",
            backend,
            f"rounds/s · B2 ({_n(plan.b2_runs)} runs at once, L=0, R={plan.b2_rounds}) "
            f"with `PostgresRunStore` against {_fmt(plain, 0)} without "
            f"(`python -m benchmarks.durable_pg`, best of {max(2, plan.b2_repeats)})",
            f"{_fmt(durable, 0)} ({change:+.1f}% vs no store)",
            _fmt(br, 0),
            _fraction(_ratio(durable, br)),
            "—",
            "—",
            verified,
            problems,
        )
    ]


def import_cost(modules: str, repeats: int) -> tuple[float, int]:
    """The least cumulative µs of ``import <modules>`` over ``repeats`` fresh
    interpreters (``-X importtime``), and how many modules it left loaded."""
    names = [m.strip() for m in modules.split(",")]
    code = f"import {modules}; import sys; print(len(sys.modules))"
    best, loaded = float("inf"), 0
    for _ in range(repeats):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        total = 0
        for line in proc.stderr.splitlines():
            parts = line.split("|")
            # A top-level import: its name is not indented past the one space after "|".
            if len(parts) == 3 and parts[2].strip() in names and not parts[2].startswith("  "):
                total += int(parts[1])
        best = min(best, total)
        loaded = int(proc.stdout.strip().splitlines()[-1])
    return best, loaded


def bench_import(plan: Plan, backend: str, run: Runner) -> list[Row]:
    """``import tether`` (and the backend) against ``import anyio`` (and the backend)."""
    repeats = 3 if plan.quick else 10
    problems: tuple[str, ...] = ()
    try:
        tu, tn = import_cost(f"tether, {backend}", repeats)
        bu, bn = import_cost(f"anyio, {backend}", repeats)
    except (subprocess.SubprocessError, ValueError) as exc:
        tu = bu = float("nan")
        tn = bn = 0
        problems = (f"{type(exc).__name__}: {exc}",)
    return [
        Row(
            "IMPORT",
            backend,
            f"ms to import, least of {repeats} fresh interpreters (`python -X importtime -c "
            f'"import tether, {backend}"` against `import anyio, {backend}`), modules loaded',
            f"{_fmt(tu / 1000, 1, ' ms')} ({tn} modules)",
            f"{_fmt(bu / 1000, 1, ' ms')} ({bn} modules)",
            _times(_ratio(tu, bu)),
            "—",
            "—",
            "✗ " + problems[0] if problems else "✓ no run",
            problems,
        )
    ]


__all__ = ["bench_b10", "bench_import", "import_cost"]
