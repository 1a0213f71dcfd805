"""tether.a2a: a tether agent served over A2A, called by a2a-sdk's client and by A2AAgent.

Every server here runs in the test's own event loop on a real loopback socket:
uvicorn on asyncio, hypercorn on trio.
"""

from __future__ import annotations

import gc
import json
import socket
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

import tether
from tether import events as ev
from tether.a2a import USAGE_KEY, A2AAgent, serve
from tether.a2a._client import _unwind
from tether.providers import (
    ModelRequest,
    ProviderContext,
    Reply,
    ScriptedProvider,
    ToolCall,
    ToolResultBlock,
)

from .browser import free_port
from .helpers import task_names

pytestmark = pytest.mark.anyio

ANSWER = "The answer is forty-two, as computed with care."


@asynccontextmanager
async def served(
    agent: tether.Agent, rt: tether.Runtime, backend: str, **options: Any
) -> AsyncIterator[str]:
    """Serve ``agent`` over A2A on 127.0.0.1 inside this loop; yield its base URL."""
    url = f"http://127.0.0.1:{free_port()}"
    async with served_app(serve(agent, runtime=rt, url=url + "/", **options), url, backend):
        yield url


@asynccontextmanager
async def served_app(app: Any, url: str, backend: str) -> AsyncIterator[None]:
    """Serve ``app`` at ``url`` (127.0.0.1) inside this loop: uvicorn or hypercorn-on-trio."""
    port = int(url.rsplit(":", 1)[1])
    async with anyio.create_task_group() as tg:
        if backend == "asyncio":
            import uvicorn

            config = uvicorn.Config(
                app, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
            )
            server = uvicorn.Server(config)
            tg.start_soon(server.serve)
            while not server.started:  # noqa: ASYNC110  (uvicorn offers a flag, not an event)
                await anyio.sleep(0.01)
            try:
                yield
            finally:
                server.should_exit = True
        else:
            from hypercorn.config import Config
            from hypercorn.trio import serve as hyper

            config = Config()
            config.bind = [f"127.0.0.1:{port}"]
            config.loglevel = "WARNING"
            config.graceful_timeout = 0.2  # a hanging fake server's requests end at once
            done = anyio.Event()
            tg.start_soon(lambda: hyper(app, config, shutdown_trigger=done.wait))  # type: ignore[arg-type]
            for _ in range(500):
                try:
                    s = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.01)
                    continue
                await s.aclose()
                break
            try:
                yield
            finally:
                done.set()
    if backend == "trio":
        # hypercorn's trio server leaves its listening socket in a reference cycle
        # (its shutdown exception's traceback): collect it here, not in a later test.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


@asynccontextmanager
async def serving(
    agent: tether.Agent, backend: str, **runtime: Any
) -> AsyncIterator[tuple[tether.Runtime, str, httpx.AsyncClient]]:
    """A Runtime, ``agent`` served on it, and an HTTP client."""
    async with (
        tether.Runtime(**runtime) as rt,
        served(agent, rt, backend) as url,
        httpx.AsyncClient() as http,
    ):
        yield rt, url, http


def answering(text: str = ANSWER, latency_s: float = 0.0) -> tether.Agent:
    """An agent that answers ``text`` in pieces of 4 characters."""
    provider = ScriptedProvider(
        [Reply(text=text)], latency_s=latency_s, chunk_size=4, chunk_latency_s=0.001
    )
    return tether.Agent(name="answerer", instructions="Answer.", provider=provider)


@tether.tool
async def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


def count_script(request: ModelRequest, ctx: ProviderContext) -> Reply:
    last = request.messages[-1]
    results = [b.content for b in last.content if isinstance(b, ToolResultBlock)]
    if not results:
        return Reply(
            text="Counting.",
            tool_calls=[ToolCall(name="word_count", arguments={"text": last.text})],
        )
    return Reply(text=f"Your input has {results[0]} words.")


def ask_first(point: tether.PolicyPoint, subject: object) -> tether.Verdict | None:
    return tether.Verdict.ask("a human approves each call") if point == "tool_call" else None


