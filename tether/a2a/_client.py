"""``A2AAgent``: a remote A2A agent used as a tool (see docs/guides/a2a.md).

The tool takes ``task: str`` and sends it to the remote agent as a streamed
message (``SendStreamingMessage``, through the SDK's JSON-RPC transport; a
remote whose card says it does not stream gets ``SendMessage``). What the
remote does becomes what a tether tool does:

- its streamed text (status messages and artifact chunks) arrives in the
  calling run as ``ToolOutputDelta`` events, for readers of deltas;
- its answer (the task's artifacts, else its status message) is the tool's result;
- the usage it reports under ``metadata["tether/usage"]`` is charged to the
  calling run, against its token and cost limits (a remote that reports none
  charges nothing);
- cancelling the calling run (or the call's timeout) cancels the remote task
  (``CancelTask``, shielded and bounded);
- failures are tether's typed tool errors: a remote task that ``failed`` or
  was ``rejected``, or that wants input this tool cannot give, is a model
  error (the model reads why); a lost connection, a timeout, an HTTP 5xx or
  429 is transient (retried, bounded); HTTP 401/403, a card or protocol the
  tool cannot use, is fatal.
"""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import anyio.to_thread
import httpx
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.errors import A2AClientError, A2AClientTimeoutError
from a2a.types import a2a_pb2 as pb
from a2a.utils import errors as a2a_errors
from google.protobuf import json_format

from tether.actors import (
    FatalToolError,
    ToolError,
    ToolOutput,
    ToolSpec,
    TransientToolError,
    current_tool_context,
    tool,
)

from ._tasks import USAGE_KEY
from ._trace import trace_headers

_BAD_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_FINAL = {
    pb.TaskState.TASK_STATE_COMPLETED,
    pb.TaskState.TASK_STATE_FAILED,
    pb.TaskState.TASK_STATE_CANCELED,
    pb.TaskState.TASK_STATE_REJECTED,
}
_STOPS = _FINAL | {pb.TaskState.TASK_STATE_INPUT_REQUIRED, pb.TaskState.TASK_STATE_AUTH_REQUIRED}


_TLS: list[ssl.SSLContext] = []


async def _tls() -> ssl.SSLContext:
    """One default TLS context for every call: building one costs ~50 ms, so the
    first is built once, in a worker thread, off the event loop."""
    if not _TLS:
        context = await anyio.to_thread.run_sync(httpx.create_ssl_context)
        if not _TLS:
            _TLS.append(context)
    return _TLS[0]


def _default_name(url: str) -> str:
    parts = urlsplit(url)
    where = (parts.hostname or "remote") + (f"_{parts.port}" if parts.port else "")
    return ("a2a_" + _BAD_NAME.sub("_", where))[:64]


