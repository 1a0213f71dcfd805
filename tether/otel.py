"""OpenTelemetry traces of tether runs: an event sink that turns events into spans.

Install the extra (``pip install 'tether[otel]'``) and pass the sink to the
Runtime::

    from opentelemetry.sdk.trace import TracerProvider
    from tether.otel import OtelSink

    provider = TracerProvider()          # add your span processors / exporters
    sink = OtelSink(provider)
    async with tether.Runtime(event_sink=sink) as rt:
        await rt.run(agent, "question")

Spans, with explicit start and end times taken from the events' ``at``:

- ``invoke_agent {agent}`` — one per run, from ``RunStarted`` to ``RunFinished``.
  Its parent is the span current where the run was started (``rt.start``), or,
  for a sub-agent's run (``parent_run_id``), the parent run's open tool call.
- ``tether.round`` — one per round (attribute ``tether.round``), a child of the
  run, from the round's first event to the end of its ``decide`` stage.
- ``chat {model}`` — one per model call, a child of the round, from
  ``ModelCallStarted`` (attempt 1) to ``ModelCallFinished``. Provider retries
  inside it are span events; a call that never answered ends with an error.
  When a ``FallbackProvider`` moves the call to its next provider (a
  ``ProviderFallback`` event, also a span event), the span is renamed after
  the model that answers, and the run's later calls are named after it too.
- ``execute_tool {name}`` — one per tool call, a child of the round, from
  ``ToolCallStarted`` to ``ToolCallFinished``; an ``is_error`` result is an error.
- An MCP server's reconnection (``MCPServerRestarted``) is a
  ``tether.mcp_server_restarted`` event on the run's span.
- A forked run's seam (``RunForked``) is a ``tether.run_forked`` event on the
  run's span (``tether.forked.from_run``, ``tether.forked.at_round``).

Attributes follow the OpenTelemetry GenAI semantic conventions
(``gen_ai.operation.name``, ``gen_ai.provider.name`` and the older
``gen_ai.system``: the vendor, ``openai`` for ``OpenAIResponsesProvider`` and
``gcp.gemini`` for ``GeminiProvider``, with tether's name in ``tether.provider``
where the two differ; ``gen_ai.request.model``, ``gen_ai.agent.name``,
``gen_ai.usage.input_tokens`` / ``output_tokens``,
``gen_ai.response.finish_reasons``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id``, ``error.type``) plus ``tether.*`` ones
(``tether.run_id``, ``tether.termination``, ``tether.round``, ...). A run that
does not end ``answered`` or ``terminal_tool`` gets an error status.

The provider and model come from ``RunStarted``. Message content (the run's
input and output, tool arguments and results) is recorded only with
``capture_content=True``.

The sink is synchronous and cheap, keeps state only for runs in flight (it is
dropped at ``RunFinished``), and never raises into the runtime: a failure is
logged once on the ``tether.otel`` logger. It runs inside the run's task, so
export with a ``BatchSpanProcessor`` in production (``SimpleSpanProcessor``
exports synchronously, as each span ends).

:func:`combine` fans one event stream out to several sinks, e.g.
``Runtime(event_sink=combine(JsonlSink("runs.jsonl"), OtelSink()))``.

:class:`OtelEvalRecorder` records an eval's judgements (``tether.evals``): pass it
as ``evaluate(..., on_result=OtelEvalRecorder())``. Each case run is a
``tether.eval_case`` span (attributes ``tether.eval.case_id``,
``tether.eval.repeat``, ``tether.eval.passed``, ``tether.eval.status``,
``tether.run_id``, ``tether.termination``), current while the run starts: with an
:class:`OtelSink` on the eval's Runtime, the run's ``invoke_agent`` span is its
child. It carries one ``gen_ai.evaluation.result`` event per criterion, with the GenAI
conventions' attributes: ``gen_ai.evaluation.name`` (the criterion, as the report
names it), ``gen_ai.evaluation.score.value``, ``gen_ai.evaluation.score.label``
(``pass`` or ``fail``), ``gen_ai.evaluation.explanation`` (the judge's reason), and
``error.type`` (``judge_error``) with the judge's error when the judge failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import weakref
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

import attrs

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # tests/test_otel.py hides opentelemetry to check this
    raise ImportError(
        "tether.otel needs OpenTelemetry: install the extra with "
        "pip install 'tether[otel]' (opentelemetry-api and opentelemetry-sdk)"
    ) from exc

from tether import events as ev
from tether.runtime import EventSink, Termination, combine

if TYPE_CHECKING:
    from tether.evals import CaseResult

__all__ = [
    "EventSink",
    "OtelEvalRecorder",
    "OtelSink",
    "adopt_remote_parent",
    "combine",
    "tool_call_span",
    "traceparent_headers",
    "tracing",
]

#: What ``Runtime(event_sink=...)`` takes: a callable of one event.

_log = logging.getLogger("tether.otel")

#: Longest status description kept (a crashed run's traceback is longer).
_MAX_DESCRIPTION = 1000
#: tether's provider names whose GenAI ``gen_ai.provider.name`` differs (the
#: conventions name the vendor, not its API); the tether name is in ``tether.provider``.
_SEMCONV_PROVIDER = {"openai-responses": "openai", "gemini": "gcp.gemini"}


def _provider_attributes(provider: str) -> dict[str, str]:
    """The provider's attributes: the GenAI name (and the older ``gen_ai.system``), and
    tether's own name where the two differ."""
    name = _SEMCONV_PROVIDER.get(provider, provider)
    attributes = {"gen_ai.provider.name": name, "gen_ai.system": name}
    if name != provider:
        attributes["tether.provider"] = provider
    return attributes