def guarded() -> tether.Agent:
    """An agent whose one tool call waits for approval."""
    return tether.Agent(
        name="guarded",
        instructions="Count the words.",
        provider=ScriptedProvider(count_script),
        tools=[word_count],
        policies=[ask_first],
    )


@tether.tool
async def forever() -> str:
    """Never returns."""
    await anyio.sleep_forever()
    return ""


def stuck() -> tether.Agent:
    """An agent that calls a tool that never returns."""
    provider = ScriptedProvider([Reply(tool_calls=[ToolCall(name="forever", arguments={})])])
    return tether.Agent(name="stuck", instructions="Wait.", provider=provider, tools=[forever])


def user_message(text: str, **ids: str) -> pb.Message:
    return pb.Message(
        message_id="m-" + text[:8], role=pb.Role.ROLE_USER, parts=[pb.Part(text=text)], **ids
    )


async def sdk_client(url: str, http: httpx.AsyncClient, *, streaming: bool = True) -> Any:
    return await create_client(url, ClientConfig(streaming=streaming, httpx_client=http))


# ------------------------------------------------------------ a2a-sdk's client


async def test_sdk_client_streams_a_task_to_completion(anyio_backend: str) -> None:
    """The SDK's streaming client gets the task, its text as it streams, the answer
    artifact and a completed status whose metadata carries tether's usage."""
    async with serving(answering(), anyio_backend) as (_rt, url, http):
        card = (await http.get(url + "/.well-known/agent-card.json")).json()
        assert card["name"] == "answerer"
        assert card["capabilities"]["streaming"] is True
        client = await sdk_client(url, http)
        updates = [
            u
            async for u in client.send_message(
                pb.SendMessageRequest(message=user_message("what is it?"))
            )
        ]
    kinds = [u.WhichOneof("payload") for u in updates]
    assert kinds[0] == "task"
    deltas = [
        u.status_update.status.message.parts[0].text
        for u in updates
        if u.WhichOneof("payload") == "status_update"
        and u.status_update.status.state == pb.TaskState.TASK_STATE_WORKING
    ]
    assert len(deltas) > 1
    assert "".join(deltas) == ANSWER
    artifact = next(u.artifact_update.artifact for u in updates if u.HasField("artifact_update"))
    assert artifact.name == "answer"
    assert artifact.parts[0].text == ANSWER
    final = updates[-1].status_update
    assert final.status.state == pb.TaskState.TASK_STATE_COMPLETED
    usage = json_format.MessageToDict(final.metadata)[USAGE_KEY]
    assert usage["output_tokens"] > 0
    assert usage["input_tokens"] > 0


async def test_sdk_client_input_required_then_approval_completes(anyio_backend: str) -> None:
    """A held tool call is an input-required task listing the call; the answer
    'approve' in the same task lets the call run and the task completes."""
    async with serving(guarded(), anyio_backend) as (_rt, url, http):
        client = await sdk_client(url, http, streaming=False)
        [first] = [
            u
            async for u in client.send_message(
                pb.SendMessageRequest(message=user_message("one two three"))
            )
        ]
        task = first.task
        assert task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
        data = json_format.MessageToDict(task.status.message.parts[1].data)
        [held] = data["approvals"]
        assert held["tool"] == "word_count"
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert got.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
        answer = user_message("approve", task_id=task.id, context_id=task.context_id)
        [second] = [u async for u in client.send_message(pb.SendMessageRequest(message=answer))]
        done = second.task
        assert done.id == task.id
        assert done.context_id == task.context_id
        assert done.status.state == pb.TaskState.TASK_STATE_COMPLETED
        assert done.artifacts[0].parts[0].text == "Your input has 3 words."
        again = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert again.status.state == pb.TaskState.TASK_STATE_COMPLETED


