"""``tether ray-demo``: the demo's workload over a local Ray cluster (RayRuntime)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tether.cli import _main as cli

SUMMARY = re.compile(r"^agent-\d{3}  \S.* → (\w+)$")
HOST = re.compile(r"^host (\d+) \(pid \d+ on \S+\): (\d+) runs$", re.M)


@pytest.mark.slow  # a Ray cluster in a subprocess; tests/test_ray.py keeps one in the default tier
@pytest.mark.timeout(150)
def test_ray_demo_subprocess_runs_every_agent_over_two_hosts() -> None:
    """`tether ray-demo --hosts 2 --agents 20 --plain`: 20 summaries, the tally, a line
    per host whose runs add up to 20, exit 0."""
    pytest.importorskip("ray")
    # RAY_AUTH_MODE=disabled: a throwaway local cluster needs no token (and says so less).
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "ray-demo", "--hosts", "2", "--agents", "20", "--plain"],
        capture_output=True,
        text=True,
        timeout=140,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.startswith("tether ray-demo: 20 agents on the scripted provider, over 2 hosts")
    lines = [line for line in out.splitlines() if SUMMARY.match(line)]
    assert sorted(line.split()[0] for line in lines) == [f"agent-{i:03d}" for i in range(20)]
    endings = {SUMMARY.match(line).group(1) for line in lines}  # type: ignore[union-attr]
    assert {"answered", "refusal", "max_steps"} <= endings
    assert re.search(r"^termination\s+runs\s+tokens\s+cost$", out, re.M)
    assert re.search(r"^total\s+20\s", out, re.M)
    assert re.search(r"^wall time \d+\.\d\d s for 20 agents \(asyncio, seed 0\)$", out, re.M)
    hosts = HOST.findall(out)
    assert [int(i) for i, _ in hosts] == [0, 1]
    assert sum(int(runs) for _, runs in hosts) == 20
    assert "Traceback" not in proc.stderr


def test_ray_demo_without_ray_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the 'ray' extra: one line naming the extra, exit 64, no traceback."""
    for name in [m for m in sys.modules if m in ("ray", "tether.ray") or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)
    assert cli.main(["ray-demo", "--agents", "3", "--plain"]) == 64
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1, captured.err
    assert "pip install 'tether[ray]'" in err[0]
    assert "Traceback" not in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["ray-demo", "--hosts", "0"],
        ["ray-demo", "--hosts", "two"],
        ["ray-demo", "--agents", "0"],
        ["ray-demo", "--backend", "curio"],
        ["ray-demo", "--latency-scale", "-1"],
    ],
)
def test_ray_demo_usage_errors_exit_64(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Bad arguments exit 64 before any cluster starts, without a traceback."""
    assert cli.main(argv) == 64
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_ray_demo_without_a_cluster_at_address_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--address auto` with no cluster there: one line naming the address, exit 64."""
    pytest.importorskip("ray")
    from tether.cli import _ray_demo as _cli_raydemo

    async def no_cluster(*args: object) -> None:
        # What ray.init(address="auto") raises when no cluster runs here.
        raise ConnectionError("Could not find any running Ray instance.\nPlease specify ...")

    monkeypatch.setattr(_cli_raydemo, "_ray_demo", no_cluster)
    assert cli.main(["ray-demo", "--address", "auto", "--agents", "2", "--plain"]) == 64
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "tether: error: cannot join the Ray cluster at 'auto': "
        "Could not find any running Ray instance."
    ]
