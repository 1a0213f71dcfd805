"""Playback: a run that plays a recorded run's trail (docs/guides/replay.md).

:func:`replay` runs the agent again, in a Runtime of its own, with its
provider swapped for a :class:`ReplayProvider` that answers each request with
the response the trail recorded for it, and its tools answered from the
recorded results (a :class:`Playback`): no model is called and no tool
executed, unless ``live_tools=True``. Everything else is the agent's own code:
the instructions function, the tools' argument checks, the policies, the
judge, the typed output. Its events are then compared with the recorded ones,
structurally (:func:`compare`): the replay is :attr:`Replay.identical`, or
the :class:`Divergence` says where the code now does otherwise.

A fork (:mod:`._fork`) plays the same way up to a round, then goes on live.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import anyio
import anyio.lowlevel
import attrs

import tether.runtime._events as ev
from tether.actors import RunTools, ToolArgumentsInvalid, ToolDone
from tether.providers import (
    Backoff,
    FatalProviderError,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    Price,
    Provider,
    ProviderContext,
    StopReason,
    StreamItem,
    TextBlock,
    TextDelta,
    TokenUsage,
    UsageDelta,
)

from ._agent import Agent
from ._recording import Fault, Recording, TrailSource, read_run
from ._result import RunResult
from ._startcheck import StartChecked, check_start
from ._toolround import Approvals

if TYPE_CHECKING:
    from tether.actors import ToolActor

    from ._run import Run


class ReplayExhausted(FatalProviderError):
    """A replayed run asked for more model calls than its trail recorded."""


class ReplayProvider:
    """A provider that answers from a recorded run's trail, offline.

    Request ``i`` of a run (retries included, as ``ProviderContext.call_index``
    counts them) gets the trail's ``i``-th provider answer: the response the
    ``ModelCallFinished`` recorded, or the failure a ``ProviderRetry`` recorded,
    raised again (so retries replay as retries, without their waits). Past the
    trail, a request raises :class:`ReplayExhausted`, or goes to ``then`` (a
    live provider: how a fork goes on). Many runs can share one: each is
    answered from the start of the trail.

    ``name`` and ``model`` default to the recorded run's, ``price`` (what the
    replay charges) to none: :func:`replay` passes the agent's own provider's.
    """

    native_output: ClassVar[bool] = True

    def __init__(
        self,
        trail: TrailSource | Recording,
        *,
        run_id: str | None = None,
        name: str | None = None,
        model: str | None = None,
        price: Price | None = None,
        max_tokens: int | None = None,
        context_window: int | None = None,
        then: Provider | None = None,
    ) -> None:
        recording = (
            trail if isinstance(trail, Recording) else Recording.of(*read_run(trail, run_id))
        )
        started = recording.started
        self._items: tuple[ModelResponse | Fault, ...] = tuple(item for _, item in recording.calls)
        self.name: str = name or (started.provider if started else None) or "replay"
        self.model: str = model or (started.model if started else None) or "replay"
        self.max_tokens = max_tokens
        self.context_window = context_window
        self.backoff = Backoff(initial=0.0, jitter=False)  # a replayed retry does not wait
        self._price = price
        self._then = then
        #: Called with the run id when a run's first request past the trail goes to ``then``.
        self.on_live: Callable[[str], None] | None = None
        #: Called with the reason where the recorded run was cancelled mid-call.
        self.on_cut: Callable[[str], None] | None = None
        #: Requests answered from the trail, and handed to ``then``, so far.
        self.replayed = 0
        self.live = 0

    @property
    def recorded_calls(self) -> int:
        """The provider answers the trail holds (responses and failures)."""
        return len(self._items)

    def price(self) -> Price | None:
        return self._price

    def gate_key(self) -> str | None:
        return None if self._then is None else self._then.gate_key()

    def check_ready(self) -> None:
        """``then``'s check (a fork's live provider without its key fails at the start)."""
        if (ready := getattr(self._then, "check_ready", None)) is not None:
            ready()

    def check_settings(self, settings: ModelSettings) -> None:
        """Every setting is accepted: the recorded responses are what they are."""

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        index, items = ctx.call_index, self._items
        if index < len(items):
            self.replayed += 1
            item = items[index]
            if isinstance(item, Fault):
                if item.usage is not None:
                    yield UsageDelta(usage=item.usage)
                if item.cut:
                    # The recorded run cut this call here: on this usage (a ceiling, which
                    # closes this stream), or by a cancel, which the run is given again.
                    if item.cancel is not None and self.on_cut is not None:
                        self.on_cut(item.cancel)
                    await anyio.lowlevel.checkpoint()
                    raise ReplayExhausted(
                        "replay: the recorded run cut this model call mid-stream; "
                        "the replayed run did not"
                    )
                raise item.error()
            if item.text:
                yield TextDelta(text=item.text)
            yield item
            return
        then = self._then
        if then is None:
            raise ReplayExhausted(
                f"replay: the trail holds {len(items)} provider answers; "
                f"the run asked for answer {index + 1}"
            )
        if index == len(items) and self.on_live is not None:
            self.on_live(ctx.run_id)
        self.live += 1
        live = ProviderContext(run_id=ctx.run_id, call_index=index - len(items), http=ctx.http)
        async with _closed_after(then.stream(request, live)) as stream:
            async for out in stream:
                yield out


_T = TypeVar("_T")


@contextlib.asynccontextmanager
async def _closed_after(stream: AsyncIterator[_T]) -> AsyncIterator[AsyncIterator[_T]]:
    """``stream``, closed on the way out (shielded: a cancelled reader still closes the
    live provider's call)."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


class JudgeReplies:
    """An LLM judge's provider in a played run: each recorded judgement's reply, rebuilt
    from its ``Judged`` event (the scores, and the reasons of the criteria that failed)
    and the usage its judge was charged; past them (a fork's live rounds), ``live``.

    The judge's own code reads the reply as it would the model's: a threshold changed
    since the recording changes the judgement. A recorded judgement whose replies were
    malformed replays as two malformed replies (the trail does not keep their text).
    """

    def __init__(self, recording: Recording, live: Provider, until: int | None = None) -> None:
        replies: list[ModelResponse] = []
        for judged, usage in recording.judgements:
            if until is not None and judged.round > until:
                break
            if judged.error is not None:
                bad = ModelResponse(
                    content=(TextBlock(text="(not kept in the trail)"),),
                    stop_reason=StopReason.END_TURN,
                    usage=usage or ZERO,
                )
                replies += [bad, bad]
                continue
            body = {
                name: {"score": score, "reason": judged.feedback.get(name, "")}
                for name, score in judged.scores.items()
            }
            text = json.dumps({"criteria": body})
            replies.append(
                ModelResponse(
                    content=(TextBlock(text=text),),
                    stop_reason=StopReason.END_TURN,
                    usage=usage or ZERO,
                )
            )
        self._replies, self._next, self._live = replies, 0, live
        self.name, self.model, self.backoff = live.name, live.model, live.backoff

    def price(self) -> Price | None:
        return self._live.price()

    def gate_key(self) -> str | None:
        return self._live.gate_key()

    async def stream(
        self, request: ModelRequest, ctx: ProviderContext
    ) -> AsyncIterator[StreamItem]:
        if self._next < len(self._replies):
            self._next += 1
            yield self._replies[self._next - 1]
            return
        async with _closed_after(self._live.stream(request, ctx)) as stream:
            async for out in stream:
                yield out


def played_judge(agent: Agent[Any, Any], recording: Recording, until: int | None = None) -> Any:
    """``agent``'s judge for a played run: an :class:`~tether.LLMJudge` answered by
    :class:`JudgeReplies`; any other judge as it is (its code runs again)."""
    from ._llm_judge import LLMJudge  # loaded on first use, as tether.runtime loads it

    judge = agent.judge
    if isinstance(judge, LLMJudge):
        return attrs.evolve(judge, provider=JudgeReplies(recording, judge.provider, until))
    return judge


class _PlaybackApprovals(Approvals):
    """Approvals answered from the trail, as the calls are held (the request still goes
    into the trail first, as it did when the run was recorded)."""

    __slots__ = ("_playback",)

    def __init__(self, pending: Any, playback: Playback) -> None:
        super().__init__(pending)
        self._playback = playback

    def hold(self, call: Any, reason: str) -> bool:
        answered = super().hold(call, reason)
        playback = self._playback
        if not answered and playback.playing():
            answer = playback.recording.answers.get(call.id)
            if answer is None and playback.until is None:
                answer = (False, "replay: the trail holds no answer for this call")
            if answer is not None:
                self.answer(call.id, *answer)
        return answered


class _PlaybackTools:
    """The tools actor of a played run: recorded results while the run plays its trail,
    the live actor otherwise (and for a timed call's ``scope``/``cut``)."""

    def __init__(self, playback: Playback, live: ToolActor) -> None:
        self._playback, self._live = playback, live

    def scope(self) -> Any:
        return self._live.scope()

    async def cut(self, request: RunTools) -> None:
        await self._live.cut(request)

    async def handle(self, request: RunTools) -> None:
        dones = self._playback.results(request)
        if dones is None:
            await self._live.handle(request)
            return
        with request.reply:
            try:
                for done in dones:
                    request.reply.send_nowait(done)
            except anyio.BrokenResourceError:
                pass  # the run stopped listening


class Playback:
    """A played run's recorded tool results and approval answers (``RunExtras.playback``).

    ``until``: the last round played from the trail (a fork's ``at_round``); ``None``:
    every round (a replay), where a call the trail has no result for fails fatally.
    """

    def __init__(
        self, recording: Recording, *, until: int | None = None, live_tools: bool = False
    ) -> None:
        self.recording, self.until, self.live_tools = recording, until, live_tools
        self._run: Run | None = None

    def bind(self, run: Run) -> None:
        """Called by the run as it is made."""
        self._run = run
        run.approvals = _PlaybackApprovals(run.state.approvals, self)

    def playing(self) -> bool:
        """Whether the run is in a round played from the trail."""
        return self.until is None or (self._run is not None and self._run.trail.round <= self.until)

    def tools(self, factory: Callable[[], ToolActor]) -> Callable[[], Any]:
        """The run's tools actor factory, given the live one's."""
        if self.live_tools:
            return factory
        return lambda: _PlaybackTools(self, factory())

    def results(self, request: RunTools) -> list[ToolDone] | None:
        """The recorded results of ``request``'s calls, or ``None``: run them live."""
        if not self.playing():
            return None
        dones: list[tuple[int, ToolDone]] = []
        last = 1 << 62  # results the trail lacks come after the recorded ones
        for invocation in request.invocations:
            call, spec = invocation.call, invocation.spec
            recorded = self.recording.tools.get(call.id)
            try:
                spec.validate(call.input)  # the tool's own argument checks, as they are now
            except ToolArgumentsInvalid as exc:
                seq = last if recorded is None else recorded[0]
                dones.append((seq, _done(call.id, call.name, "model_error", str(exc))))
                continue
            if recorded is None:
                if self.until is not None:
                    return None  # a fork: not recorded, so run it
                why = "replay: the trail holds no result for this call"
                dones.append((last, _done(call.id, call.name, "fatal_error", why)))
            else:
                dones.append(recorded)
        # In the order the recorded run got them (its calls ran concurrently).
        return [done for _, done in sorted(dones, key=lambda pair: pair[0])]

    def cancel(self, reason: str) -> None:
        """Cancel the run as the recorded one was (mid-call, with ``reason``)."""
        if self._run is not None:
            self._run.cancel(reason)

    def seam(self, run_id: str) -> None:
        """The fork's first live request: its ``RunForked`` seam."""
        run = self._run
        if run is None or self.until is None:
            return
        trail = run.trail
        trail.add(ev.RunForked(**trail.head(), from_run=self.recording.run_id, at_round=self.until))


ZERO = TokenUsage()


def _done(call_id: str, name: str, outcome: Any, content: str) -> ToolDone:
    return ToolDone(call_id=call_id, name=name, outcome=outcome, content=content, attempts=0)


# ------------------------------------------------------------------ comparing

#: Events a replay does not compare: waits on a gate, a provider fallback, a durable
#: run's seams, a conversation's store (none of them is the agent's code).
_NOT_COMPARED: tuple[type[ev.Event], ...] = (
    ev.ProviderWait,
    ev.ProviderFallback,
    ev.RunResumed,
    ev.ConversationLoaded,
    ev.ConversationAppended,
    ev.ConversationFailed,
    *ev.DELTA_TYPES,
)
#: Fields never compared: the header's, and the waits between retries.
_HEADER = frozenset({"run_id", "seq", "at"})
_TIMING: Mapping[str, frozenset[str]] = {"ProviderRetry": frozenset({"wait_s"})}


@attrs.frozen(kw_only=True)
class Divergence:
    """Where a replay first did otherwise than the trail.

    ``expected`` is the recorded event and ``got`` the replay's, as JSON dicts
    without their header (``None``: the trail, or the replay, had no more
    events); ``round`` and ``stage`` say where the run was (the stage the
    replay was in, or ``None`` between stages); ``seq`` is the recorded event's.
    """

    round: int
    stage: str | None
    seq: int | None
    expected: Mapping[str, Any] | None
    got: Mapping[str, Any] | None

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields that differ (every field when the event types differ)."""
        expected, got = self.expected or {}, self.got or {}
        if expected.get("type") != got.get("type"):
            return tuple(dict.fromkeys([*expected, *got]))
        return tuple(k for k in dict.fromkeys([*expected, *got]) if expected.get(k) != got.get(k))

    def __str__(self) -> str:
        where = f"round {self.round}" + (f", stage {self.stage}" if self.stage else "")
        return f"diverged at {where}: recorded {_brief(self.expected)}, replayed {_brief(self.got)}"


def _brief(data: Mapping[str, Any] | None) -> str:
    if data is None:
        return "nothing (the run ended)"
    text = json.dumps(data, ensure_ascii=False, sort_keys=False, default=str)
    return text if len(text) <= 400 else text[:399] + "…"


@attrs.frozen(kw_only=True)
class Replay:
    """What :func:`replay` found."""

    #: The recorded run's id (the replay ran under the same id).
    run_id: str
    #: The first divergence, or ``None``: the replay was identical.
    divergence: Divergence | None
    #: The recorded events and the replay's.
    recorded: tuple[ev.Event, ...]
    events: tuple[ev.Event, ...]
    #: The replayed run's result.
    result: RunResult[Any]
    #: What the trail does not hold, that the run had (the replay did without it).
    notes: tuple[str, ...] = ()
    #: Model calls answered from the trail (no model was called).
    replayed_calls: int = 0

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def __str__(self) -> str:
        return "identical" if self.divergence is None else str(self.divergence)


def comparable(event: ev.Event) -> dict[str, Any] | None:
    """``event`` as a replay compares it (its JSON without the header), or ``None``:
    an event a replay does not compare."""
    if isinstance(event, _NOT_COMPARED):
        return None
    data = json.loads(json.dumps(ev.dump(event), default=str))
    drop = _HEADER | _TIMING.get(data["type"], frozenset())
    return {k: v for k, v in data.items() if k not in drop}


def _canonical(events: Sequence[ev.Event]) -> list[tuple[ev.Event, dict[str, Any]]]:
    """The compared events, with each run of consecutive ``ToolCallFinished`` sorted by
    call id: a round's calls run concurrently, so they may finish in any order. After a
    ``RunResumed`` seam, the stages the run enters again (it was in them at the seam: a
    parked tool round) are left out."""
    out: list[tuple[ev.Event, dict[str, Any]]] = []
    open_stages: list[str] = []
    seam = False
    for event in events:
        if isinstance(event, ev.RunResumed):
            seam = True
            continue
        if isinstance(event, ev.StageEntered):
            if seam and event.stage in open_stages:
                continue
            open_stages.append(event.stage)
        elif isinstance(event, ev.StageExited) and event.stage in open_stages:
            del open_stages[len(open_stages) - 1 - open_stages[::-1].index(event.stage)]
        seam = False
        if (data := comparable(event)) is not None:
            out.append((event, data))
    i = 0
    while i < len(out):
        j = i
        while j < len(out) and isinstance(out[j][0], ev.ToolCallFinished):
            j += 1
        if j - i > 1:
            out[i:j] = sorted(out[i:j], key=lambda pair: str(pair[1].get("call_id")))
        i = max(j, i + 1)
    return out


def compare(recorded: Sequence[ev.Event], replayed: Sequence[ev.Event]) -> Divergence | None:
    """The first place ``replayed`` differs from ``recorded`` (``None``: nowhere).

    A trail that stops before its run's end (``RunFinished``) is compared up to there.
    """
    mine = _canonical(recorded)
    theirs = _canonical(replayed)
    complete = bool(recorded) and isinstance(recorded[-1], ev.RunFinished)
    stages: list[str] = []
    for i in range(max(len(mine), len(theirs))):
        want = mine[i] if i < len(mine) else None
        got = theirs[i] if i < len(theirs) else None
        if want is None and not complete:
            return None
        if want is None or got is None or want[1] != got[1]:
            at = got[0] if got is not None else want[0] if want is not None else None
            return Divergence(
                round=0 if at is None else at.round,
                stage=stages[-1] if stages else None,
                seq=None if want is None else want[0].seq,
                expected=None if want is None else want[1],
                got=None if got is None else got[1],
            )
        event = got[0]
        if isinstance(event, ev.StageEntered):
            stages.append(event.stage)
        elif isinstance(event, ev.StageExited) and stages:
            stages.pop()
    return None


# ------------------------------------------------------------------ launching


H = TypeVar("H", covariant=True)


class Launches(Protocol[H]):
    """What :func:`launch` needs of a :class:`~tether.Runtime` (not imported: it imports
    this module); ``H`` is its handles' type (as ``in_flight`` returns them)."""

    conversations: Any

    def new_run_id(self) -> str: ...

    def in_flight(self, run_id: str) -> H | None: ...

    def _launch(
        self,
        agent: Agent[Any, Any],
        start: tuple[StartChecked, str],
        parent_run_id: str | None,
        conversation: str | None,
        *,
        recorded: bool,
    ) -> Any: ...


def launch(
    rt: Launches[H],
    agent: Agent[Any, Any],
    input: str,
    *,
    playback: Playback,
    run_id: str | None = None,
    parent_run_id: str | None = None,
    deps: Any = None,
    settings: ModelSettings | None = None,
) -> H:
    """Start a played run in ``rt``: :meth:`Runtime.start`'s checks, with ``playback``;
    its ``RunHandle``."""
    checked = check_start(agent, input, settings=settings, deps=deps)
    checked = attrs.evolve(checked, extras=attrs.evolve(checked.extras, playback=playback))
    if (ready := getattr(agent.provider, "check_ready", None)) is not None:
        ready()
    run_id = run_id or rt.new_run_id()
    if rt.in_flight(run_id) is not None:
        raise ValueError(f"a run with id {run_id!r} is already in flight")
    handle: H = rt._launch(agent, (checked, run_id), parent_run_id, None, recorded=False)
    return handle


def replay_provider(recording: Recording, agent: Agent[Any, Any]) -> ReplayProvider:
    """A :class:`ReplayProvider` of ``recording`` that prices and clamps as ``agent``'s does."""
    own = agent.provider
    window = getattr(own, "context_window", None)
    most = getattr(own, "max_tokens", None)
    return ReplayProvider(
        recording,
        # The agent's own: a model changed since the recording shows in RunStarted.
        name=own.name,
        model=own.model,
        price=own.price(),
        max_tokens=most if isinstance(most, int) else None,
        context_window=window if isinstance(window, int) else None,
    )