async def test_sdk_client_streams_input_required_then_rejection(anyio_backend: str) -> None:
    """Streamed: the task stops at input-required; a streamed 'reject <reason>' goes on
    to completion, and the model was told the reason."""
    seen: list[ev.Event] = []
    async with serving(guarded(), anyio_backend, event_sink=seen.append) as (_rt, url, http):
        client = await sdk_client(url, http)
        first = [
            u
            async for u in client.send_message(
                pb.SendMessageRequest(message=user_message("one two"))
            )
        ]
        held = first[-1].status_update
        assert held.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
        answer = user_message("reject not today", task_id=held.task_id)
        second = [u async for u in client.send_message(pb.SendMessageRequest(message=answer))]
        assert second[-1].status_update.status.state == pb.TaskState.TASK_STATE_COMPLETED
    finished = [e for e in seen if isinstance(e, ev.ToolCallFinished)]
    assert finished[0].outcome == "denied"
    assert "not today" in finished[0].content


async def test_sdk_client_cancels_a_working_task(anyio_backend: str) -> None:
    """CancelTask on a working task cancels its run: the task is canceled, and stays so."""
    async with serving(stuck(), anyio_backend) as (rt, url, http):
        client = await sdk_client(url, http, streaming=False)
        request = pb.SendMessageRequest(message=user_message("wait"))
        request.configuration.return_immediately = True
        [first] = [u async for u in client.send_message(request)]
        task_id = first.task.id
        assert first.task.status.state == pb.TaskState.TASK_STATE_WORKING
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=task_id))
        assert canceled.status.state == pb.TaskState.TASK_STATE_CANCELED
        got = await client.get_task(pb.GetTaskRequest(id=task_id))
        assert got.status.state == pb.TaskState.TASK_STATE_CANCELED
        assert rt.in_flight(task_id) is None


async def test_legacy_method_names(anyio_backend: str) -> None:
    """A2A 0.3's method names and JSON (message/send, tasks/get) are answered too."""
    async with serving(answering(), anyio_backend) as (_rt, url, http):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": "m1",
                    "role": "user",
                    "parts": [{"kind": "text", "text": "hi"}],
                }
            },
        }
        sent = (await http.post(url + "/", json=body)).json()["result"]
        assert sent["kind"] == "task"
        assert sent["status"]["state"] == "completed"
        query = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": sent["id"]}}
        got = (await http.post(url + "/", json=query)).json()["result"]
        assert got["status"]["state"] == "completed"
        assert got["artifacts"][0]["parts"][0]["text"] == ANSWER


async def test_bad_requests_get_json_rpc_errors(anyio_backend: str) -> None:
    """Unknown methods, unknown tasks and empty messages are JSON-RPC errors with A2A's codes."""
    async with serving(answering(), anyio_backend) as (_rt, url, http):

        async def call(method: str, params: Any) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
            answer: dict[str, Any] = (await http.post(url + "/", json=body)).json()
            return answer["error"]

        assert (await call("Nope", {}))["code"] == -32601
        assert (await call("GetTask", {"id": "task-x"}))["code"] == -32001
        assert (await call("SendMessage", {"message": {"parts": []}}))["code"] == -32602
        assert (await http.post(url + "/", content=b"{nope")).json()["error"]["code"] == -32700


# ------------------------------------------------------------------- A2AAgent


def delegating(remote: tether.ToolSpec, task: str = "what is it?") -> tether.Agent:
    """A caller that hands ``task`` to the remote tool, then answers with its result."""

    def script(request: ModelRequest, ctx: ProviderContext) -> Reply:
        last = request.messages[-1]
        results = [b for b in last.content if isinstance(b, ToolResultBlock)]
        if not results:
            return Reply(tool_calls=[ToolCall(name=remote.name, arguments={"task": task})])
        verdict = "error" if results[0].is_error else "ok"
        return Reply(text=f"{verdict}: {results[0].content}")

    return tether.Agent(
        name="caller", instructions="Delegate.", provider=ScriptedProvider(script), tools=[remote]
    )


