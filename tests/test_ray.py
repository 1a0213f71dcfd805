"""tether.ray: RayRuntime over a local Ray cluster of 2 hosts, from asyncio and trio callers.

The cluster is started once per session (``ray_cluster``); each test makes its
own RayRuntime (two host processes). All but one test are in the slow tier
(``pytest -m slow``); the default tier keeps the first, a run on Ray ending as on
a plain Runtime, so it still starts a cluster and runs on its hosts. Hosts read
their API keys from their own environment: the cluster is started with
``OPENAI_API_KEY`` set for its workers only, and no key is given to any provider here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import tether
from tether import events as ev
from tether.providers import Reply, ScriptedProvider, ToolCall

from .helpers import task_names
from .providers import openai_wire as oai
from .providers.fakes import fake_server, json_answer
from .ray_cluster import HOST_KEY

ray = pytest.importorskip("ray", reason="the 'ray' extra is not installed")

from tether.ray import RayRunHandle, RayRuntime  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.timeout(120)]


@tether.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _adder(name: str = "adder", **kw: Any) -> tether.Agent:
    """Two rounds: a tool call, then the answer (per run: the script follows call_index)."""

    def script(request: Any, ctx: Any) -> Reply:
        if ctx.call_index == 0:
            return Reply(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})])
        return Reply(text="The sum is 5.")

    return tether.Agent(name=name, provider=ScriptedProvider(script, **kw), tools=[add])


def _walker(rounds: int, latency_s: float, name: str = "walker") -> tether.Agent:
    """``rounds`` tool rounds, each model call taking ``latency_s``, then an answer."""

    def script(request: Any, ctx: Any) -> Reply:
        if ctx.call_index < rounds:
            return Reply(tool_calls=[ToolCall(name="add", arguments={"a": ctx.call_index, "b": 1})])
        return Reply(text="walked")

    return tether.Agent(
        name=name, provider=ScriptedProvider(script, latency_s=latency_s), tools=[add]
    )


def _shape(events: Any) -> list[tuple[str, int]]:
    """Each event's type and round: what two runs of one agent have alike."""
    return [(type(e).__name__, e.round) for e in events]


def _gap_free(events: Any) -> bool:
    return [e.seq for e in events] == list(range(len(events)))


async def _settled(rt: RayRuntime, *, runs: int = 0) -> None:
    """Nothing is left on any live host: ``runs`` in flight, and no reader's cursor."""
    with anyio.fail_after(15):
        while True:
            await anyio.sleep(0.6)  # the monitor refreshes the hosts' reports
            live = [info for info in rt.hosts if info is not None]
            if sum(i.running for i in live) == runs and not any(i.follows for i in live):
                return


async def test_runs_end_as_on_a_plain_runtime_with_the_same_trail(ray_cluster: None) -> None:
    """The result and the event trail of a run through RayRuntime are those of the same
    run on a plain Runtime: termination, output, usage, and the events in order."""
    agent = _adder()
    async with tether.Runtime() as rt:
        plain = await rt.run(agent, "2 + 3?")
    async with RayRuntime(hosts=2, agents=[agent]) as rrt:
        handle = rrt.start(agent, "2 + 3?")
        streamed = [e async for e in handle.events()]
        result = await handle.result()
        await _settled(rrt)
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == plain.output == "The sum is 5."
    assert result.usage == plain.usage
    assert result.summary() == plain.summary() == "Model → Tools(1) → Model → answered"
    assert _shape(result.events) == _shape(plain.events)
    assert _shape(streamed) == _shape(plain.events)
    assert [ev.dump(e) for e in streamed] == [ev.dump(e) for e in result.events]
    assert _gap_free(result.events)
    assert handle.done


