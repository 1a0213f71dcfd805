"""What maps to what between a tether run and an A2A task (see docs/guides/a2a.md).

A task is a run: the task id is the run id, which also carries the task's
context id (so a server restarted on a durable store still knows it). The
task's state comes from the run:

=========================================  =====================
run                                        task state
=========================================  =====================
in flight                                  ``working``
held for approval (``Verdict.ask``)        ``input-required``
ended ``answered`` / ``terminal_tool``     ``completed``
ended ``cancelled``                        ``canceled``
ended any other way                        ``failed``
=========================================  =====================

A finished task carries the run's answer as the artifact ``answer`` and in
its status message; its ``metadata`` carries tether's usage under
:data:`USAGE_KEY`. An ``input-required`` task lists the held calls in its
status message, as text and as a data part ``{"approvals": [...]}``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format, struct_pb2

from tether.runtime import PendingApproval, RunFinished, RunResult, Termination, Usage

#: The ``metadata`` key of a finished task that carries tether's usage (a JSON
#: object: ``input_tokens``, ``output_tokens``, ``cost_usd``). A tether caller
#: (:func:`tether.a2a.A2AAgent`) charges it to its run; a remote without it charges nothing.
USAGE_KEY = "tether/usage"
#: The ``metadata`` key of a finished task that carries the run's termination.
TERMINATION_KEY = "tether/termination"
#: The data part key of an ``input-required`` task's held calls, and of an answer.
APPROVALS_KEY = "approvals"

_RUN_PREFIX = "a2a-"
_CONTEXT_CHARS = re.compile(r"^[\x21-\x7e]{1,200}$")

_APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})
_REJECT_WORDS = frozenset({"reject", "rejected", "no", "n", "deny", "denied"})


class BadRequest(ValueError):
    """A request the server refuses with JSON-RPC ``invalid params`` (-32602)."""


class NotFound(KeyError):
    """A task id the server does not know (A2A ``TaskNotFoundError``, -32001)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "task not found"


class NotCancelable(ValueError):
    """A task in a final state (A2A ``TaskNotCancelableError``, -32002)."""


# ----------------------------------------------------------------- ids


def new_task_id(context_id: str) -> str:
    """A fresh run id that carries ``context_id`` (``BadRequest`` if it is unusable)."""
    if not _CONTEXT_CHARS.match(context_id):
        raise BadRequest("contextId must be 1 to 200 printable ASCII characters")
    packed = base64.urlsafe_b64encode(context_id.encode()).decode().rstrip("=")
    return f"{_RUN_PREFIX}{secrets.token_hex(12)}.{packed}"