async def test_a2a_agent_streams_and_charges_the_remote_usage(anyio_backend: str) -> None:
    """A tether agent calls a served one through A2AAgent: the remote's text streams
    into the caller as ToolOutputDelta, its answer is the tool result, and the
    usage it reports is charged to the caller (UsageCharged, in its limits)."""
    async with tether.Runtime() as server_rt, served(answering(), server_rt, anyio_backend) as url:
        remote = A2AAgent(url, name="oracle")
        async with tether.Runtime() as rt:
            handle = rt.start(delegating(remote), "ask the oracle")
            deltas: list[str] = []
            async for event in handle.events(deltas=True):
                if isinstance(event, ev.ToolOutputDelta):
                    assert event.name == "oracle"
                    deltas.append(event.text)
            result = await handle.result()
    assert result.termination is tether.Termination.ANSWERED
    assert result.output == f"ok: {ANSWER}"
    assert "".join(deltas) == ANSWER
    charged = [
        e for e in result.events if isinstance(e, ev.UsageCharged) and e.source == "subagent"
    ]
    assert len(charged) == 1
    assert charged[0].output_tokens > 0
    model = [e for e in result.events if isinstance(e, ev.UsageCharged) and e.source == "model"]
    assert result.usage.output_tokens == charged[0].output_tokens + sum(
        e.output_tokens for e in model
    )


async def test_a2a_agent_usage_counts_in_the_runtime_budget(anyio_backend: str) -> None:
    """The remote's usage is charged to the caller's Runtime-wide budget too."""
    async with (
        tether.Runtime() as server_rt,
        served(answering(), server_rt, anyio_backend) as url,
        tether.Runtime(limits=tether.Limits(max_total_tokens=100_000)) as rt,
    ):
        result = await rt.run(delegating(A2AAgent(url)), "go")
        budget = rt.budget
    assert budget is not None
    remote = [e for e in result.events if isinstance(e, ev.UsageCharged) and e.source == "subagent"]
    assert remote[0].output_tokens > 0
    assert budget.tokens == result.usage.input_tokens + result.usage.output_tokens


async def test_a2a_agent_usage_counts_against_the_callers_limits(anyio_backend: str) -> None:
    """The remote's tokens cross the caller's token ceiling: the caller ends token_ceiling."""
    async with tether.Runtime() as server_rt, served(answering(), server_rt, anyio_backend) as url:
        caller = delegating(A2AAgent(url))
        caller = tether.Agent(
            name=caller.name,
            instructions=caller.instructions,
            provider=caller.provider,
            tools=caller.tools,
            limits=tether.Limits(max_total_tokens=40),
        )
        async with tether.Runtime() as rt:
            result = await rt.run(caller, "go")
    assert result.termination is tether.Termination.TOKEN_CEILING
    assert any(isinstance(e, ev.UsageCharged) and e.source == "subagent" for e in result.events)


async def test_cancelling_the_caller_cancels_the_remote_task(anyio_backend: str) -> None:
    """Cancelling the calling run while the remote works cancels the remote task, and
    leaves no task of the caller's behind."""
    remote_events: list[ev.Event] = []
    async with (
        tether.Runtime(event_sink=remote_events.append) as server_rt,
        served(stuck(), server_rt, anyio_backend) as url,
    ):
        before = task_names()
        async with tether.Runtime() as rt:
            handle = rt.start(delegating(A2AAgent(url, name="stuck")), "go")
            for _ in range(1000):  # until the remote's tool is running (the sink is a thread)
                if any(isinstance(e, ev.ToolCallStarted) for e in remote_events):
                    break
                await anyio.sleep(0.01)
            [remote_id] = {e.run_id for e in remote_events}
            assert server_rt.in_flight(remote_id) is not None
            handle.cancel("the user pressed stop")
            result = await handle.result()
        assert result.termination is tether.Termination.CANCELLED
        with anyio.fail_after(10):
            while server_rt.in_flight(remote_id) is not None:  # noqa: ASYNC110  (no event to wait on)
                await anyio.sleep(0.01)
        assert {n for n in task_names() - before if "tether" in n} == set()
    [finished] = [e for e in remote_events if isinstance(e, ev.RunFinished)]
    assert finished.termination is tether.Termination.CANCELLED
    assert finished.error is not None
    assert "A2A" in finished.error