def _version() -> str | None:
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:
        return None


def _ns(at: float) -> int:
    """Unix seconds (an event's ``at``) to the nanoseconds OpenTelemetry wants."""
    return int(at * 1_000_000_000)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


@attrs.define
class _RunSpans:
    """The open spans of one run in flight."""

    span: Span
    provider: str | None
    model: str | None
    round_no: int = 0
    round: Span | None = None
    chat: Span | None = None
    #: A chat span whose call ended without a response: (span, end time), ended
    #: at RunFinished (or the next round), when the reason is known.
    failed_chat: tuple[Span, float] | None = None
    tools: dict[str, Span] = attrs.field(factory=dict)

    def parent(self) -> Span:
        return self.round if self.round is not None else self.span


class OtelSink:
    """An event sink that records runs as OpenTelemetry spans (see the module doc).

    ``tracer_provider`` defaults to the global one
    (``opentelemetry.trace.get_tracer_provider()``). ``capture_content`` records
    the run's input and output, tool arguments and tool results.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool = False,
    ) -> None:
        self._tracer: Tracer = trace.get_tracer(
            "tether", _version(), tracer_provider=tracer_provider
        )
        self.capture_content = capture_content
        self._runs: dict[str, _RunSpans] = {}
        self._failed = False
        _SINKS.add(self)

    def tool_span(self, run_id: str, call_id: str) -> Span | None:
        """The open ``execute_tool`` span of a tool call in flight, or ``None``."""
        run = self._runs.get(run_id)
        return None if run is None else run.tools.get(call_id)

    def follows(self, run_id: str) -> bool:
        """Whether this sink has the run's spans open (its ``RunStarted`` came)."""
        return run_id in self._runs

    @property
    def open_runs(self) -> int:
        """Runs whose spans are open (started, not yet finished)."""
        return len(self._runs)

    def __call__(self, event: ev.Event) -> None:
        try:
            self._handle(event)
        except Exception:
            if not self._failed:
                self._failed = True
                _log.exception(
                    "tether.otel: could not record event %s of run %s (reported once)",
                    type(event).__name__,
                    event.run_id,
                )
            if isinstance(event, ev.RunFinished):
                self._runs.pop(event.run_id, None)

    # ----------------------------------------------------------------- events

    def _handle(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            self._run_started(event)
            return
        if isinstance(event, ev.RunFinished):
            self._run_finished(event)
            return
        run = self._runs.get(event.run_id)
        if run is None:
            return  # the sink was attached mid-run: nothing to hang the event on
        if event.round > run.round_no:
            self._open_round(run, event)
        at = _ns(event.at)
        if isinstance(event, ev.ModelCallStarted):
            self._model_call_started(run, event)
        elif isinstance(event, ev.ModelCallFinished):
            self._model_call_finished(run, event)
        elif isinstance(event, ev.ProviderRetry):
            if run.chat is not None:
                run.chat.add_event(
                    "tether.provider_retry",
                    {
                        "error.type": event.error_type,
                        "tether.attempt": event.attempt,
                        "tether.wait_s": event.wait_s,
                        "tether.message": event.message,
                    },
                    timestamp=at,
                )
        elif isinstance(event, ev.ProviderFallback):
            self._fallback(run, event)
        elif isinstance(event, ev.ProviderWait):
            if run.chat is not None:
                run.chat.add_event(
                    "tether.provider_wait",
                    {"tether.wait_s": event.wait_s, "tether.reason": event.reason},
                    timestamp=at,
                )
        elif isinstance(event, ev.ToolCallStarted):
            self._tool_started(run, event)
        elif isinstance(event, ev.ToolCallFinished):
            self._tool_finished(run, event)
        elif isinstance(event, ev.StageExited):
            if event.stage == "model" and run.chat is not None:
                # The call ended without a response (provider failure, a ceiling
                # crossed mid-stream, a crash): end it once the reason is known.
                run.failed_chat, run.chat = (run.chat, event.at), None
            elif event.stage == "decide" and run.round is not None:
                run.round.end(end_time=at)
                run.round = None
        elif isinstance(event, ev.Transition):
            if event.kind != "complete":
                self._end_failed_chat(run, None)
            if run.round is not None:
                run.round.set_attributes(
                    {"tether.transition.kind": event.kind, "tether.transition.reason": event.reason}
                )
        elif isinstance(event, ev.Judged):
            run.parent().add_event(
                "tether.judged",
                {
                    "tether.judge.passed": event.passed,
                    "tether.judge.min_score": min(event.scores.values(), default=0.0),
                    **{f"tether.judge.score.{k}": float(v) for k, v in event.scores.items()},
                },
                timestamp=at,
            )
        elif isinstance(event, ev.PolicyChecked):
            if event.verdict != "allow":
                attributes: dict[str, str] = {
                    "tether.policy.point": event.point,
                    "tether.policy.verdict": event.verdict,
                }
                if event.reason:
                    attributes["tether.policy.reason"] = event.reason
                if event.call_id:
                    attributes["gen_ai.tool.call.id"] = event.call_id
                run.parent().add_event("tether.policy", attributes, timestamp=at)
        elif isinstance(event, ev.CeilingHit):
            run.span.add_event(
                "tether.ceiling_hit",
                {
                    "tether.ceiling": event.ceiling,
                    "tether.limit": float(event.limit),
                    "tether.used": float(event.used),
                },
                timestamp=at,
            )
        elif isinstance(event, ev.ChildCrashed):
            run.span.add_event(
                "tether.child_crashed",
                {"tether.actor": event.actor, "tether.error": event.error[-_MAX_DESCRIPTION:]},
                timestamp=at,
            )
        elif isinstance(event, ev.MCPServerRestarted):
            run.span.add_event(
                "tether.mcp_server_restarted",
                {
                    "tether.mcp.server": event.server,
                    "tether.mcp.restarts": event.restarts,
                    "tether.error": event.error[-_MAX_DESCRIPTION:],
                },
                timestamp=at,
            )
        elif isinstance(event, ev.RunForked):
            run.span.add_event(
                "tether.run_forked",
                {
                    "tether.forked.from_run": event.from_run,
                    "tether.forked.at_round": event.at_round,
                },
                timestamp=at,
            )

    def _run_started(self, event: ev.RunStarted) -> None:
        provider, model = event.provider, event.model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": event.agent,
            "tether.run_id": event.run_id,
        }
        if provider:
            attributes.update(_provider_attributes(provider))
        if model:
            attributes["gen_ai.request.model"] = model
        if event.parent_run_id:
            attributes["tether.parent_run_id"] = event.parent_run_id
        if self.capture_content:
            attributes["tether.input"] = event.input
        parent_ctx = _REMOTE_PARENTS.pop(event.run_id, None)  # a caller over A2A
        parent = self._runs.get(event.parent_run_id) if event.parent_run_id else None
        if parent is not None:
            # A sub-agent runs inside one of its parent's tool calls.
            tools = list(parent.tools.values())
            host = tools[-1] if tools else parent.parent()
            parent_ctx = trace.set_span_in_context(host)
        span = self._tracer.start_span(
            f"invoke_agent {event.agent}",
            context=parent_ctx,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(event.at),
        )
        old = self._runs.pop(event.run_id, None)
        if old is not None:  # a run id reused without its RunFinished: close the old spans
            self._close_all(old, _ns(event.at), "a new run started with this run id")
        self._runs[event.run_id] = _RunSpans(span=span, provider=provider, model=model)

    def _open_round(self, run: _RunSpans, event: ev.Event) -> None:
        at = _ns(event.at)
        if run.round is not None:
            run.round.end(end_time=at)
        run.round_no = event.round
        run.round = self._tracer.start_span(
            "tether.round",
            context=trace.set_span_in_context(run.span),
            kind=SpanKind.INTERNAL,
            attributes={"tether.round": event.round, "tether.run_id": event.run_id},
            start_time=at,
        )

    def _model_call_started(self, run: _RunSpans, event: ev.ModelCallStarted) -> None:
        if run.chat is not None:
            # A provider retry: the logical call goes on in the same span.
            run.chat.set_attribute("tether.provider_attempts", event.attempt)
            return
        self._end_failed_chat(run, None)
        model = getattr(event, "model", None) or run.model
        provider = getattr(event, "provider", None) or run.provider
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "tether.run_id": event.run_id,
            "tether.round": event.round,
            "tether.provider_attempts": event.attempt,
        }
        if provider:
            attributes.update(_provider_attributes(provider))
        if model:
            attributes["gen_ai.request.model"] = model
        if event.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = event.max_tokens
        run.chat = self._tracer.start_span(
            f"chat {model}" if model else "chat",
            context=trace.set_span_in_context(run.parent()),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=_ns(event.at),
        )

    def _fallback(self, run: _RunSpans, event: ev.ProviderFallback) -> None:
        """The call goes on at the next provider: the span names the model that answers,
        and the run's later calls go there too."""
        run.model, run.provider = event.to_model, event.to_provider or run.provider
        span = run.chat
        if span is None:
            return
        span.add_event(
            "tether.provider_fallback",
            {
                "error.type": event.error_type,
                "tether.from_model": event.from_model,
                "tether.to_model": event.to_model,
                "tether.message": event.message,
            },
            timestamp=_ns(event.at),
        )
        span.update_name(f"chat {event.to_model}")
        span.set_attribute("gen_ai.request.model", event.to_model)
        if event.to_provider:
            span.set_attributes(_provider_attributes(event.to_provider))

    def _model_call_finished(self, run: _RunSpans, event: ev.ModelCallFinished) -> None:
        span = run.chat
        if span is None:
            return
        run.chat = None
        usage = event.usage
        reason = event.raw_stop_reason or event.stop_reason
        attributes: dict[str, Any] = {
            "gen_ai.usage.input_tokens": usage.input_tokens
            + usage.cache_read_tokens
            + usage.cache_write_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.response.finish_reasons": (reason,),
            "tether.stop_reason": event.stop_reason,
            "tether.tool_calls": len(event.tool_calls),
        }
        if usage.cache_read_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
        if usage.cache_write_tokens:
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if usage.reasoning_tokens:
            # Already in output_tokens; the conventions have no name for them yet.
            attributes["tether.usage.reasoning_tokens"] = usage.reasoning_tokens
        response_model = getattr(event, "model", None)
        if response_model:
            attributes["gen_ai.response.model"] = response_model
        span.set_attributes(attributes)
        span.end(end_time=_ns(event.at))

    def _end_failed_chat(self, run: _RunSpans, finished: ev.RunFinished | None) -> None:
        if run.failed_chat is None:
            return
        span, at = run.failed_chat
        run.failed_chat = None
        error_type = "_OTHER"
        description = "the model call ended without a response"
        if (
            finished is not None
            and finished.error
            and finished.termination
            in (
                Termination.PROVIDER_FAILED,
                Termination.CRASHED,
            )
        ):
            description = finished.error
            if finished.termination is Termination.PROVIDER_FAILED:
                error_type = finished.error.split(":", 1)[0]
        elif finished is not None:
            error_type = finished.termination.value
        _fail(span, error_type, description)
        span.end(end_time=_ns(at))

    def _tool_started(self, run: _RunSpans, event: ev.ToolCallStarted) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.name,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
            "tether.run_id": event.run_id,
            "tether.round": event.round,
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _json(event.arguments)
        old = run.tools.pop(event.call_id, None)
        if old is not None:
            old.end(end_time=_ns(event.at))
        run.tools[event.call_id] = self._tracer.start_span(
            f"execute_tool {event.name}",
            context=trace.set_span_in_context(run.parent()),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(event.at),
        )
        if _TOOL_SPAN_WAITERS:
            with _TOOL_SPAN_OPENED:
                _TOOL_SPAN_OPENED.notify_all()

    def _tool_finished(self, run: _RunSpans, event: ev.ToolCallFinished) -> None:
        span = run.tools.pop(event.call_id, None)
        if span is None:
            return
        span.set_attributes(
            {"tether.tool.outcome": event.outcome, "tether.tool.attempts": event.attempts}
        )
        if self.capture_content:
            span.set_attribute("gen_ai.tool.call.result", event.content)
        if event.is_error:
            _fail(span, event.outcome, event.content)
        span.end(end_time=_ns(event.at))

    def _run_finished(self, event: ev.RunFinished) -> None:
        at = _ns(event.at)
        run = self._runs.pop(event.run_id, None)
        if run is None:
            # Cancelled while queued: the run never started, but it did end.
            span = self._tracer.start_span(
                "invoke_agent",
                kind=SpanKind.INTERNAL,
                attributes={"gen_ai.operation.name": "invoke_agent", "tether.run_id": event.run_id},
                start_time=at,
            )
            run = _RunSpans(span=span, provider=None, model=None)
        try:
            self._end_failed_chat(run, event)
            self._close_all(run, at, f"the run ended {event.termination.value}")
        finally:
            usage = event.usage
            attributes: dict[str, Any] = {
                "tether.termination": event.termination.value,
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "tether.usage.model_calls": usage.model_calls,
                "tether.usage.provider_attempts": usage.provider_attempts,
                "tether.usage.steps": usage.steps,
                "tether.usage.tool_calls": usage.tool_calls,
            }
            if usage.cost_usd is not None:
                attributes["tether.usage.cost_usd"] = usage.cost_usd
            if usage.cache_read_tokens:
                attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
            if usage.cache_write_tokens:
                attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
            if self.capture_content and event.output is not None:
                attributes["tether.output"] = event.output
            run.span.set_attributes(attributes)
            if not event.termination.ok:
                _fail(run.span, event.termination.value, event.error or event.termination.value)
            run.span.end(end_time=at)

    def _close_all(self, run: _RunSpans, at: int, why: str) -> None:
        """End a run's open child spans (a run that ended mid-round)."""
        for span in run.tools.values():
            _fail(span, "cancelled", why)
            span.end(end_time=at)
        run.tools.clear()
        if run.chat is not None:
            _fail(run.chat, "cancelled", why)
            run.chat.end(end_time=at)
            run.chat = None
        if run.round is not None:
            run.round.end(end_time=at)
            run.round = None