class _Remote:
    """One tool's view of the remote agent: its card (fetched once) and its calls."""

    def __init__(self, url: str, headers: Mapping[str, str], timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.headers = dict(headers)
        self.timeout_s = timeout_s
        self.card: pb.AgentCard | None = None

    def _endpoint(self, card: pb.AgentCard) -> str:
        for interface in card.supported_interfaces:
            if interface.protocol_binding == "JSONRPC" and interface.protocol_version in (
                "1.0",
                "1.0.0",
                "",
            ):
                return str(interface.url)
        raise FatalToolError(
            f"the A2A agent at {self.url} offers no JSON-RPC interface of protocol 1.0"
        )

    async def call(self, task: str) -> ToolOutput:
        ctx = current_tool_context()
        run_id = ctx.run_id if ctx is not None else ""
        call_id = ctx.call_id if ctx is not None else ""
        headers = {**self.headers, **(await trace_headers(run_id, call_id))}
        timeout = httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0))
        verify = await _tls()
        async with httpx.AsyncClient(timeout=timeout, headers=headers, verify=verify) as http:
            with _mapped(self.url):
                if self.card is None:
                    self.card = await A2ACardResolver(http, self.url).get_agent_card()
                card = self.card
                rpc = _Rpc(http, self._endpoint(card))
            message = pb.Message(
                message_id=str(uuid.uuid4()), role=pb.Role.ROLE_USER, parts=[pb.Part(text=task)]
            )
            if run_id:
                message.context_id = run_id  # one context per calling run
            request = pb.SendMessageRequest(message=message)
            state = _State(ctx)
            try:
                with _mapped(self.url):
                    if card.capabilities.streaming:
                        try:
                            await rpc.stream("SendStreamingMessage", request, state)
                        except httpx.TransportError:
                            if not state.task_id:
                                raise
                            # The stream broke once the task was named: poll the task.
                    else:
                        result = await rpc.call("SendMessage", request)
                        response = json_format.ParseDict(
                            result, pb.SendMessageResponse(), ignore_unknown_fields=True
                        )
                        if response.HasField("task"):
                            state.take(pb.StreamResponse(task=response.task))
                        else:
                            state.take(pb.StreamResponse(message=response.message))
                    while not state.stopped and state.task_id:
                        # Answered before the task stopped (a remote that does not
                        # block, or a stream that ended early): poll it.
                        await anyio.sleep(POLL_S)
                        found = await rpc.call("GetTask", pb.GetTaskRequest(id=state.task_id))
                        now = json_format.ParseDict(found, pb.Task(), ignore_unknown_fields=True)
                        state.take(pb.StreamResponse(task=now))
            except BaseException:
                if state.task_id and not state.stopped:  # cancelled or failed mid-task
                    # Best effort: the call's own error (or cancellation) wins.
                    with (
                        anyio.CancelScope(shield=True),
                        anyio.move_on_after(5),
                        contextlib.suppress(Exception),
                    ):
                        await rpc.call("CancelTask", pb.CancelTaskRequest(id=state.task_id))
                raise
            if state.held and state.task_id:  # nobody here can answer it: end it
                # Best effort: the model is told either way.
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(5),
                    contextlib.suppress(Exception),
                ):
                    await rpc.call("CancelTask", pb.CancelTaskRequest(id=state.task_id))
            return state.output(self.url)


#: Seconds between two ``GetTask`` of a remote task that answered before it stopped.
POLL_S = 1.0
#: Seconds a streamed call waits, shielded from cancellation, for the remote to name its task.
NAMING_S = 10.0

_ERRORS = {code: kind for kind, code in a2a_errors.JSON_RPC_ERROR_CODE_MAP.items()}


class _Rpc:
    """A2A's JSON-RPC binding over one httpx client: calls and a streamed call.

    Written here rather than with the SDK's transport: its stream is a chain of
    async generators that, left early (a cancelled call), are finalized by the
    garbage collector (a ``ResourceWarning`` on trio); these streams are closed
    where they are left.
    """

    def __init__(self, http: httpx.AsyncClient, endpoint: str) -> None:
        self.http, self.endpoint = http, endpoint

    @staticmethod
    def _payload(method: str, params: Any) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": str(uuid.uuid4()),
            "method": method,
            "params": json_format.MessageToDict(params),
        }

    @staticmethod
    def _result(body: Any) -> Any:
        if not isinstance(body, dict) or ("result" not in body and "error" not in body):
            raise a2a_errors.InvalidAgentResponseError("not a JSON-RPC response")
        error = body.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, dict) else None
            text = str(error.get("message", "")) if isinstance(error, dict) else str(error)
            kind = _ERRORS.get(code, a2a_errors.InternalError) if isinstance(code, int) else None
            raise (kind or a2a_errors.InternalError)(f"{text} (JSON-RPC {code})")
        return body["result"]

    async def call(self, method: str, params: Any) -> Any:
        response = await self.http.post(self.endpoint, json=self._payload(method, params))
        response.raise_for_status()
        return self._result(response.json())

    async def stream(self, method: str, params: Any, state: _State) -> None:
        """Feed ``state`` the stream's updates until it stops or the server ends it.

        Until the first update names the remote task, the call is shielded from
        cancellation (for at most :data:`NAMING_S`): a task it started is a task
        it can cancel. A cancellation meanwhile lands right after.
        """
        headers = {"Accept": "text/event-stream"}
        payload = self._payload(method, params)
        request = self.http.build_request("POST", self.endpoint, json=payload, headers=headers)
        data: list[str] = []

        def feed(line: str) -> bool:
            """Take one line of the stream; whether the task has stopped."""
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line and data:
                result = self._result(json.loads("\n".join(data)))
                data.clear()
                update = json_format.ParseDict(
                    result, pb.StreamResponse(), ignore_unknown_fields=True
                )
                state.take(update)
            return state.stopped

        with anyio.CancelScope(shield=True) as naming:
            naming.deadline = anyio.current_time() + NAMING_S
            r = await self.http.send(request, stream=True)
        if naming.cancelled_caught:
            await anyio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller: Cancelled
            raise TransientToolError(f"no answer from {self.endpoint} in {NAMING_S} s")
        lines: Any = None
        try:
            if r.status_code >= 400:
                await r.aread()
                r.raise_for_status()
            if "text/event-stream" not in r.headers.get("content-type", ""):
                await r.aread()
                self._result(r.json())  # an error before the stream began
                raise a2a_errors.InvalidAgentResponseError("the answer is not an event stream")
            lines = r.aiter_lines()
            with anyio.CancelScope(shield=True) as naming:
                naming.deadline = anyio.current_time() + NAMING_S
                async for line in lines:
                    if feed(line) or state.task_id:
                        break
            if state.stopped:
                return
            async for line in lines:
                if feed(line):
                    return
        finally:
            with anyio.CancelScope(shield=True):
                if lines is not None:
                    await _unwind(lines)
                with anyio.move_on_after(5):
                    await r.aclose()


