"""tether.ray when a host's node is lost: a second Ray node on this machine whose raylet
and every process under it are SIGKILLed at once (as when its machine dies), with an
SQLite store shared by the hosts. The driver runs in a process of its own
(``tests/ray_node_worker.py``: one driver joins one cluster), on asyncio and trio.

The lost node's runs resume on the other host (one ``RunResumed`` naming the lost
host's owner each) and answer once; a caller following one of them sees its stream
end with ``RunFinished``; the other host's runs are not disturbed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_lost_nodes_runs_resume_on_the_other_node(tmp_path: Path, backend: str) -> None:
    pytest.importorskip("ray")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ray_node_worker", str(tmp_path / "runs.db"), backend],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
        cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    runs = out["runs"]
    assert len(runs) == 6
    for run in runs.values():
        assert run["termination"] == "answered"
        assert run["finished"] == 1
        if run["doomed"]:
            assert run["previous_owners"] == [out["lost_owner"]]
        else:
            assert run["previous_owners"] == []
    assert out["followed_last"] == "RunFinished"