# ------------------------------------------------- trace context across processes

#: The sinks alive in this process (weakly), for :func:`tool_call_span`,
#: :func:`traceparent_headers` and :func:`tracing`.
_SINKS: weakref.WeakSet[OtelSink] = weakref.WeakSet()
#: Remote parents of runs about to start, by run id (:func:`adopt_remote_parent`).
_REMOTE_PARENTS: dict[str, Context] = {}
#: Remote parents kept for runs that never started, at most.
_MAX_REMOTE_PARENTS = 10_000
_PROPAGATOR = TraceContextTextMapPropagator()


def tracing() -> bool:
    """Whether an :class:`OtelSink` is alive in this process."""
    return bool(_SINKS)


def adopt_remote_parent(run_id: str, carrier: Mapping[str, str]) -> None:
    """Make the span that ``carrier``'s W3C ``traceparent`` names the parent of run
    ``run_id``'s ``invoke_agent`` span (call it before the run starts).

    ``tether.a2a.serve`` calls it with a request's headers: a remote caller's tool
    call and the run it asked for are one trace. A malformed ``traceparent`` is ignored.
    """
    context = _PROPAGATOR.extract(dict(carrier))
    if not trace.get_current_span(context).get_span_context().is_valid:
        return
    if len(_REMOTE_PARENTS) >= _MAX_REMOTE_PARENTS:
        _REMOTE_PARENTS.pop(next(iter(_REMOTE_PARENTS)))
    _REMOTE_PARENTS[run_id] = context


