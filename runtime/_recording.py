"""A recorded run, read back from its trail: what replay and fork play (docs/guides/replay.md).

A trail is a run's events: a JSONL file a :class:`~._sinks.JsonlSink` wrote (one
file may hold many runs), a run store's events, or events in memory
(``RunResult.events``). :func:`read_trail` picks one run's events out of it;
:class:`Recording` reads what a replay needs from them: the model's responses
(and the provider failures between them), the tool results, the host's
answers to approvals, and what the trail does not hold.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import attrs

import tether.providers as providers
import tether.runtime._events as ev
from tether.actors import ToolDone, ToolOutput
from tether.providers import (
    ContentBlock,
    ModelResponse,
    ProviderError,
    StopReason,
    TextBlock,
    TokenUsage,
    TransientProviderError,
)

from ._runstore import RunStore

#: What a trail can be given as: a JSONL file's path, or a run's events (or their dicts).
TrailSource = str | os.PathLike[str] | Sequence[ev.Event] | Sequence[Mapping[str, Any]]


class TrailError(ValueError):
    """A trail that cannot be replayed as asked: no such run, several runs to choose
    from, a file that is not a trail."""


def read_trail(source: TrailSource, run_id: str | None = None) -> tuple[ev.Event, ...]:
    """One run's kept events from ``source``, in ``seq`` order.

    ``run_id`` picks a run of a file (or list) that holds several; without it the
    trail must hold exactly one top-level run (sub-agents' runs aside). Live deltas
    are skipped. :class:`TrailError` when the run is not there or is ambiguous.
    """
    return read_run(source, run_id)[0]


#: The note of a trail written before ``ModelCallFinished`` kept the response's reasoning.
NO_REASONING = (
    "the model's reasoning blocks (the trail was written before ModelCallFinished kept "
    "them): the responses replay without them"
)


def read_run(
    source: TrailSource, run_id: str | None = None
) -> tuple[tuple[ev.Event, ...], tuple[str, ...]]:
    """:func:`read_trail`, and what the trail's format lacks (notes for the replay)."""
    old: set[str] = set()  # the runs with a ModelCallFinished of the older form
    if isinstance(source, str | os.PathLike):
        events = list(_read_jsonl(os.fspath(source), old))
        where = os.fspath(source)
    else:
        events = [e if isinstance(e, ev.Event) else _load(e, old) for e in source]
        where = "the events given"
    runs: dict[str, list[ev.Event]] = {}
    for event in events:
        if not isinstance(event, ev.DELTA_TYPES):
            runs.setdefault(event.run_id, []).append(event)
    if not runs:
        raise TrailError(f"{where} holds no events")
    if run_id is None:
        tops = [
            r
            for r, es in runs.items()
            if not any(isinstance(e, ev.RunStarted) and e.parent_run_id for e in es)
        ]
        if len(tops) != 1:
            listed = ", ".join(tops[:10]) + (" …" if len(tops) > 10 else "")
            raise TrailError(f"{where} holds {len(tops)} runs ({listed}): say which one (run_id)")
        run_id = tops[0]
    if run_id not in runs:
        listed = ", ".join(list(runs)[:10])
        raise TrailError(f"{where} has no run {run_id!r}; runs: {listed}")
    notes = (NO_REASONING,) if run_id in old else ()
    return tuple(sorted(runs[run_id], key=lambda e: e.seq)), notes


async def store_trail(store: RunStore, run_id: str) -> tuple[ev.Event, ...]:
    """Run ``run_id``'s events as ``store`` keeps them (:class:`TrailError` if it has none)."""
    return (await store_run(store, run_id))[0]


async def store_run(store: RunStore, run_id: str) -> tuple[tuple[ev.Event, ...], tuple[str, ...]]:
    """:func:`store_trail`, and what the trail's format lacks."""
    old: set[str] = set()
    events = tuple(_load(data, old) for data in await store.events(run_id))
    if not events:
        raise TrailError(f"the run store has no events of run {run_id!r}")
    return events, (NO_REASONING,) if old else ()


def _load(data: Mapping[str, Any], old: set[str]) -> ev.Event:
    if data.get("type") == "ModelCallFinished" and "reasoning" not in data:
        old.add(str(data.get("run_id")))
    return ev.load(data)


def _read_jsonl(path: str, old: set[str]) -> Iterable[ev.Event]:
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.readlines()
    except OSError as exc:
        raise TrailError(f"cannot read the trail {path}: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not line.endswith("\n"):
                return  # a last line torn by a crash mid-write
            raise TrailError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
        try:
            yield _load(data, old)
        except Exception as exc:
            raise TrailError(f"{path}:{number}: not a tether event: {exc}") from None


@attrs.frozen(kw_only=True)
class Fault:
    """A provider failure the trail recorded (a ``ProviderRetry``): replayed as raised."""

    error_type: str
    message: str
    #: Usage the failed attempt was charged before it failed.
    usage: TokenUsage | None = None
    #: The attempt did not fail: the run cut it mid-stream (a ceiling it crossed, or a
    #: cancel: ``cancel`` is then its reason). Replayed as its usage, then the same cut.
    cut: bool = False
    cancel: str | None = None

    def error(self) -> ProviderError:
        cls = _ERRORS.get(self.error_type, TransientProviderError)
        try:
            return cls(self.message)
        except TypeError:  # an error class with other arguments: a plain retryable one
            return TransientProviderError(self.message)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# vars(), not getattr(): the provider classes that tether.providers loads on first use
# stay unloaded (the errors are all loaded with the package).
_ERRORS: dict[str, type[ProviderError]] = {
    _snake(name): cls
    for name, cls in vars(providers).items()
    if name in providers.__all__ and isinstance(cls, type) and issubclass(cls, ProviderError)
}


@attrs.frozen(kw_only=True)
class Recording:
    """What replay needs from one run's events, read once."""

    run_id: str
    events: tuple[ev.Event, ...]
    started: ev.RunStarted | None
    #: What the provider answered, in order: a response, or a fault (request ``i``
    #: of the run, retries included, is item ``i``), with the round of each.
    calls: tuple[tuple[int, ModelResponse | Fault], ...]
    #: The tool results by call id, with the ``seq`` of their ``ToolCallFinished``.
    tools: Mapping[str, tuple[int, ToolDone]]
    #: The host's answers to approvals, by call id.
    answers: Mapping[str, tuple[bool, str | None]]
    #: Each judgement, with the usage its judge was charged (an LLM judge's), in order.
    judgements: tuple[tuple[ev.Judged, TokenUsage | None], ...] = ()
    #: What the trail does not hold that the run had (said in the replay's notes).
    missing: tuple[str, ...] = ()

    @classmethod
    def of(cls, events: Sequence[ev.Event], notes: Sequence[str] = ()) -> Recording:
        """What replay needs from one run's ``events`` (``notes``: what their format lacks)."""
        if not events:
            raise TrailError("the trail holds no events")
        started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
        calls: list[tuple[int, ModelResponse | Fault]] = []
        tools: dict[str, tuple[int, ToolDone]] = {}
        answers: dict[str, tuple[bool, str | None]] = {}
        missing: list[str] = list(notes)
        attempt_usage: TokenUsage | None = None
        previous: ev.Event | None = None
        children: dict[str, ev.ChildRunFinished] = {}
        judgements: list[tuple[ev.Judged, TokenUsage | None]] = []
        judge_usage: TokenUsage | None = None
        open_call = False  # a model call started and not (yet) answered
        for event in events:
            if isinstance(event, ev.ModelCallStarted):
                attempt_usage, open_call = None, True
            elif isinstance(event, ev.UsageCharged) and event.source == "model":
                attempt_usage = _usage(event)
            elif isinstance(event, ev.UsageCharged) and event.source == "judge":
                judge_usage = _usage(event)
            elif isinstance(event, ev.Judged):
                judgements.append((event, judge_usage))
                judge_usage = None
            elif isinstance(event, ev.ProviderRetry):
                fault = Fault(
                    error_type=event.error_type, message=event.message, usage=attempt_usage
                )
                calls.append((event.round, fault))
                open_call = False
            elif isinstance(event, ev.ModelCallFinished):
                calls.append((event.round, _response(event)))
                open_call = False
            elif isinstance(event, ev.ChildRunFinished):
                children[event.call_id] = event
            elif isinstance(event, ev.ToolCallFinished):
                tools[event.call_id] = (event.seq, _done(event, children, previous))
            elif isinstance(event, ev.ApprovalAnswered):
                answers[event.call_id] = (event.approved, event.reason)
            elif isinstance(event, ev.ConversationLoaded):
                missing.append(
                    f"the {event.messages} messages the run loaded from conversation "
                    f"{event.conversation!r} (replayed without them)"
                )
            elif isinstance(event, ev.RunFinished) and event.termination == "provider_failed":
                # The failure that ended the run is in its error: "ClassName: message".
                cause = re.fullmatch(r"(\w+): (.*)", event.error or "", re.S)
                if cause is not None and _snake(cause[1]) in _ERRORS:
                    failed = Fault(
                        error_type=_snake(cause[1]), message=cause[2], usage=attempt_usage
                    )
                    calls.append((event.round, failed))
                    open_call = False
            elif isinstance(event, ev.RunFinished) and open_call:
                cancel = event.error if event.termination == "cancelled" else None
                cut = Fault(error_type="", message="", usage=attempt_usage, cut=True, cancel=cancel)
                calls.append((event.round, cut))
                if event.termination == "deadline":
                    missing.append(
                        "when the run's deadline cut its last model call (the replay's "
                        "clock is its own)"
                    )
            elif isinstance(event, ev.ProviderFallback):
                missing.append(
                    f"the provider's fallback in round {event.round} "
                    f"({event.from_model} → {event.to_model}; replayed as one provider)"
                )
            previous = event
        if started is None:
            missing.append("the run's start (RunStarted): the trail begins mid-run")
        if not isinstance(events[-1], ev.RunFinished):
            missing.append(
                f"the run's end: the trail stops at seq {events[-1].seq} "
                f"({type(events[-1]).__name__}); compared up to there"
            )
        if any("image" in d.content for _, d in tools.values()):
            missing.append("images in tool results (the trail keeps their text stand-ins)")
        return cls(
            run_id=events[0].run_id,
            events=tuple(events),
            started=started,
            calls=tuple(calls),
            tools=tools,
            answers=answers,
            judgements=tuple(judgements),
            missing=tuple(dict.fromkeys(missing)),
        )

    def model_calls_upto(self, round: int) -> int:
        """How many provider requests the run made in its first ``round`` rounds."""
        return sum(1 for r, _ in self.calls if r <= round)


def _usage(event: ev.UsageCharged) -> TokenUsage:
    """The provider's usage a charge was made of (its ``input_tokens`` count the cache's)."""
    return TokenUsage(
        input_tokens=event.input_tokens - event.cache_read_tokens - event.cache_write_tokens,
        output_tokens=event.output_tokens,
        cache_read_tokens=event.cache_read_tokens,
        cache_write_tokens=event.cache_write_tokens,
        estimated=event.estimated,
    )


def _response(event: ev.ModelCallFinished) -> ModelResponse:
    content: list[ContentBlock] = [*event.reasoning]
    if event.text:
        content.append(TextBlock(text=event.text))
    content.extend(event.tool_calls)
    try:
        stop = StopReason(event.stop_reason)
    except ValueError:
        stop = StopReason.UNKNOWN
    return ModelResponse(
        content=tuple(content),
        stop_reason=stop,
        usage=event.usage,
        raw_stop_reason=event.raw_stop_reason,
        model=event.model,
    )


def _done(
    event: ev.ToolCallFinished,
    children: Mapping[str, ev.ChildRunFinished],
    previous: ev.Event | None,
) -> ToolDone:
    output = None
    child = children.get(event.call_id)
    charged = previous if isinstance(previous, ev.UsageCharged) else None
    if charged is not None and charged.source != "subagent":
        charged = None
    if child is not None or charged is not None:
        output = ToolOutput(
            content=event.content,
            is_error=event.is_error,
            input_tokens=0 if charged is None else charged.input_tokens,
            output_tokens=0 if charged is None else charged.output_tokens,
            cost_usd=None if charged is None else charged.cost_usd,
            child_run_id=None if child is None else child.child_run_id,
            child_termination=None if child is None else child.termination,
        )
    return ToolDone(
        call_id=event.call_id,
        name=event.name,
        # (denied and nudged calls never reach the tools actor: they are never asked for)
        outcome=cast(Any, event.outcome),
        content=event.content,
        attempts=event.attempts,
        output=output,
    )