async def test_a2a_agent_failures_are_typed_tool_errors(anyio_backend: str) -> None:
    """A remote task that fails is a model error the model reads; an unreachable
    agent is a transient error (retried, then given up)."""
    failing = tether.Agent(
        name="failing",
        instructions="x",
        provider=ScriptedProvider([Reply(tool_calls=[ToolCall(name="nope", arguments={})])]),
        tools=[word_count],
        limits=tether.Limits(max_steps=1),
    )
    async with (
        tether.Runtime() as server_rt,
        served(failing, server_rt, anyio_backend) as url,
        tether.Runtime() as rt,
    ):
        result = await rt.run(delegating(A2AAgent(url, name="failing")), "go")
    [call] = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    assert call.outcome == "model_error"
    assert "ended failed: max_steps" in call.content
    # The remote's usage is charged even though its task failed.
    assert any(isinstance(e, ev.UsageCharged) and e.source == "subagent" for e in result.events)
    assert result.output is not None
    assert result.output.startswith("error:")

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with tether.Runtime() as rt:
        result = await rt.run(delegating(A2AAgent(dead, name="gone")), "go")
    [call] = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    assert call.outcome == "transient_error"
    assert "unreachable" in call.content


# ---------------------------------------------------------------- durable tasks


async def test_durable_task_survives_a_restart_between_question_and_answer(
    anyio_backend: str, tmp_path: Path
) -> None:
    """On a durable Runtime, a task held for approval outlives its server: a new
    Runtime on the same SQLite store and a new server answer GetTask with
    input-required, and the answer sent there completes the task."""
    path = tmp_path / "runs.db"
    agent = guarded()
    store = tether.SQLiteRunStore(path)
    async with (
        tether.Runtime(store=store, agents=[agent]) as rt,
        served(agent, rt, anyio_backend, store=store) as url,
        httpx.AsyncClient() as http,
    ):
        client = await sdk_client(url, http, streaming=False)
        [first] = [
            u
            async for u in client.send_message(
                pb.SendMessageRequest(message=user_message("one two three"))
            )
        ]
        task = first.task
        assert task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED

    store = tether.SQLiteRunStore(path)  # a new process would open it anew
    async with (
        tether.Runtime(store=store, agents=[agent], resume=True) as rt,
        served(agent, rt, anyio_backend, store=store) as url,
        httpx.AsyncClient() as http,
    ):
        client = await sdk_client(url, http)
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert got.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
        assert got.context_id == task.context_id
        answer = user_message("approve", task_id=task.id, context_id=task.context_id)
        updates = [u async for u in client.send_message(pb.SendMessageRequest(message=answer))]
        final = updates[-1].status_update
        assert final.status.state == pb.TaskState.TASK_STATE_COMPLETED
        assert final.status.message.parts[0].text == "Your input has 3 words."
        done = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert done.status.state == pb.TaskState.TASK_STATE_COMPLETED
        assert done.artifacts[0].parts[0].text == "Your input has 3 words."


# ---------------------------------------------------------------- trace context