def traceparent_headers(run_id: str, call_id: str, *, fallback: bool = True) -> dict[str, str]:
    """The W3C trace context (``traceparent``, ``tracestate``) of tool call ``call_id``'s
    ``execute_tool`` span in run ``run_id``, for a request that call makes; with
    ``fallback``, the run's span if the sink has not opened the call's yet; ``{}``
    if no sink has it (a sink works in a thread of its own: it may be behind).

    ``tether.a2a.A2AAgent`` sends it with its requests.
    """
    for sink in list(_SINKS):
        run = sink._runs.get(run_id)
        if run is None:
            continue
        span = run.tools.get(call_id) or (run.span if fallback else None)
        if span is None:
            return {}
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier
    return {}


#: Signalled when a sink opens a tool call's span, for threads in :func:`tool_call_span`.
_TOOL_SPAN_OPENED = threading.Condition()
#: How many threads wait in :func:`tool_call_span` (the sinks signal only then).
_TOOL_SPAN_WAITERS: list[None] = []


def tool_call_span(run_id: str, call_id: str, *, wait_s: float = 0.0) -> Span | None:
    """The open ``execute_tool`` span of a tool call in flight, in any live
    :class:`OtelSink`, or ``None``.

    A tool that calls another service makes it current to carry the trace on
    (``tether.mcp`` does, into ``params._meta.traceparent``): the sink's spans
    are made from events, so they are never current by themselves. A sink runs
    in a thread of its own, behind the run: with ``wait_s``, when a sink follows
    the run but has not yet opened the call's span, this blocks (the thread)
    until it has, at most ``wait_s`` seconds. Call it from a worker thread then.
    """
    span, followed = _find_tool_span(run_id, call_id)
    if span is not None or not followed or wait_s <= 0:
        return span
    with _TOOL_SPAN_OPENED:
        _TOOL_SPAN_WAITERS.append(None)
        try:
            _TOOL_SPAN_OPENED.wait_for(
                lambda: _find_tool_span(run_id, call_id)[0] is not None, timeout=wait_s
            )
        finally:
            _TOOL_SPAN_WAITERS.pop()
    return _find_tool_span(run_id, call_id)[0]


