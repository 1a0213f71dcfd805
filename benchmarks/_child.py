"""Run one benchmark job in a process of its own and print its result as one JSON line.

``python -m benchmarks._child '<job as JSON>'``. Jobs that measure memory
(B3, B4) run here, one per side and size, so the peak RSS (``ru_maxrss``) and
the resident size each one reports belong to that job alone.
"""

from __future__ import annotations

import json
import sys

from ._cases import Job, run_job


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m benchmarks._child '<job json>'", file=sys.stderr)
        return 2
    job = Job(**json.loads(argv[1]))
    print(json.dumps(run_job(job)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
