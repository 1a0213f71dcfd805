"""``tether ray-demo``: the demo's workload over a local Ray cluster (RayRuntime)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import pytest

from tether.cli import _main as cli

SUMMARY = re.compile(r"^agent-\d{3}  \S.* → (\w+)$")
#: A line Ray logs at error level (C++: "[date time E pid tid] ...", Python: "date time ERROR ...").
ERROR_LINE = re.compile(r"^\[[^\]]* E \d+ \d+\]|^\S+ \S+\s+ERROR ", re.M)
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
    # A normal start logs nothing at error level (Ray's "constructor arguments in the
    # object store and max_restarts > 0" was one: hosts now get their config by a call).
    assert not ERROR_LINE.search(proc.stderr + proc.stdout), proc.stderr
    # Nor Ray's warning that ray.init outside the main thread sets no SIGTERM handler
    # (tether.ray._local runs it in a thread of its own, by design).
    assert "SIGTERM handler" not in proc.stderr + proc.stdout, proc.stderr


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


def _processes() -> dict[int, tuple[int, str, str]]:
    """Every process now: pid -> (parent pid, start time, command line), from /proc."""
    found: dict[int, tuple[int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(entry)] = (int(fields[1]), fields[19], cmdline)
    return found


def _descendants(root: int, table: dict[int, tuple[int, str, str]]) -> dict[int, tuple[str, str]]:
    """The processes under ``root``: pid -> (start time, command line)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, tuple[str, str]] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out[pid] = table[pid][1:]
        todo += children.get(pid, [])
    return out


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "moment",
    [
        "init",
        "raylet",
        "hosts",
        "running",
        # Quarantined, not fixed: now and then a second Ctrl-C that lands in one of the
        # RayRuntime's feed tasks prints a traceback on the way out (the exit is 130 and
        # no process is left; CI saw it once in this stop, 1 run in 3 here).
        pytest.param(
            "twice",
            marks=pytest.mark.xfail(
                reason="issue 28: a traceback on quitting at once", strict=False
            ),
        ),
    ],
)
def test_ctrl_c_at_any_moment_of_ray_demo_leaves_no_ray_process(moment: str) -> None:
    """Ctrl-C (SIGINT to the demo's process group, as a terminal sends it) once the demo
    has said what it starts (Ray's start-up is under way), once the cluster's raylet
    runs, once the host actors run, mid-run, and twice mid-run (quit at once): the demo
    exits, and no process it started (the cluster's GCS, raylet, agents, workers, hosts:
    'ray::' or not) is left, re-parented or not."""
    pytest.importorskip("ray")
    import signal
    import threading
    import time

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "ray-demo", "--hosts", "2", "--agents", "400", "--plain"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: the terminal's Ctrl-C goes to it
    )
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout or ()), daemon=True)
    reader.start()
    seen: dict[int, tuple[str, str]] = {}

    def reached() -> bool:
        names = [cmd for _, cmd in seen.values()]
        if moment == "init":
            return any(line.startswith("tether ray-demo:") for line in list(out))
        if moment == "raylet":
            return any("raylet" in cmd for cmd in names)
        if moment == "hosts":
            return any(cmd.startswith("ray::Host") for cmd in names)
        return any(SUMMARY.match(line.rstrip("\n")) for line in list(out))

    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            seen.update(_descendants(proc.pid, _processes()))
            if reached():
                break
            time.sleep(0.02)
        assert proc.poll() is None, "".join(out)  # the demo was still going: Ctrl-C now
        os.killpg(proc.pid, signal.SIGINT)
        if moment == "twice":
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGINT)
        while proc.poll() is None and time.monotonic() < deadline + 60:
            seen.update(_descendants(proc.pid, _processes()))
            time.sleep(0.05)
        assert proc.poll() is not None, "ray-demo did not exit after Ctrl-C"
        time.sleep(2.0)  # what the demo stopped has ended since
        now = _processes()
        left = {
            pid: cmd
            for pid, (started, cmd) in seen.items()
            if pid in now and now[pid][1] == started
        }
        assert left == {}, "".join(out)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _descendants(proc.pid, _processes()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    reader.join(5)
    if proc.stdout is not None:
        proc.stdout.close()
    assert proc.returncode in (130, 1, -signal.SIGINT), "".join(out)
    assert "Traceback" not in "".join(out)