def _find_tool_span(run_id: str, call_id: str) -> tuple[Span | None, bool]:
    """The call's span in a live sink, and whether any live sink follows the run."""
    followed = False
    for sink in list(_SINKS):
        span = sink.tool_span(run_id, call_id)
        if span is not None:
            return span, True
        followed = followed or sink.follows(run_id)
    return None, followed


def _fail(span: Span, error_type: str, description: str) -> None:
    if len(description) > _MAX_DESCRIPTION:
        description = "…" + description[-_MAX_DESCRIPTION:]
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))


class OtelEvalRecorder:
    """Records each evaluated case of ``tether.evals.evaluate`` as a span with one
    ``gen_ai.evaluation.result`` event per criterion (see the module doc).

    Use it as ``on_result``; ``tracer_provider`` defaults to the global one.
    ``evaluate`` runs each case inside :meth:`case_context`: the case's span is
    current while its run starts, so with an :class:`OtelSink` on the Runtime the
    run's ``invoke_agent`` span is a child of the case's span, and the evaluation
    events sit next to the operation they judge. A case whose run was stopped or
    never started ends its span with an error (``tether.eval.status``). Like
    :class:`OtelSink`, it never raises: a failure is logged once.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer: Tracer = trace.get_tracer(
            "tether", _version(), tracer_provider=tracer_provider
        )
        self._failed = False
        self._open: dict[tuple[str, int], Span] = {}

    @contextlib.contextmanager
    def case_context(self, case_id: str, repeat: int) -> Iterator[None]:
        """The span of one case, current within the block; ended on leaving it."""
        span = self._tracer.start_span(
            "tether.eval_case",
            kind=SpanKind.INTERNAL,
            attributes={"tether.eval.case_id": case_id, "tether.eval.repeat": repeat},
        )
        key = (case_id, repeat)
        self._open[key] = span
        try:
            with trace.use_span(span, end_on_exit=False):
                yield
        finally:
            if self._open.pop(key, None) is span:  # no result came: cancelled
                _fail(span, "cancelled", "the case ended without a result")
            span.end()

    def __call__(self, result: CaseResult) -> None:
        try:
            self._record(result)
        except Exception:
            if not self._failed:
                self._failed = True
                _log.exception(
                    "tether.otel: could not record the evaluation of case %s (reported once)",
                    result.case_id,
                )

    def _record(self, result: CaseResult) -> None:
        from tether.evals import criterion_key

        span = self._open.pop((result.case_id, result.repeat), None)
        owned = span is None  # called outside case_context: a span of its own
        if result.status != "evaluated" and owned:
            return
        attributes: dict[str, Any] = {
            "tether.eval.case_id": result.case_id,
            "tether.eval.repeat": result.repeat,
            "tether.eval.passed": result.passed,
            "tether.eval.status": result.status,
        }
        if result.run_id:
            attributes["tether.run_id"] = result.run_id
        if result.termination:
            attributes["tether.termination"] = result.termination
        if span is None:
            span = self._tracer.start_span(
                "tether.eval_case", kind=SpanKind.INTERNAL, attributes=attributes
            )
        else:
            span.set_attributes(attributes)
        try:
            for judge, judgement in result.judgements.items():
                if judgement.error:
                    span.add_event(
                        "gen_ai.evaluation.result",
                        {
                            "gen_ai.evaluation.name": judge,
                            "gen_ai.evaluation.score.label": "fail",
                            "gen_ai.evaluation.explanation": judgement.error,
                            "error.type": "judge_error",
                        },
                    )
                for criterion, score in judgement.scores.items():
                    failed = criterion in judgement.feedback or judgement.error is not None
                    event: dict[str, Any] = {
                        "gen_ai.evaluation.name": criterion_key(judge, criterion),
                        "gen_ai.evaluation.score.value": float(score),
                        "gen_ai.evaluation.score.label": "fail" if failed else "pass",
                    }
                    reason = judgement.reasons.get(criterion)
                    if reason:
                        event["gen_ai.evaluation.explanation"] = reason
                    span.add_event("gen_ai.evaluation.result", event)
            if result.status != "evaluated":
                _fail(span, result.status, result.note or result.status)
            elif not result.passed:
                _fail(span, result.termination or "failed", "the case did not pass")
        finally:
            if owned:
                span.end()