@pytest.mark.slow
async def test_deltas_and_text_stream_from_the_host(ray_cluster: None) -> None:
    """events(deltas=True) and stream_text() asked right after start() get all the text."""
    text = "tether streams text from a host to its caller"
    agent = tether.Agent(
        name="talker",
        provider=ScriptedProvider([Reply(text=text)], chunk_size=4, chunk_latency_s=0.005),
    )
    async with RayRuntime(hosts=2, agents=[agent]) as rt:
        handle = rt.start(agent, "talk")
        chunks = [c async for c in handle.stream_text()]
        result = await handle.result()
        # Its host forgets a result once collected: the handle reads its events itself.
        assert [e async for e in handle.events()] == list(result.events)
        second = rt.start(agent, "talk")
        live = [e async for e in second.events(deltas=True)]
        kept = (await second.result()).events
        await _settled(rt)
    assert "".join(chunks) == text == result.output
    assert len(chunks) > 1
    deltas = [e for e in live if isinstance(e, ev.TextDelta)]
    assert "".join(d.text for d in deltas) == text
    assert [e for e in live if not isinstance(e, ev.TextDelta | ev.ToolCallDelta)] == list(kept)


@pytest.mark.slow
async def test_runs_go_to_the_least_loaded_host(ray_cluster: None) -> None:
    """Ten slow runs started at once are spread evenly over two hosts."""
    agent = _walker(rounds=1, latency_s=2.0)
    async with RayRuntime(hosts=2, agents=[agent]) as rt:
        handles = [rt.start(agent, f"walk {i}") for i in range(10)]
        await anyio.sleep(1.0)  # the hosts have reported their load since
        running = [info.running for info in rt.hosts if info is not None]
        assert running == [5, 5]
        results = [await h.result() for h in handles]
    assert {r.termination for r in results} == {tether.Termination.ANSWERED}


@pytest.mark.slow
async def test_a_cancel_reaches_the_run_on_its_host(ray_cluster: None) -> None:
    """cancel() ends the run on the host that holds it, with the reason; stop() ends it
    after its round; the event stream ends with the run."""
    agent = _walker(rounds=50, latency_s=0.2)
    async with RayRuntime(hosts=2, agents=[agent]) as rt:
        cancelled = rt.start(agent, "walk", host=1)
        stopped = rt.start(agent, "walk", host=0)
        stream = cancelled.events()
        async for event in stream:
            if isinstance(event, ev.ToolCallFinished):
                break
        cancelled.cancel("enough walking")
        stopped.stop()
        rest = [e async for e in stream]
        result = await cancelled.result()
        gently = await stopped.result()
        await _settled(rt)
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "enough walking"
    assert isinstance(rest[-1], ev.RunFinished)
    assert rest[-1].termination is tether.Termination.CANCELLED
    assert gently.termination is tether.Termination.CANCELLED
    assert gently.error == "stopped"


@pytest.mark.slow
async def test_a_caller_cancelled_while_waiting_cancels_the_run(ray_cluster: None) -> None:
    """rt.run() cancelled by its caller cancels the run on the host; nothing stays there."""
    agent = _walker(rounds=50, latency_s=0.2)
    async with RayRuntime(hosts=2, agents=[agent]) as rt:
        with anyio.move_on_after(0.5):
            await rt.run(agent, "walk", run_id="walk-1")
        result = await rt.handle("walk-1").result()
        assert result.termination is tether.Termination.CANCELLED
        assert result.error == "the caller of RayRuntime.run() was cancelled"
        await _settled(rt)


@pytest.mark.slow
async def test_a_stream_closed_early_frees_its_cursor_on_the_host(ray_cluster: None) -> None:
    """A reader that stops (aclose) leaves nothing on the host while the run goes on."""
    agent = _walker(rounds=50, latency_s=0.1)
    async with RayRuntime(hosts=2, agents=[agent]) as rt:
        handle = rt.start(agent, "walk")
        stream = handle.events(deltas=True)
        async for _ in stream:
            break
        await stream.aclose()
        await _settled(rt, runs=1)
        handle.cancel()
        assert (await handle.result()).termination is tether.Termination.CANCELLED
        await _settled(rt)


