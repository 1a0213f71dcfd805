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
from collections.abc import AsyncIterator
from functools import partial

import anyio.to_thread

from tether.actors import current_tool_context

#: How long a call waits for a sink that follows its run to open the call's span
#: (sinks run in a thread of their own, behind the run; this is usually instant).
SPAN_WAIT_S = 1.0


@contextlib.asynccontextmanager
async def tool_call_trace() -> AsyncIterator[None]:
    """Make the current tool call's ``execute_tool`` span current, if there is one."""
    otel = sys.modules.get("tether.otel")
    call = current_tool_context() if otel is not None else None
    if otel is None or call is None:
        yield
        return
    span = otel.tool_call_span(call.run_id, call.call_id)
    if span is None:
        find = partial(otel.tool_call_span, call.run_id, call.call_id, wait_s=SPAN_WAIT_S)
        span = await anyio.to_thread.run_sync(find, abandon_on_cancel=True)
    if span is None:
        yield
        return
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        context.detach(token)


__all__ = ["SPAN_WAIT_S", "tool_call_trace"]
