"""``RunResult`` and the one-line summary of a run's path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic

import attrs
import cattrs
from typing_extensions import TypeForm, TypeVar

import tether.runtime._events as ev
from tether.actors import Judgement, OutputSchema, dump_output
from tether.providers import Message, dump_messages, load_messages

from ._agent import OutputT
from ._limits import Termination, Usage

LoadedT = TypeVar("LoadedT", default=str)


@attrs.frozen(kw_only=True)
class RunResult(Generic[OutputT]):
    """What a run produced.

    ``output`` is the answer (``answered``), the terminal tool's result
    (``terminal_tool``), the last candidate (``quality_exhausted``), the text
    so far (``max_continues``), or ``None`` when the run produced no answer.
    With ``Agent(output_type=T)`` it is a ``T`` (the typed answer, or the
    last candidate's) for ``answered`` and ``quality_exhausted``, else ``None``.
    ``passed`` is ``None`` without a judge or when nothing was judged.

    A run on a conversation (``conversation=``) that ended ok but whose
    messages were not appended to it (another writer appended first:
    ``ConversationConflict``; or the store failed) keeps its termination and
    output, and says so in :attr:`conversation_error`; :attr:`ok` is then
    ``False``: the turn the caller asked for did not happen.
    """

    run_id: str
    output: OutputT | None
    termination: Termination
    passed: bool | None
    judgement: Judgement | None
    usage: Usage
    messages: tuple[Message, ...]
    #: The run's events in order (a read-only sequence; see :class:`~._trail.EventLog`).
    events: Sequence[ev.Event]
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The run ended ``answered`` or ``terminal_tool``, and its conversation (if it
        has one) holds its messages now (see :attr:`conversation_error`)."""
        return self.termination.ok and self.conversation_error is None

    @property
    def conversation_error(self) -> str | None:
        """Why a run that ended ok did not append its messages to its conversation
        (``"ConversationConflict: ..."``, say), or ``None``: it did, or has none."""
        if self.error is None or not self.termination.ok:
            return None  # an ok run has an error only when its append failed: O(1) otherwise
        for event in reversed(self.events):
            if isinstance(event, ev.ConversationFailed) and event.operation == "append":
                return event.error
        return None

    def summary(self) -> str:
        """The path of the run on one line, e.g.
        ``Memory(1) → Model → Tools(2) → Model → Judge(0.62 ✗) → Model → Judge(0.91 ✓) → answered``.
        """
        return summarize(self.events)

    def dump(self) -> dict[str, Any]:
        """A JSON-ready dict of this result; :meth:`load` reads it back equal.

        The output is in its JSON form (an attrs class or dataclass an object,
        an enum its value), the messages in :func:`tether.dump_messages`'s form,
        the events in :func:`tether.events.dump`'s.
        """
        return {
            "run_id": self.run_id,
            "output": dump_output(self.output),
            "termination": self.termination.value,
            "passed": self.passed,
            "judgement": _converter.unstructure(self.judgement),
            "usage": _converter.unstructure(self.usage),
            "messages": dump_messages(self.messages),
            "events": [ev.dump(e) for e in self.events],
            "error": self.error,
        }

    @classmethod
    def load(
        cls,
        data: Mapping[str, Any],
        output_type: TypeForm[LoadedT] = str,  # type: ignore[assignment]
    ) -> RunResult[LoadedT]:
        """The result :meth:`dump` made ``data`` from, its output checked as an ``output_type``.

        Raises ``ValueError`` naming what does not fit.
        """
        try:
            raw = data["output"]
            output: Any = raw
            if raw is not None and output_type is not str:
                output = OutputSchema.of(output_type).load(raw)
            elif raw is not None and not isinstance(raw, str):
                raise TypeError(f"expected a str output, got {type(raw).__name__}")
            return RunResult[LoadedT](
                run_id=data["run_id"],
                output=output,
                termination=Termination(data["termination"]),
                passed=data["passed"],
                judgement=None
                if data["judgement"] is None
                else _converter.structure(data["judgement"], Judgement),
                usage=_converter.structure(data["usage"], Usage),
                messages=tuple(load_messages(data["messages"])),
                events=tuple(ev.load(e) for e in data["events"]),
                error=data.get("error"),
            )
        except (KeyError, TypeError, ValueError, cattrs.BaseValidationError) as exc:
            raise ValueError(f"not a dumped RunResult: {exc!r}") from exc


_converter = cattrs.Converter()


def summarize(events: Sequence[ev.Event]) -> str:
    """The run's path: one step per model call, tool batch, judgement and ceiling.

    A model call that did not finish (it failed, was cut at a ceiling or
    cancelled) shows as ``Model(✗)``; provider retries inside it as ``retry×n``,
    and a provider fallback as ``fallback:<model>``.
    """
    parts: list[str] = []
    stage: str | None = None
    tools = retries = 0
    answered = False
    later: list[str] = []  # a ceiling hit inside a model call shows after the call
    fallbacks: list[str] = []

    def model(ok: bool) -> str:
        inside = [f"retry×{retries}"] if retries else []
        if fallbacks:
            inside += [f"fallback:{m}" for m in fallbacks]
            fallbacks.clear()
        if not ok:
            inside.append("✗")
        return f"Model({' '.join(inside)})" if inside else "Model"

    for event in events:
        if isinstance(event, ev.StageEntered | ev.StageExited) and event.stage == "finalize":
            continue  # assembly: where the run was when it ended still counts
        if isinstance(event, ev.StageEntered):
            if event.stage != stage:  # else entered again across a seam (a parked tool round)
                stage, tools, retries, answered = event.stage, 0, 0, False
        elif isinstance(event, ev.StageExited):
            if event.stage == "model":
                parts.append(model(answered))
                parts += later
                later.clear()
            elif event.stage == "execute" and tools:
                parts.append(f"Tools({tools})")
            stage = None
        elif isinstance(event, ev.LessonsRecalled):
            parts.append(f"Memory({len(event.lesson_ids)})")
        elif isinstance(event, ev.ProviderRetry):
            retries += 1
        elif isinstance(event, ev.ProviderFallback):
            fallbacks.append(event.to_model)
        elif isinstance(event, ev.ModelCallFinished):
            answered = True
        elif isinstance(event, ev.ToolCallStarted):
            if event.name == "search_tools":
                parts.append("ToolSearch")
            else:
                tools += 1
        elif isinstance(event, ev.Judged):
            mark = "✓" if event.passed else "✗"
            scores = event.scores.values()
            score = f"{min(scores):.2f} " if scores else ""
            parts.append(f"Judge({score}{mark})")
        elif isinstance(event, ev.CeilingHit):
            (later if stage == "model" else parts).append(f"Ceiling({event.ceiling})")
        elif isinstance(event, ev.RunFinished):
            # A stage the run ended inside (a cancellation, a deadline) never exited.
            if stage == "model":
                parts.append(model(False))
            parts += later
            if stage == "execute" and tools:
                parts.append(f"Tools({tools})")
            parts.append(event.termination.value)
    return " → ".join(parts)