@pytest.mark.slow
async def test_readers_cancelled_while_they_wait_leave_nothing_behind(ray_cluster: None) -> None:
    """Many streams of runs on one host share its feed: readers cancelled while they wait
    for the feed (for their cursor, or for news), then closed, leave no cursor on the
    host and no task in the caller, and the others' streams go on to the end."""
    agent = _walker(rounds=400, latency_s=0.05)  # 20 s: in flight until cancelled
    async with RayRuntime(hosts=1, agents=[agent]) as rt:
        await anyio.sleep(0.1)  # the monitor's tasks are up
        before = task_names()
        handles = [rt.start(agent, "walk") for _ in range(6)]
        streams = [handle.events(deltas=True) for handle in handles]
        kept: list[list[Any]] = [[] for _ in streams]

        async def read(k: int) -> None:
            async for event in streams[k]:
                kept[k].append(event)

        async with anyio.create_task_group() as first:  # cancelled before their cursor
            for k in range(3):
                first.start_soon(read, k)
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            first.cancel_scope.cancel()
        async with anyio.create_task_group() as rest:  # cancelled waiting for news
            for k in range(3, 6):
                rest.start_soon(read, k)
            with anyio.fail_after(30):
                while not all(kept[k] for k in range(3, 6)):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            rest.cancel_scope.cancel()
        for stream in streams:
            await stream.aclose()
        await _settled(rt, runs=6)
        for handle in handles:
            handle.cancel()
        for handle in handles:  # cancelled (or past the agent's max_steps meanwhile)
            assert (await handle.result()).termination in {
                tether.Termination.CANCELLED,
                tether.Termination.MAX_STEPS,
            }
        # A new reader of a finished run reads its whole trail from the host.
        again = [e async for e in handles[0].events()]
        assert isinstance(again[-1], ev.RunFinished)
        await _settled(rt)
        with anyio.fail_after(15):
            while task_names() - before:  # noqa: ASYNC110
                await anyio.sleep(0.1)


@pytest.mark.slow
async def test_ray_restarts_a_killed_host_and_runs_go_there_again(ray_cluster: None) -> None:
    """Within its restart policy a killed host comes back (a new process), takes runs
    again, and gets the agents it lost with its old process sent anew."""
    agent = _adder()
    late = _adder(name="late")  # not given at construction: shipped with its first run
    async with RayRuntime(hosts=2, agents=[agent], host_options={"max_restarts": 1}) as rt:
        first = rt.start(late, "2 + 3?", host=0)
        assert (await first.result()).output == "The sum is 5."
        old = rt.hosts[0]
        assert old is not None
        ray.kill(rt.host_actor(0), no_restart=False)
        with anyio.fail_after(60):
            while (info := rt.hosts[0]) is None or info.pid == old.pid:  # noqa: ASYNC110
                await anyio.sleep(0.2)
        again = rt.start(late, "2 + 3?", host=0)
        assert (await again.result()).output == "The sum is 5."
        assert (await rt.run(agent, "2 + 3?")).output == "The sum is 5."


@pytest.mark.slow
async def test_a_cancel_reaches_a_run_resumed_on_another_host(
    ray_cluster: None, tmp_path: Path
) -> None:
    """A run whose host died, cancelled while it is between hosts, ends cancelled once
    the other host has it (the request waits in the store)."""
    agent = _walker(rounds=50, latency_s=0.2)
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.05)
    async with RayRuntime(
        hosts=2, agents=[agent], store=store, lease_s=1.0, host_options={"max_restarts": 0}
    ) as rt:
        handle = rt.start(agent, "walk", host=0)
        async for event in handle.events():
            if isinstance(event, ev.ToolCallFinished):
                break
        ray.kill(rt.host_actor(0))
        handle.cancel("changed my mind")
        result = await handle.result()
        await _settled(rt)
    assert result.termination is tether.Termination.CANCELLED
    assert result.error == "changed my mind"
    assert sum(isinstance(e, ev.RunFinished) for e in result.events) == 1
    assert _gap_free(result.events)


@pytest.mark.slow
async def test_bad_arguments_are_clear_errors(ray_cluster: None, tmp_path: Path) -> None:
    """What cannot work is refused where it is given, with what to do instead."""
    with pytest.raises(ValueError, match="hosts"):
        RayRuntime(hosts=0)
    with pytest.raises(ValueError, match="host_timeout_s"):
        RayRuntime(host_timeout_s=0)
    with pytest.raises(ValueError, match="provider_concurrency"):
        RayRuntime(hosts=4, provider_concurrency=2)
    with pytest.raises(ValueError, match="every host reaches"):
        RayRuntime(conversations=tether.InMemoryConversationStore())
    with pytest.raises(TypeError, match="RunStore"):
        RayRuntime(store="runs.db")  # type: ignore[arg-type]
    agent = _adder()
    with pytest.raises(ValueError, match="names must be unique"):
        RayRuntime(agents=[agent, _adder()])
    rt = RayRuntime(hosts=1, agents=[agent])
    with pytest.raises(RuntimeError, match="async with"):
        rt.start(agent, "too early")
    async with rt:
        with pytest.raises(TypeError, match=r"tether\.Agent"):
            rt.start("adder", "x")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="ModelSettings"):
            rt.start(agent, "x", settings={"temperature": 0})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="conversation store"):
            rt.start(agent, "x", conversation="c-1")
        with pytest.raises(ValueError, match="host index"):
            rt.start(agent, "x", host=3)
        with pytest.raises(ValueError, match="unique"):
            rt.start(_adder(), "x")  # another agent under a known name
        assert (await rt.run(agent, "still fine")).ok


