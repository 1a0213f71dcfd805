"""``run_sync``: one run from code that has no event loop (scripts, notebooks)."""

from __future__ import annotations

from typing import Any, Literal

import anyio
import sniffio

from tether.providers import ModelSettings
from tether.runtime import Agent, DepsT, OutputT, RunInput, RunResult, Runtime


def run_sync(
    agent: Agent[DepsT, OutputT],
    input: RunInput,
    *,
    backend: Literal["asyncio", "trio"] = "asyncio",
    settings: ModelSettings | None = None,
    deps: DepsT = None,  # type: ignore[assignment]
    **runtime_kwargs: Any,
) -> RunResult[OutputT]:
    """Run ``agent`` on ``input`` in a fresh event loop and return its result.

    It starts a :class:`~tether.Runtime` (``runtime_kwargs`` go to it, e.g.
    ``event_sink=``), runs once, and closes the Runtime and the loop, so no task
    or connection outlives the call. Each call pays for a new loop and new HTTP
    connections: for many runs, use ``async with tether.Runtime()`` instead.
    ``settings`` and ``deps`` go to the run, as in :meth:`Runtime.run`.

    Inside a running event loop (``async def`` code, a Jupyter cell on
    asyncio) it raises ``RuntimeError``: a loop cannot be started from inside
    another in the same thread; ``await rt.run(...)`` there instead.
    """
    if backend not in ("asyncio", "trio"):
        raise ValueError(f"run_sync(backend=...) must be 'asyncio' or 'trio', got {backend!r}")
    if _in_event_loop():
        raise RuntimeError(
            "run_sync() cannot be called from a running event loop; use await Runtime.run(...)"
        )
    # Build the Runtime now, so bad arguments fail before any loop starts.
    runtime = Runtime(**runtime_kwargs)

    async def main() -> RunResult[OutputT]:
        async with runtime as rt:
            return await rt.run(agent, input, settings=settings, deps=deps)

    return anyio.run(main, backend=backend)


def _in_event_loop() -> bool:
    try:
        anyio.get_current_task()
    # Outside a loop anyio raises NoEventLoopError; older releases (4.11) let
    # sniffio's own error through.
    except (anyio.NoEventLoopError, sniffio.AsyncLibraryNotFoundError):
        return False
    return True


__all__ = ["run_sync"]
