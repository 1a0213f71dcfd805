"""Trace context over MCP, as the OpenTelemetry GenAI conventions for MCP say.

The SDK puts the current OpenTelemetry context in each request's
``params._meta`` (``traceparent``, ``tracestate``) and, serving, makes the
caller's current while a request is handled. tether's spans come from events
(:class:`tether.otel.OtelSink`) and are never current by themselves, so a call
tether makes to an MCP tool makes its ``execute_tool`` span current first
(:func:`tool_call_trace`): the server's spans continue the run's trace. Served
(:mod:`tether.mcp._serve`), a run starts while the caller's context is current,
so its ``invoke_agent`` span is a child of the caller's.

Nothing happens unless ``tether.otel`` has been imported (an ``OtelSink`` made).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from tether.actors import current_tool_context


@contextlib.contextmanager
def tool_call_trace() -> Iterator[None]:
    """Make the current tool call's ``execute_tool`` span current, if there is one."""
    otel = sys.modules.get("tether.otel")
    call = current_tool_context() if otel is not None else None
    span = None if call is None else otel.tool_call_span(call.run_id, call.call_id)  # type: ignore[union-attr]
    if span is None:
        yield
        return
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        context.detach(token)


__all__ = ["tool_call_trace"]