@pytest.mark.slow
async def test_a_dead_hosts_runs_end_crashed_without_a_store(ray_cluster: None) -> None:
    """No store shared by the hosts: a run whose host is killed ends ``crashed`` with the
    reason, exactly once, in its result and at the end of its event stream; a run on the
    other host is untouched."""
    agent = _walker(rounds=30, latency_s=0.2)
    async with RayRuntime(hosts=2, agents=[agent], host_options={"max_restarts": 0}) as rt:
        doomed = rt.start(agent, "walk", host=0)
        safe = rt.start(_walker(rounds=2, latency_s=0.2, name="short"), "walk", host=1)
        stream = doomed.events()
        seen = []
        async for event in stream:
            seen.append(event)
            if isinstance(event, ev.ToolCallFinished):
                break
        ray.kill(rt.host_actor(0))
        seen += [e async for e in stream]
        result = await doomed.result()
        assert (await safe.result()).termination is tether.Termination.ANSWERED
    assert result.termination is tether.Termination.CRASHED
    assert result.error is not None
    assert "died" in result.error
    assert "no run store" in result.error
    finished = [e for e in seen if isinstance(e, ev.RunFinished)]
    assert len(finished) == 1
    assert finished[0].termination is tether.Termination.CRASHED
    assert _gap_free(seen)
    assert result.events[-1] == finished[0]


@pytest.mark.slow
async def test_a_killed_host_s_runs_resume_on_the_other_host(
    ray_cluster: None, tmp_path: Path
) -> None:
    """With a store shared by the hosts, killing one host mid-run leaves every run ending
    exactly once, resumed on the other host from its checkpoint: each result's trail is
    gap-free and has one RunResumed; each caller's stream went on after the seam."""
    agent = _walker(rounds=6, latency_s=0.3)
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.05)
    async with RayRuntime(
        hosts=2, agents=[agent], store=store, lease_s=1.0, host_options={"max_restarts": 0}
    ) as rt:
        handles = [rt.start(agent, f"walk {i}", host=i % 2) for i in range(6)]
        streams: dict[str, list[ev.Event]] = {}

        async def follow(handle: Any) -> None:
            streams[handle.run_id] = [e async for e in handle.events()]

        async with anyio.create_task_group() as tg:
            for handle in handles:
                tg.start_soon(follow, handle)
            await anyio.sleep(1.0)
            dead_owner = rt.hosts[0].owner  # type: ignore[union-attr]
            ray.kill(rt.host_actor(0))
        results = [await h.result() for h in handles]
    for i, (handle, result) in enumerate(zip(handles, results, strict=True)):
        assert result.termination is tether.Termination.ANSWERED, result.error
        assert result.output == "walked"
        assert _gap_free(result.events)
        assert sum(isinstance(e, ev.RunFinished) for e in result.events) == 1
        resumed = [e for e in result.events if isinstance(e, ev.RunResumed)]
        stream = streams[handle.run_id]
        assert isinstance(stream[-1], ev.RunFinished)
        assert sum(isinstance(e, ev.RunFinished) for e in stream) == 1
        if i % 2 == 0:  # on the killed host
            assert len(resumed) == 1
            assert resumed[0].previous_owner == dead_owner
            assert any(isinstance(e, ev.RunResumed) for e in stream)
            # The stream is the result's trail, but for the events of the round in
            # flight at the crash, which it showed before it rewound to the seam.
            seam = resumed[0].seq
            at = next(n for n, e in enumerate(stream) if isinstance(e, ev.RunResumed))
            assert stream[:seam] == list(result.events[:seam])
            assert stream[at:] == list(result.events[seam:])
        else:
            assert resumed == []
            assert stream == list(result.events)