async def _unwind(agen: Any) -> None:
    """Finish an httpx line iterator left mid-stream, so none of its chain of async
    generators is left suspended for the garbage collector (trio warns for each).

    httpx does not close the inner generators when the outer one is closed;
    resuming the chain in a cancelled, shielded scope drains what is buffered
    and raises ``Cancelled`` at its first network read, which unwinds every frame.
    """
    with anyio.CancelScope(shield=True) as scope:
        scope.cancel()
        with contextlib.suppress(Exception):
            async for _ in agen:
                pass


class _State:
    """What the remote said so far: task id, state, text, artifacts, usage."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.task_id = ""
        self.state: pb.TaskState = pb.TaskState.TASK_STATE_UNSPECIFIED
        self.status_text = ""
        self.artifacts: dict[str, list[str]] = {}
        self.metadata: dict[str, Any] = {}
        self.message_text: str | None = None
        #: The remote streams its text in status messages (then artifacts are not streamed).
        self.streamed = False

    @property
    def stopped(self) -> bool:
        return self.message_text is not None or self.state in _STOPS

    @property
    def held(self) -> bool:
        return self.state in (
            pb.TaskState.TASK_STATE_INPUT_REQUIRED,
            pb.TaskState.TASK_STATE_AUTH_REQUIRED,
        )

    def _emit(self, text: str) -> None:
        emit = getattr(self.ctx, "emit_output", None)
        if text and emit is not None:
            emit(text)

    def take(self, update: pb.StreamResponse) -> None:
        kind = update.WhichOneof("payload")
        if kind == "message":
            self.message_text = _text(update.message.parts)
            self._emit(self.message_text)
        elif kind == "task":
            t = update.task
            self.task_id = t.id
            self._status(t.status, None)
            for artifact in t.artifacts:
                self.artifacts[artifact.artifact_id] = [_text(artifact.parts)]
            self.metadata.update(json_format.MessageToDict(t.metadata))
        elif kind == "status_update":
            u = update.status_update
            self.task_id = self.task_id or u.task_id
            meta = json_format.MessageToDict(u.metadata)
            self._status(u.status, meta)
            self.metadata.update(meta)
        elif kind == "artifact_update":
            a = update.artifact_update
            self.task_id = self.task_id or a.task_id
            text = _text(a.artifact.parts)
            pieces = self.artifacts.setdefault(a.artifact.artifact_id, [])
            if not a.append:
                if pieces and "".join(pieces) == text:
                    return  # the whole artifact again, after its chunks
                pieces.clear()
            pieces.append(text)
            if not self.streamed:  # a remote that streams its text as artifact chunks
                self._emit(text)

    def _status(self, status: pb.TaskStatus, meta: dict[str, Any] | None) -> None:
        self.state = status.state
        text = _text(status.message.parts) if status.HasField("message") else ""
        if status.state == pb.TaskState.TASK_STATE_WORKING and meta is not None:
            self.streamed = self.streamed or bool(text)
            self._emit(text)  # progress: a piece of the text as it streams
        elif text:
            self.status_text = text

    def usage(self) -> tuple[int, int, float | None]:
        usage = self.metadata.get(USAGE_KEY)
        if not isinstance(usage, dict):
            return 0, 0, None
        tokens = [usage.get("input_tokens"), usage.get("output_tokens")]
        ins, outs = (int(v) if isinstance(v, int | float) and v >= 0 else 0 for v in tokens)
        cost = usage.get("cost_usd")
        return ins, outs, float(cost) if isinstance(cost, int | float) and cost >= 0 else None

    def output(self, url: str) -> ToolOutput:
        ins, outs, cost = self.usage()

        def output(content: str, is_error: bool = False) -> ToolOutput:
            return ToolOutput(
                content=content,
                is_error=is_error,
                input_tokens=ins,
                output_tokens=outs,
                cost_usd=cost,
            )

        if self.message_text is not None:
            return output(self.message_text)
        answer = "\n".join("".join(p) for p in self.artifacts.values()).strip()
        state = self.state
        if state == pb.TaskState.TASK_STATE_COMPLETED:
            return output(answer or self.status_text)
        name = pb.TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")
        why = self.status_text or answer or "no reason given"
        if self.held:
            why = f"it asks for input this tool cannot give, so its task was cancelled: {why}"
        elif state not in _FINAL:
            why = f"its stream ended without a final state ({name})"
        return output(f"the remote agent at {url} ended {name}: {why}", is_error=True)


def _text(parts: Any) -> str:
    pieces = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            pieces.append(json_format.MessageToJson(part.data, indent=None))
    return "\n".join(pieces)


class _mapped:
    """Translate the SDK's and httpx's errors into tether's typed tool errors."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, ToolError | TransientToolError | FatalToolError):
            return
        where = f"the A2A agent at {self.url}"
        if isinstance(exc, A2AClientTimeoutError | httpx.TimeoutException):
            raise TransientToolError(f"{where} timed out") from exc
        if isinstance(exc, A2AClientError | httpx.HTTPError):
            cause = exc.__cause__ if isinstance(exc, A2AClientError) else exc
            if isinstance(cause, httpx.HTTPStatusError):
                status = cause.response.status_code
                if status in (401, 403):
                    raise FatalToolError(
                        f"{where} refused the credentials (HTTP {status})"
                    ) from exc
                if status == 429 or status >= 500:
                    raise TransientToolError(f"{where} answered HTTP {status}") from exc
                raise FatalToolError(f"{where} answered HTTP {status}") from exc
            if isinstance(cause, httpx.TransportError):
                raise TransientToolError(f"{where} is unreachable: {cause}") from exc
            raise FatalToolError(f"{where}: {exc}") from exc
        if isinstance(exc, a2a_errors.InternalError):
            raise TransientToolError(f"{where} failed inside: {exc}") from exc
        if isinstance(exc, a2a_errors.InvalidParamsError | a2a_errors.ContentTypeNotSupportedError):
            raise ToolError(f"{where} refused the task: {exc}") from exc
        if isinstance(exc, a2a_errors.A2AError):
            raise FatalToolError(f"{where}: {type(exc).__name__}: {exc}") from exc


