"""The driver of ``tests/test_ray_node_loss.py``, in a process of its own (one driver
joins one cluster, and the test session has its own).

``python -m tests.ray_node_worker DB BACKEND``: a 2-node Ray cluster on this machine
(``ray.cluster_utils.Cluster``: a head node and a second node, one logical CPU each,
so each gets one host), a 2-host RayRuntime with an SQLite store at DB, 3 runs on
each host; once two rounds of a run are checkpointed, the second node's raylet is
SIGKILLed with every process under it, at once (the node is lost, as when its machine dies). Prints
one JSON line: each run's termination, RunResumed count and previous owners, which
host was lost and its owner, and the events its follower saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall


@tether.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _walker() -> tether.Agent:
    def script(request: Any, ctx: Any) -> Reply:
        if ctx.call_index < 8:
            return Reply(tool_calls=[ToolCall(name="add", arguments={"a": ctx.call_index, "b": 1})])
        return Reply(text="walked")

    provider = ScriptedProvider(script, latency_s=0.3)
    return tether.Agent(name="walker", provider=provider, tools=[add])


async def main(db: Path, raylet_pid: int) -> dict[str, Any]:
    from tether.ray import RayRuntime

    agent = _walker()
    store = tether.SQLiteRunStore(db, poll_s=0.05)
    async with RayRuntime(
        hosts=2,
        agents=[agent],
        store=store,
        lease_s=2.0,
        host_timeout_s=2.0,
        host_options={"max_restarts": 0},
    ) as rt:
        infos = [info for info in rt.hosts if info is not None]
        lost = next(i for i in infos if _parent(i.pid) == raylet_pid)
        doomed = [rt.start(agent, f"doomed {n}", host=lost.index) for n in range(3)]
        safe = [rt.start(agent, f"safe {n}", host=1 - lost.index) for n in range(3)]
        results: dict[str, tether.RunResult[Any]] = {}
        followed: list[ev.Event] = []

        async def wait(handle: Any) -> None:
            results[handle.run_id] = await handle.result()

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for handle in doomed + safe:
                    tg.start_soon(wait, handle)
                async for event in doomed[0].events():
                    followed.append(event)
                    if isinstance(event, ev.ToolCallFinished) and event.round == 2:
                        _lose_node(raylet_pid)
                        break
                async for event in doomed[0].events():
                    followed.append(event)
    return {
        "lost": lost.index,
        "lost_owner": lost.owner,
        "runs": {
            handle.run_id: {
                "doomed": handle in doomed,
                "termination": results[handle.run_id].termination.value,
                "previous_owners": [
                    e.previous_owner
                    for e in results[handle.run_id].events
                    if isinstance(e, ev.RunResumed)
                ],
                "finished": sum(
                    isinstance(e, ev.RunFinished) for e in results[handle.run_id].events
                ),
            }
            for handle in doomed + safe
        },
        "followed_last": type(followed[-1]).__name__,
    }


def _lose_node(raylet: int) -> None:
    """What a machine's death looks like: its raylet and every process under it (the
    workers, the host among them, and the agents) SIGKILLed at once."""
    parents = {pid: _parent(pid) for pid in _pids()}
    doomed, todo = {raylet}, [raylet]
    while todo:
        pid = todo.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        doomed.update(children)
        todo += children
    for pid in doomed:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0
    return int(stat[stat.rindex(")") + 2 :].split()[1])


if __name__ == "__main__":
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        node = cluster.add_node(num_cpus=1, include_dashboard=False)
        ray.init(address=cluster.address, log_to_driver=False)
        raylet = node.all_processes["raylet"][0].process.pid
        out = anyio.run(main, Path(sys.argv[1]), raylet, backend=sys.argv[2])
        print(json.dumps(out), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