@pytest.mark.slow
async def test_a_parked_run_is_approved_through_any_host(ray_cluster: None, tmp_path: Path) -> None:
    """A durable run held for approval parks in the store; rt.pending_approvals and
    rt.approve reach it from the RayRuntime, and the handle's result is the answer."""
    from .test_resume import _agent, _script

    agent = _agent(_script())
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.05)
    async with RayRuntime(hosts=2, agents=[agent], store=store, lease_s=2.0) as rt:
        handle = rt.start(agent, "pay bob 5", run_id="pay-1")
        while not (pending := await rt.pending_approvals("pay-1")):  # noqa: ASYNC110
            await anyio.sleep(0.05)
        assert [(p.call_id, p.name) for p in pending] == [("call_1", "send_money")]
        await rt.approve("pay-1", "call_1")
        result = await handle.result()
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == "Done."
    approved = [e for e in result.events if isinstance(e, ev.ApprovalAnswered)]
    assert [(e.call_id, e.approved) for e in approved] == [("call_1", True)]


@pytest.mark.slow
async def test_a_429_pauses_that_endpoint_on_every_host(ray_cluster: None) -> None:
    """Host 0 gets a 429 with retry-after: 1; a run started on host 1 just after waits
    the pause out (ProviderWait) before it sends. Each host sent its own environment's
    key (none was pickled)."""
    limited = json_answer(
        oai.error_body("slow down", "rate_limit_error"), status=429, headers=[("retry-after", "1")]
    )
    async with fake_server(limited, oai.reply(False), oai.reply(False)) as server:
        agent = tether.Agent(
            name="limited",
            provider=tether.providers.OpenAIProvider(
                oai.MODEL, base_url=f"{server.url}/v1", stream=False
            ),
        )
        async with RayRuntime(hosts=2, agents=[agent]) as rt:
            first = rt.start(agent, "hi", host=0)
            while not server.requests:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            await anyio.sleep(0.2)
            second = rt.start(agent, "hi", host=1)
            a, b = await first.result(), await second.result()
    assert a.termination is b.termination is tether.Termination.ANSWERED
    assert any(isinstance(e, ev.ProviderRetry) for e in a.events)
    waits = [e for e in b.events if isinstance(e, ev.ProviderWait)]
    assert len(waits) == 1
    assert 0.3 < waits[0].wait_s <= 1.0
    assert not any(isinstance(e, ev.ProviderRetry) for e in b.events)
    assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {HOST_KEY}"}
    assert os.environ.get("OPENAI_API_KEY") != HOST_KEY


@pytest.mark.slow
async def test_a_handle_from_run_id_follows_a_run_it_did_not_start(ray_cluster: None) -> None:
    """rt.handle(run_id) finds the host holding a run and reads it like the starting handle."""
    agent = _walker(rounds=2, latency_s=0.1)
    async with RayRuntime(hosts=2, agents=[agent]) as rt:
        started = rt.start(agent, "walk", run_id="walk-9", host=1)
        assert rt.handle("walk-9") is started
        fresh = RayRunHandle(rt, "walk-9", None, None)  # what rt.handle(id) makes
        events = [e async for e in fresh.events()]
        result = await fresh.result()
        assert result.output == "walked"
        assert events == list(result.events)
        with pytest.raises(KeyError, match="no host has run 'nobody'"):
            await rt.handle("nobody").result()


@pytest.mark.slow
async def test_a_conversation_stays_on_one_host(ray_cluster: None, tmp_path: Path) -> None:
    """The runs of one conversation go to one host, in order; the second sees the first."""
    seen: list[int] = []

    def script(request: Any, ctx: Any) -> Reply:
        seen.append(len(request.messages))
        return Reply(text=f"turn with {len(request.messages)} messages")

    agent = tether.Agent(name="chat", provider=ScriptedProvider(script))
    chats = tether.SQLiteConversationStore(tmp_path / "chats.db")
    async with RayRuntime(hosts=2, agents=[agent], conversations=chats) as rt:
        first = rt.start(agent, "hello", conversation="c-1")
        second = rt.start(agent, "again", conversation="c-1")
        one, two = await first.result(), await second.result()
    assert one.output == "turn with 1 messages"
    assert two.output == "turn with 3 messages"
    assert len(two.messages) == 4