async def test_trace_context_crosses_a2a(anyio_backend: str) -> None:
    """With tether.otel in use, the remote run's span is a child of the caller's tool
    call span: one trace across the A2A hop (W3C traceparent)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tether.otel import OtelSink

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with (
        tether.Runtime(event_sink=OtelSink(provider)) as server_rt,
        served(answering(), server_rt, anyio_backend) as url,
        tether.Runtime(event_sink=OtelSink(provider)) as rt,
    ):
        result = await rt.run(delegating(A2AAgent(url, name="oracle")), "go")
    assert result.ok
    provider.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    caller, tool_span = spans["invoke_agent caller"], spans["execute_tool oracle"]
    remote = spans["invoke_agent answerer"]
    assert remote.context.trace_id == caller.context.trace_id
    assert remote.parent is not None
    assert remote.parent.span_id == tool_span.context.span_id


# ------------------------------------------------------- cancellation points


def hanging_app(where: str, card: dict[str, Any]) -> Any:
    """A fake A2A server that hangs at ``where``: the card, or the streamed answer."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def get_card(request: Any) -> Any:
        if where == "card":
            await anyio.sleep_forever()
        return JSONResponse(card)

    async def rpc(request: Any) -> Any:
        await anyio.sleep_forever()

    return Starlette(
        routes=[
            Route("/.well-known/agent-card.json", get_card),
            Route("/", rpc, methods=["POST"]),
        ]
    )


