"""``python -m benchmarks [--backend asyncio|trio|both] [--quick] [--only B1,B3] [--json PATH]``.

Prints a markdown table: every row pairs tether with the bare loop on the same
work, in this invocation. See :mod:`benchmarks` for what each row measures.
The exit status is 1 when any run failed verification (never for a timing).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from ._cases import Job, Result, run_job
from ._extra_rows import bench_b10, bench_import
from ._report import BENCH, FULL, QUICK, Row, table

#: Every row: B1–B9 (:mod:`._report`), B10 and the import time (:mod:`._extra_rows`).
ROWS = {**BENCH, "B10": bench_b10, "IMPORT": bench_import}
BENCHMARKS = tuple(ROWS)

#: The folder holding the ``benchmarks`` package, for child processes.
ROOT = Path(__file__).resolve().parent.parent


def run(job: Job, isolated: bool) -> Result:
    """Run ``job`` here, or in a child process of its own when ``isolated``."""
    what = f"{job.case} {job.backend} {job.impl} n={job.n:,}"
    print(f"  {what} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        result = _in_child(job) if isolated else run_job(job)
    except Exception as exc:  # a crash in one job is reported, the others still run
        result = {"problems": [f"{type(exc).__name__}: {exc}"], "timed_out": False}
    print(f"  {what} done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return result


def _in_child(job: Job) -> Result:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks._child", json.dumps(dataclasses.asdict(job))],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=job.timeout_s + 120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"problems": ["the child process hung past its timeout"], "timed_out": True}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-3:]
        return {
            "problems": [f"the child process failed (exit {proc.returncode}): {' '.join(tail)}"],
            "timed_out": False,
        }
    result: Result = json.loads(lines[-1])
    return result


def _versions() -> str:
    parts = [f"Python {platform.python_version()}"]
    for dist in ("anyio", "trio", "attrs", "cattrs", "tether"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            parts.append(f"{dist} {metadata.version(dist)}")
    parts.append(f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs")
    return " · ".join(parts)


def _only(value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(v.strip().upper() for v in value.split(",") if v.strip()))
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown benchmark(s) {', '.join(unknown) or value!r}; choose from "
            + ",".join(BENCHMARKS)
        )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="tether against a bare anyio loop doing the same work.",
    )
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, to check the scripts work (CI)"
    )
    parser.add_argument(
        "--only", type=_only, default=BENCHMARKS, help="a comma-separated subset, e.g. B1,B3"
    )
    parser.add_argument("--json", type=Path, help="also write the rows and raw results here")
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    backends = ("asyncio", "trio") if args.backend == "both" else (args.backend,)
    started = time.perf_counter()
    rows: list[Row] = []
    for bench in args.only:
        for backend in backends:
            print(f"{bench} on {backend}", file=sys.stderr, flush=True)
            rows += ROWS[bench](plan, backend, run)
    elapsed = time.perf_counter() - started

    failed = [r for r in rows if not r.ok]
    mode = "quick (tiny sizes: the marks do not apply)" if plan.quick else "full"
    print(f"## tether benchmarks — {mode}\n")
    print(_versions() + f" · took {elapsed:.0f} s\n")
    print(table(rows))
    print(
        "\nRatios are tether ÷ bare loop (µs, ms, KB: lower is better; rounds/s: higher is "
        "better, shown as a fraction). Targets were set on asyncio; the marks are "
        "informational. RSS now: /proc/self/statm; peak RSS: VmHWM in /proc/self/status, reset "
        "through /proc/self/clear_refs just before the runs start; B3 and B4 run each side "
        "and size in a fresh child process."
    )
    if failed:
        print("\n**verification FAILED**\n")
        for r in failed:
            for problem in r.problems:
                print(f"- {r.bench} {r.backend}: {problem}")
    else:
        print("\nverification: passed")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "mode": "quick" if plan.quick else "full",
                    "backends": list(backends),
                    "rows": [r.as_json() for r in rows],
                    "ok": not failed,
                },
                indent=2,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