@pytest.mark.slow
async def test_waiting_handles_hold_no_thread(ray_cluster: None) -> None:
    """Two hundred callers waiting on results (and as many on events) add no thread."""
    import threading

    agent = _walker(rounds=1, latency_s=1.5)
    async with RayRuntime(hosts=2, agents=[agent]) as rt:
        before = threading.active_count()
        handles = [rt.start(agent, f"walk {i}") for i in range(200)]
        results: list[Any] = []
        during: list[int] = []

        async def wait(handle: Any) -> None:
            async for _ in handle.events():
                pass
            results.append(await handle.result())

        async with anyio.create_task_group() as tg:
            for handle in handles:
                tg.start_soon(wait, handle)
            await anyio.sleep(1.0)
            during.append(threading.active_count())
    assert len(results) == 200
    assert {r.termination for r in results} == {tether.Termination.ANSWERED}
    assert during[0] - before < 10


@pytest.mark.slow
async def test_provider_concurrency_holds_across_the_fleet(ray_cluster: None) -> None:
    """provider_concurrency=2 over 2 hosts: the endpoint never serves more than 2
    requests at once, though 8 runs on both hosts want it at the same time."""
    from anyio.abc import SocketAttribute

    from .providers.fakes import _read_request, _send

    now = peak = served = 0

    async def handle(stream: Any) -> None:
        nonlocal now, peak, served
        async with stream:
            if await _read_request(stream, 0) is None:
                return
            now += 1
            peak = max(peak, now)
            await anyio.sleep(0.3)
            now -= 1
            served += 1
            await _send(stream, oai.reply(False))

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        port = listener.extra(SocketAttribute.local_port)
        agent = tether.Agent(
            name="busy",
            provider=tether.providers.OpenAIProvider(
                oai.MODEL, base_url=f"http://127.0.0.1:{port}/v1", stream=False
            ),
        )
        async with RayRuntime(hosts=2, agents=[agent], provider_concurrency=2) as rt:
            handles = [rt.start(agent, f"hi {i}", host=i % 2) for i in range(8)]
            results = [await h.result() for h in handles]
        tg.cancel_scope.cancel()
    assert {r.termination for r in results} == {tether.Termination.ANSWERED}
    assert served == 8
    assert peak == 2


def _spender(name: str, max_tokens: int) -> tether.Agent:
    """Replies of 13 to 750 tokens, chosen from the input's length; at most ``max_tokens``."""
    from .test_fleet_budget import Capped

    def script(request: Any, ctx: Any) -> Reply:
        words = 10 + (len(request.messages[0].text) * 7919) % 590
        return Reply(text="word " * words)

    return tether.Agent(name=name, provider=Capped(script, max_tokens=max_tokens, latency_s=0.01))


async def _refused(rt: RayRuntime, agent: tether.Agent) -> bool:
    """start() raises BudgetExhausted once the monitor has learnt that the ledger is dry."""
    for _ in range(50):
        try:
            rt.start(agent, "one more")
        except tether.runtime.BudgetExhausted:
            return True
        await anyio.sleep(0.1)
    return False


