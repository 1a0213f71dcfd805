"""W3C trace context over A2A, when ``tether.otel`` is in use (imported by the host).

A caller (:func:`tether.a2a.A2AAgent`) sends the ``traceparent`` of its tool
call's span (its run's span if the sink has not opened the call's yet); the
server (:func:`tether.a2a.serve`) makes the span it names the parent of the
run's ``invoke_agent`` span. Without ``tether.otel`` imported, neither side
does anything (and imports nothing).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import anyio


def adopt_trace(run_id: str, headers: Mapping[str, str]) -> None:
    """Parent run ``run_id``'s span under the caller's ``traceparent``, if it sent one."""
    otel = sys.modules.get("tether.otel")
    if otel is not None and "traceparent" in headers:
        otel.adopt_remote_parent(run_id, headers)


#: How long a call waits for the sink (a thread) to open its span, polling.
SPAN_WAIT_S = 0.5


async def trace_headers(run_id: str, call_id: str) -> dict[str, str]:
    """The ``traceparent`` (and ``tracestate``) of a tool call's span, or nothing.

    The sink records spans in a thread of its own, a little behind the run: the
    call waits for its span for at most :data:`SPAN_WAIT_S` (only when an
    ``OtelSink`` is alive), then takes the run's span, or sends nothing.
    """
    otel = sys.modules.get("tether.otel")
    if otel is None or not otel.tracing() or not run_id:
        return {}
    with anyio.move_on_after(SPAN_WAIT_S):
        while True:
            found: dict[str, str] = otel.traceparent_headers(run_id, call_id, fallback=False)
            if found:
                return found
            await anyio.sleep(0.005)
    headers: dict[str, str] = otel.traceparent_headers(run_id, call_id)
    return headers