def A2AAgent(
    url: str,
    *,
    name: str | None = None,
    description: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
) -> ToolSpec:
    """A tool that sends a task to the remote A2A agent at ``url`` and returns its answer.

    ``url`` is the agent's base URL (its card is at
    ``{url}/.well-known/agent-card.json``, fetched on the first call). ``name``
    defaults to ``a2a_`` and the host and port. ``headers`` go with every request
    (an ``Authorization``, say). ``timeout_s`` bounds one call (the remote task is
    cancelled past it). See the module doc for what maps to what.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"A2AAgent(url=...) must be an http(s) URL, got {url!r}")
    if not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise ValueError(f"A2AAgent(timeout_s=...) must be a number > 0, got {timeout_s!r}")
    tool_name = name or _default_name(url)
    if _BAD_NAME.search(tool_name) or len(tool_name) > 64:
        raise ValueError(
            f"A2AAgent(name=...) must be 1-64 letters, digits, '_' or '-', got {name!r}"
        )
    remote = _Remote(url, headers or {}, float(timeout_s))
    about = description or (
        f"Delegate a task to the remote agent at {url} (over A2A) and get its answer."
    )

    async def delegate(task: str) -> ToolOutput:
        return await remote.call(task)

    return tool(delegate, name=tool_name, description=about, timeout_s=float(timeout_s) + 10)