def context_of(task_id: str) -> str:
    """The context id a task id made by :func:`new_task_id` carries (``NotFound`` if none)."""
    head, dot, packed = task_id.partition(".")
    if not head.startswith(_RUN_PREFIX) or not dot:
        raise NotFound(f"no task {task_id[:80]!r}")
    try:
        return base64.urlsafe_b64decode(packed + "=" * (-len(packed) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise NotFound(f"no task {task_id[:80]!r}") from None


def new_context_id() -> str:
    return str(uuid.uuid4())


# --------------------------------------------------------------- messages


def text_of(message: pb.Message) -> str:
    """A message's input for a run: its text parts, and data parts as JSON, by lines."""
    pieces: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            pieces.append(json.dumps(json_format.MessageToDict(part.data), ensure_ascii=False))
        else:
            raise BadRequest(
                f"this agent takes text and data parts only, not a {kind or 'empty'} part"
            )
    text = "\n".join(pieces)
    if not text.strip():
        raise BadRequest("the message has no text")
    return text


def _data_of(message: pb.Message) -> list[Any]:
    return [
        json_format.MessageToDict(part.data)
        for part in message.parts
        if part.WhichOneof("content") == "data"
    ]


@attrs.frozen(kw_only=True)
class Decision:
    """One answer to a held call: approve it, or reject it with a reason."""

    call_id: str
    approved: bool
    reason: str = "rejected"


def decisions(message: pb.Message, pending: Sequence[PendingApproval]) -> list[Decision]:
    """The answers a message gives to a task's held calls (``BadRequest`` if it gives none).

    A data part ``{"approvals": {"<call_id>": true | false | "reason to reject"}}``
    answers calls one by one (a call it leaves out stays held); a text part
    ``approve`` (or ``yes``, ``ok``) approves every held call, ``reject`` (or
    ``no``, ``deny``), optionally followed by a reason, rejects every one.
    """
    held = {p.call_id for p in pending}
    for data in _data_of(message):
        answers = data.get(APPROVALS_KEY) if isinstance(data, dict) else None
        if answers is None:
            continue
        if not isinstance(answers, dict) or not answers:
            raise BadRequest(f'"{APPROVALS_KEY}" must map held call ids to true, false or a reason')
        out: list[Decision] = []
        for call_id, verdict in answers.items():
            if call_id not in held:
                raise BadRequest(f"the task holds no call {call_id[:80]!r}")
            if verdict is True:
                out.append(Decision(call_id=call_id, approved=True))
            elif verdict is False:
                out.append(Decision(call_id=call_id, approved=False))
            elif isinstance(verdict, str) and verdict.strip():
                out.append(Decision(call_id=call_id, approved=False, reason=verdict.strip()))
            else:
                raise BadRequest(f"the answer to {call_id[:80]!r} must be true, false or a reason")
        return out
    words = " ".join(
        part.text for part in message.parts if part.WhichOneof("content") == "text"
    ).strip()
    first, _, rest = words.partition(" ")
    verb = first.strip(".,!:;").lower()
    if verb in _APPROVE_WORDS and not rest.strip():
        return [Decision(call_id=p.call_id, approved=True) for p in pending]
    if verb in _REJECT_WORDS:
        reason = rest.strip() or "rejected"
        return [Decision(call_id=p.call_id, approved=False, reason=reason) for p in pending]
    raise BadRequest(
        "the task waits for approval: answer 'approve' or 'reject <reason>' in a text part, "
        f'or a data part {{"{APPROVALS_KEY}": {{"<call id>": true | false | "reason"}}}}'
    )


def agent_message(task_id: str, context_id: str, text: str, data: Any = None) -> pb.Message:
    parts = [pb.Part(text=text)]
    if data is not None:
        value = struct_pb2.Value()
        json_format.ParseDict(data, value)
        parts.append(pb.Part(data=value))
    return pb.Message(
        message_id=str(uuid.uuid4()),
        task_id=task_id,
        context_id=context_id,
        role=pb.Role.ROLE_AGENT,
        parts=parts,
    )


# ------------------------------------------------------------------ tasks


@attrs.frozen(kw_only=True)
class Ending:
    """How a run ended, from its ``RunFinished`` or its ``RunResult``."""

    termination: Termination
    output: str | None
    error: str | None
    usage: Usage

    @classmethod
    def of(cls, done: RunFinished | RunResult[Any]) -> Ending:
        output = done.output
        text = output if output is None or isinstance(output, str) else str(output)
        return cls(termination=done.termination, output=text, error=done.error, usage=done.usage)


def usage_metadata(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
    }


def state_of(ending: Ending) -> pb.TaskState:
    if ending.termination.ok:
        return pb.TaskState.TASK_STATE_COMPLETED
    if ending.termination is Termination.CANCELLED:
        return pb.TaskState.TASK_STATE_CANCELED
    return pb.TaskState.TASK_STATE_FAILED


def answer_artifact(text: str) -> pb.Artifact:
    return pb.Artifact(artifact_id="answer", name="answer", parts=[pb.Part(text=text)])


def pending_json(pending: Sequence[PendingApproval]) -> list[dict[str, Any]]:
    return [
        {"call_id": p.call_id, "tool": p.name, "arguments": p.arguments, "reason": p.reason}
        for p in pending
    ]


def task(
    task_id: str,
    context_id: str,
    *,
    ending: Ending | None = None,
    pending: Sequence[PendingApproval] = (),
) -> pb.Task:
    """The task of a run: finished (``ending``), held (``pending``) or working."""
    result = pb.Task(id=task_id, context_id=context_id)
    if ending is not None:
        result.status.CopyFrom(final_status(task_id, context_id, ending))
        if ending.output is not None and ending.termination.ok:
            result.artifacts.append(answer_artifact(ending.output))
        json_format.ParseDict(final_metadata(ending), result.metadata)
    elif pending:
        result.status.CopyFrom(held_status(task_id, context_id, pending))
    else:
        result.status.state = pb.TaskState.TASK_STATE_WORKING
    return result


def final_metadata(ending: Ending) -> dict[str, Any]:
    return {USAGE_KEY: usage_metadata(ending.usage), TERMINATION_KEY: ending.termination.value}


def final_status(task_id: str, context_id: str, ending: Ending) -> pb.TaskStatus:
    state = state_of(ending)
    if state == pb.TaskState.TASK_STATE_COMPLETED:
        text = ending.output or ""
    else:
        text = ending.termination.value + (f": {ending.error}" if ending.error else "")
    return pb.TaskStatus(state=state, message=agent_message(task_id, context_id, text))


def held_status(task_id: str, context_id: str, pending: Sequence[PendingApproval]) -> pb.TaskStatus:
    lines = [
        f"- {p.name}({json.dumps(p.arguments, ensure_ascii=False)[:500]}) [call {p.call_id}]: "
        f"{p.reason}"
        for p in pending
    ]
    text = (
        "Waiting for approval of these tool calls:\n"
        + "\n".join(lines)
        + "\nAnswer 'approve' or 'reject <reason>'."
    )
    message = agent_message(task_id, context_id, text, {APPROVALS_KEY: pending_json(pending)})
    return pb.TaskStatus(state=pb.TaskState.TASK_STATE_INPUT_REQUIRED, message=message)


def to_json(message: Any) -> dict[str, Any]:
    """A protobuf message as A2A's JSON (camelCase names, enum names)."""
    value: dict[str, Any] = json_format.MessageToDict(message)
    return value


def from_json(data: Mapping[str, Any], message: Any) -> Any:
    """Parse A2A JSON into ``message`` (``BadRequest`` if it does not fit)."""
    try:
        json_format.ParseDict(dict(data), message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise BadRequest(f"invalid params: {str(exc)[:300]}") from None
    return message
