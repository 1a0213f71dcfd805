"""The ``tether`` logger (stdlib :mod:`logging`): what a service's log shows of its runs.

- One INFO line per run end: run id, agent, termination, tokens, cost and
  duration (``Run.publish``, once per run).
- WARNING for what went wrong and was handled: a provider retry, a fallback to
  the next provider, a run store fault (retried, and given up on), an event
  sink that failed or fell behind (its events dropped).
- Every record carries ``run_id`` in ``extra`` (``record.run_id``; ``None``
  where no one run is concerned), and the other values of its line as fields
  of their own (``record.termination``, ``record.input_tokens``, ...), for
  structured handlers.
- Silent by default: a :class:`logging.NullHandler` on ``tether``; the host's
  logging configuration decides (``logging.basicConfig(level=logging.INFO)``).
- Never a key or message content: no input, output, instructions, tool
  arguments or results. Error texts are the ones events carry (scrubbed of
  the providers' keys), and the record's text is scrubbed again on the way out.
- Nothing is built unless the level is enabled (``isEnabledFor`` first): a run
  with logging off pays one cached level check at its end.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._events import ProviderFallback, ProviderRetry
    from ._result import RunResult

log = logging.getLogger("tether")
log.addHandler(logging.NullHandler())

INFO, WARNING = logging.INFO, logging.WARNING


def run_ended(result: RunResult[Any], agent: str, duration_s: float | None) -> None:
    """The INFO line of a run's end (call it only when ``log.isEnabledFor(INFO)``)."""
    usage = result.usage
    cost = "unpriced" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    took = "" if duration_s is None else f" in {duration_s:.3f}s"
    log.info(
        "run %s of agent %r ended %s: %d input + %d output tokens, %s%s",
        result.run_id,
        agent,
        result.termination.value,
        usage.input_tokens,
        usage.output_tokens,
        cost,
        took,
        extra={
            "run_id": result.run_id,
            "agent": agent,
            "termination": result.termination.value,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost_usd": usage.cost_usd,
            "duration_s": duration_s,
        },
    )


def provider_retry(event: ProviderRetry) -> None:
    """A provider attempt failed and is tried again after ``event.wait_s``."""
    if log.isEnabledFor(WARNING):
        log.warning(
            "run %s: provider attempt %d failed (%s), retrying in %.3fs: %s",
            event.run_id,
            event.attempt,
            event.error_type,
            event.wait_s,
            event.message,
            extra={"run_id": event.run_id, "error_type": event.error_type},
        )


def provider_fallback(event: ProviderFallback) -> None:
    """A provider of a fallback chain failed for good; the next one takes the request."""
    if log.isEnabledFor(WARNING):
        log.warning(
            "run %s: provider %s:%s failed (%s), falling back to %s:%s: %s",
            event.run_id,
            event.from_provider,
            event.from_model,
            event.error_type,
            event.to_provider,
            event.to_model,
            event.message,
            extra={"run_id": event.run_id, "error_type": event.error_type},
        )


def store_fault(run_id: str | None, error: BaseException, *, gave_up: bool) -> None:
    """A run store failed: tried again (``gave_up=False``) or no longer."""
    if log.isEnabledFor(WARNING):
        what = "giving up" if gave_up else "trying again"
        who = f"run {run_id}" if run_id is not None else "the runtime"
        log.warning(
            "%s: run store fault, %s: %s: %s",
            who,
            what,
            type(error).__name__,
            error,
            extra={"run_id": run_id, "gave_up": gave_up},
        )


def sink_dropped(run_id: str | None, sink: object, why: str) -> None:
    """An event sink failed or fell behind: events for it are dropped."""
    if log.isEnabledFor(WARNING):
        log.warning("event sink %r: %s", sink, why, extra={"run_id": run_id})


__all__ = ["log", "provider_fallback", "provider_retry", "run_ended", "sink_dropped", "store_fault"]