@pytest.mark.slow
async def test_four_hosts_and_400_runs_hold_one_fleet_budget(ray_cluster: None) -> None:
    """limits= over 4 hosts, 400 runs at once: the fleet spends its whole budget and
    overshoots it by no more than the stated bound (the input of the calls that crossed
    a host's grant); output never passes it; usage is exact; every run ends once."""
    import random

    ceiling = 20_000
    rng = random.Random(7)
    agents = [_spender("short", 256), _spender("long", 512)]
    async with RayRuntime(
        hosts=4, agents=agents, limits=tether.Limits(max_total_tokens=ceiling)
    ) as rt:
        handles = [
            rt.start(agents[i % 2], "x" * rng.randrange(200, 2_000), host=i % 4) for i in range(400)
        ]
        results = [await h.result() for h in handles]
        budget = await rt.budget()
        assert await _refused(rt, agents[0])
    assert budget is not None
    for result in results:
        assert sum(isinstance(e, ev.RunFinished) for e in result.events) == 1
        charged = [e for e in result.events if isinstance(e, ev.UsageCharged)]
        assert result.usage.input_tokens == sum(c.input_tokens for c in charged)
        assert result.usage.output_tokens == sum(c.output_tokens for c in charged)
    spent = sum(r.usage.total_tokens for r in results)
    assert budget.ledger["used_tokens"] == spent  # what the hosts reported is what runs spent
    assert sum(r.usage.output_tokens for r in results) <= ceiling
    crossings = sum(s["crossings"] for s in budget.hosts if s is not None)
    biggest_input = max(
        c.input_tokens for r in results for c in r.events if isinstance(c, ev.UsageCharged)
    )
    assert ceiling <= spent <= ceiling + crossings * biggest_input
    ended = [r for r in results if r.termination is tether.Termination.TOKEN_CEILING]
    assert ended
    assert {r.termination for r in results} <= {
        tether.Termination.TOKEN_CEILING,
        tether.Termination.ANSWERED,
        tether.Termination.MAX_CONTINUES,
    }
    for result in ended:
        hits = [e for e in result.events if isinstance(e, ev.CeilingHit)]
        assert [(h.ceiling, h.limit) for h in hits] == [("runtime.max_total_tokens", ceiling)]


async def test_submit_returns_once_the_run_is_in_the_store(
    ray_cluster: None, tmp_path: Path
) -> None:
    """RayRuntime.submit returns when the host has recorded the run: the store has it at
    once; without a store it is start. An unknown id is tether.RunNotFound."""
    agent = _walker(rounds=2, latency_s=0.2)
    store = tether.SQLiteRunStore(tmp_path / "runs.db", poll_s=0.05)
    async with RayRuntime(hosts=2, agents=[agent], store=store) as rt:
        handle = await rt.submit(agent, "walk", run_id="sub-1", host=1)
        stored = await store.get("sub-1")
        assert stored is not None
        assert (stored.agent, stored.input) == ("walker", "walk")
        with pytest.raises(ValueError, match="sub-1"):
            await rt.submit(agent, "again", run_id="sub-1", host=0)  # the store has it
        result = await handle.result()
        assert result.output == "walked"
    assert (await store.get("sub-1")).status == "finished"  # type: ignore[union-attr]
    await store.aclose()
    async with RayRuntime(hosts=1, agents=[agent]) as rt:
        plain = await rt.submit(agent, "walk")
        assert (await plain.result()).output == "walked"
        with pytest.raises(tether.RunNotFound, match="no host has run 'nobody'"):
            await rt.handle("nobody").result()


class _Ref:
    """What wait_ref needs of a Ray ObjectRef: its concurrent future."""

    def __init__(self) -> None:
        from concurrent.futures import Future

        self.done: Future[Any] = Future()

    def future(self) -> Any:
        return self.done


async def test_a_watch_gives_up_every_wait_on_its_host_at_once() -> None:
    """Watch.give_up ends the waits on its host with HostGone, and only those; a value
    that Ray's thread sets later still reaches a wait of another host; nothing stays
    registered (no cluster needed: the refs are futures completed from a thread)."""
    import threading

    from tether.ray._bridge import HostGone, Watch, wait_ref

    lost, kept = Watch(), Watch()
    refs = [_Ref() for _ in range(3)]
    outcomes: list[object] = []

    async def wait(ref: _Ref, watch: Watch) -> None:
        try:
            outcomes.append(await wait_ref(ref, watch))
        except HostGone:
            outcomes.append("gone")

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, refs[0], lost)
        tg.start_soon(wait, refs[1], lost)
        tg.start_soon(wait, refs[2], kept)
        await anyio.wait_all_tasks_blocked()
        assert (lost.waiting, kept.waiting) == (2, 1)
        lost.give_up()
        await anyio.wait_all_tasks_blocked()
        assert outcomes == ["gone", "gone"]
        threading.Thread(target=refs[2].done.set_result, args=(42,)).start()
    assert outcomes == ["gone", "gone", 42]
    assert (lost.waiting, kept.waiting, lost.gave_up, kept.gave_up) == (0, 0, 1, 0)
    ready = _Ref()
    ready.done.set_result("at once")
    assert await wait_ref(ready, lost) == "at once"  # a finished call is never given up