@pytest.mark.parametrize("where", ["card", "stream"])
async def test_cancelled_while_the_remote_hangs(
    anyio_backend: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling the caller while A2AAgent waits for the card, or (shielded, bounded)
    for the remote to name its task, ends the run cancelled with no task left behind."""
    import tether.a2a._client as client_module

    monkeypatch.setattr(client_module, "NAMING_S", 0.2)
    url = f"http://127.0.0.1:{free_port()}"
    card = {
        "name": "hang",
        "description": "hangs",
        "version": "1",
        "supportedInterfaces": [
            {"url": url + "/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }
    app = hanging_app(where, card)
    before = task_names()
    async with tether.Runtime() as rt, served_app(app, url, anyio_backend):
        handle = rt.start(delegating(A2AAgent(url, name="hang")), "go")
        async for event in handle.events():
            if isinstance(event, ev.ToolCallStarted):
                break
        await anyio.wait_all_tasks_blocked()
        handle.cancel("stop")
        result = await handle.result()
    assert result.termination is tether.Termination.CANCELLED
    [finished] = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    assert finished.outcome == "cancelled"
    assert {n for n in task_names() - before if "tether" in n} == set()


async def test_a_streaming_client_that_leaves_does_not_stop_the_task(anyio_backend: str) -> None:
    """A client that closes its stream mid-way leaves the task running; GetTask then
    finds it completed, and the server is none the worse."""
    slow = answering(latency_s=0.2)
    async with serving(slow, anyio_backend) as (rt, url, http):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": {
                "message": {"messageId": "x", "role": "ROLE_USER", "parts": [{"text": "q"}]}
            },
        }
        async with http.stream("POST", url + "/", json=body) as response:
            lines = response.aiter_lines()
            first = await lines.__anext__()
            await _unwind(lines)  # httpx leaves its inner generators open otherwise
        task_id = json.loads(first.removeprefix("data: "))["result"]["task"]["id"]
        client = await sdk_client(url, http)
        for _ in range(500):
            got = await client.get_task(pb.GetTaskRequest(id=task_id))
            if got.status.state != pb.TaskState.TASK_STATE_WORKING:
                break
            await anyio.sleep(0.02)
        assert got.status.state == pb.TaskState.TASK_STATE_COMPLETED
        assert got.artifacts[0].parts[0].text == ANSWER
        assert rt.in_flight(task_id) is None


async def test_cancel_a_durable_task_held_for_approval(anyio_backend: str, tmp_path: Path) -> None:
    """CancelTask on a durable task parked for approval ends it canceled; GetTask agrees."""
    agent = guarded()
    store = tether.SQLiteRunStore(tmp_path / "runs.db")
    async with (
        tether.Runtime(store=store, agents=[agent]) as rt,
        served(agent, rt, anyio_backend, store=store) as url,
        httpx.AsyncClient() as http,
    ):
        client = await sdk_client(url, http, streaming=False)
        [first] = [
            u async for u in client.send_message(pb.SendMessageRequest(message=user_message("a b")))
        ]
        assert first.task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=first.task.id))
        assert canceled.status.state == pb.TaskState.TASK_STATE_CANCELED
        got = await client.get_task(pb.GetTaskRequest(id=first.task.id))
        assert got.status.state == pb.TaskState.TASK_STATE_CANCELED


async def test_a2a_agent_on_a_task_that_wants_input(anyio_backend: str) -> None:
    """A remote task that stops at input-required is one the tool cannot answer: the
    model gets an error saying so, and the remote task is cancelled."""
    remote_events: list[ev.Event] = []
    async with (
        tether.Runtime(event_sink=remote_events.append) as server_rt,
        served(guarded(), server_rt, anyio_backend) as url,
        tether.Runtime() as rt,
    ):
        result = await rt.run(delegating(A2AAgent(url, name="guarded")), "go")
    [call] = [e for e in result.events if isinstance(e, ev.ToolCallFinished)]
    assert call.outcome == "model_error"
    assert "asks for input" in call.content
    assert "word_count" in call.content
    [finished] = [e for e in remote_events if isinstance(e, ev.RunFinished)]
    assert finished.termination is tether.Termination.CANCELLED


def plain_remote(url: str, polls: int = 0) -> Any:
    """A non-tether A2A agent: no streaming, answers every message with a finished
    task whose artifact says "pong", and reports no usage. With ``polls``, the task
    is working for that many ``GetTask`` first."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    card = {
        "name": "pinger",
        "description": "pongs",
        "version": "1",
        "supportedInterfaces": [
            {"url": url + "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }

    async def get_card(request: Request) -> JSONResponse:
        return JSONResponse(card)

    left = [polls]

    async def rpc(request: Request) -> JSONResponse:
        body = await request.json()
        assert body["method"] in ("SendMessage", "GetTask")
        task = pb.Task(id="t-1", context_id="c-1")
        if left[0] > 0 and not (body["method"] == "GetTask" and left[0] == 1):
            task.status.state = pb.TaskState.TASK_STATE_WORKING
        else:
            task.status.state = pb.TaskState.TASK_STATE_COMPLETED
            task.artifacts.append(pb.Artifact(artifact_id="a", parts=[pb.Part(text="pong")]))
        if body["method"] == "GetTask":
            left[0] -= 1
            return JSONResponse(
                {"jsonrpc": "2.0", "id": body["id"], "result": json_format.MessageToDict(task)}
            )
        result = json_format.MessageToDict(pb.SendMessageResponse(task=task))
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": result})

    return Starlette(
        routes=[
            Route("/.well-known/agent-card.json", get_card),
            Route("/rpc", rpc, methods=["POST"]),
        ]
    )


@pytest.mark.parametrize("polls", [0, 2])
async def test_a2a_agent_calls_a_plain_remote_that_reports_no_usage(
    anyio_backend: str, polls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-streaming, non-tether remote: SendMessage (then GetTask while its task is
    working), its artifact is the result, and with no usage in its metadata the
    caller is charged nothing for it."""
    import tether.a2a._client as client_module

    monkeypatch.setattr(client_module, "POLL_S", 0.01)
    url = f"http://127.0.0.1:{free_port()}"
    async with served_app(plain_remote(url, polls), url, anyio_backend), tether.Runtime() as rt:
        result = await rt.run(delegating(A2AAgent(url, name="pinger")), "go")
    assert result.output == "ok: pong"
    charged = [e for e in result.events if isinstance(e, ev.UsageCharged)]
    assert sum(e.input_tokens + e.output_tokens for e in charged if e.source == "subagent") == 0


async def test_legacy_streaming(anyio_backend: str) -> None:
    """message/stream answers in A2A 0.3's JSON: a task, status updates, the artifact,
    and a final completed status."""
    async with serving(answering(), anyio_backend) as (_rt, url, http):
        body = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "message/stream",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": "m1",
                    "role": "user",
                    "parts": [{"kind": "text", "text": "hi"}],
                }
            },
        }
        response = await http.post(url + "/", json=body)
    frames = [
        json.loads(line.removeprefix("data: "))["result"]
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]
    assert frames[0]["kind"] == "task"
    assert {f["kind"] for f in frames[1:-1]} == {"status-update", "artifact-update"}
    assert frames[-1]["kind"] == "status-update"
    assert frames[-1]["status"]["state"] == "completed"
    assert frames[-1]["final"] is True


def two_counts(request: ModelRequest, ctx: ProviderContext) -> Reply:
    last = request.messages[-1]
    results = [b.content for b in last.content if isinstance(b, ToolResultBlock)]
    if not results:
        calls = [
            ToolCall(id="first", name="word_count", arguments={"text": "a b"}),
            ToolCall(id="second", name="word_count", arguments={"text": "a b c"}),
        ]
        return Reply(tool_calls=calls)
    return Reply(text=" / ".join(results))


async def test_answers_one_by_one(anyio_backend: str) -> None:
    """Two held calls: a data part answering one leaves the task input-required (the
    other still listed); answering the other (a rejection) completes it."""
    agent = tether.Agent(
        name="two",
        instructions="x",
        provider=ScriptedProvider(two_counts),
        tools=[word_count],
        policies=[ask_first],
    )
    async with serving(agent, anyio_backend) as (_rt, url, http):
        client = await sdk_client(url, http, streaming=False)
        [first] = [
            u async for u in client.send_message(pb.SendMessageRequest(message=user_message("go")))
        ]
        task = first.task
        held = json_format.MessageToDict(task.status.message.parts[1].data)["approvals"]
        assert [h["call_id"] for h in held] == ["first", "second"]

        def answer(approvals: dict[str, Any]) -> pb.SendMessageRequest:
            data = json_format.ParseDict({"approvals": approvals}, pb.Part().data)
            message = pb.Message(
                message_id="a", role=pb.Role.ROLE_USER, task_id=task.id, parts=[pb.Part(data=data)]
            )
            return pb.SendMessageRequest(message=message)

        [second] = [u async for u in client.send_message(answer({"first": True}))]
        assert second.task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
        still = json_format.MessageToDict(second.task.status.message.parts[1].data)["approvals"]
        assert [h["call_id"] for h in still] == ["second"]
        [third] = [u async for u in client.send_message(answer({"second": "too long"}))]
    assert third.task.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert third.task.artifacts[0].parts[0].text.startswith("2 / rejected by the host: too long")


def breaking_remote(url: str) -> Any:
    """A streaming remote whose stream breaks after its first update; GetTask then
    finds the task completed."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    card = {
        "name": "breaker",
        "description": "breaks",
        "version": "1",
        "supportedInterfaces": [
            {"url": url + "/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }

    async def get_card(request: Request) -> JSONResponse:
        return JSONResponse(card)

    async def rpc(request: Request) -> Response:
        body = await request.json()
        task = pb.Task(id="t-1", context_id="c-1")
        if body["method"] == "GetTask":
            task.status.state = pb.TaskState.TASK_STATE_COMPLETED
            task.artifacts.append(pb.Artifact(artifact_id="a", parts=[pb.Part(text="late")]))
            result = json_format.MessageToDict(task)
            return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": result})
        task.status.state = pb.TaskState.TASK_STATE_WORKING

        async def frames() -> AsyncIterator[str]:
            result = json_format.MessageToDict(pb.StreamResponse(task=task))
            yield "data: " + json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result})
            yield "\n\n"
            raise RuntimeError("the stream breaks")

        return StreamingResponse(frames(), media_type="text/event-stream")

    return Starlette(
        routes=[Route("/.well-known/agent-card.json", get_card), Route("/", rpc, methods=["POST"])]
    )


async def test_a2a_agent_polls_a_task_whose_stream_broke(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream that breaks after naming the task is not an error: the task is polled."""
    import tether.a2a._client as client_module

    monkeypatch.setattr(client_module, "POLL_S", 0.01)
    url = f"http://127.0.0.1:{free_port()}"
    async with served_app(breaking_remote(url), url, anyio_backend), tether.Runtime() as rt:
        result = await rt.run(delegating(A2AAgent(url, name="breaker")), "go")
    assert result.output == "ok: late"
