"""Cassettes: test an agent offline against a run recorded once (docs/guides/replay.md).

::

    from tether.testing import cassette

    async def test_weather():
        result = await cassette("weather").run(agent, "Weather in Oslo?")
        assert "Oslo" in result.output

The first time (no cassette file yet), the run is live: the agent's provider
answers and its tools run, and the run's trail is written to
``cassettes/weather.jsonl`` next to the test file. Every later time, the run
is a replay of that trail (:func:`tether.replay`): no model is called, no tool
executed, and the test fails with the first divergence if the agent's code
now does otherwise (a changed tool schema, a policy that now denies, a judge
that now fails...). ``pytest --record`` records every cassette again.

The pytest plugin (registered through the ``pytest11`` entry point, so it is
active wherever tether is installed) adds ``--record`` and tells
:func:`cassette` which test file it is in. Outside pytest, give ``directory=``
(or set ``TETHER_CASSETTES``); ``TETHER_RECORD=1`` records as ``--record`` does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import attrs

from tether.events import ApprovalRequested
from tether.providers import ModelSettings
from tether.runtime import Agent, JsonlSink, Replay, RunHandle, RunResult, Runtime, replay

__all__ = ["Cassette", "CassetteDiverged", "cassette"]


class CassetteDiverged(AssertionError):
    """A cassette's replay did otherwise than its recording (the message says where)."""

    def __init__(self, message: str, replayed: Replay) -> None:
        super().__init__(message)
        #: The replay, with its divergence, events and result.
        self.replay = replayed


class _State:
    """What the pytest plugin tells :func:`cassette`: ``--record``, and the test's folder."""

    record = False
    directory: Path | None = None


_state = _State()


@attrs.frozen(kw_only=True)
class Cassette:
    """A recorded run to test an agent against (see :mod:`tether.testing`)."""

    #: The trail file.
    path: Path
    #: Whether :meth:`run` records (live) rather than replays.
    recording: bool

    async def run(
        self,
        agent: Agent[Any, Any],
        input: str,
        *,
        deps: Any = None,
        settings: ModelSettings | None = None,
        approve: Callable[[ApprovalRequested], bool] | None = None,
        live_tools: bool = False,
    ) -> RunResult[Any]:
        """Run ``agent`` on ``input``: live and recorded, or replayed from the cassette.

        Replaying raises :class:`CassetteDiverged` at the first divergence. ``deps``
        and ``settings`` are the run's (``Runtime.start``). While recording, a tool call
        a policy holds for approval is approved when ``approve(request)`` says so, else
        rejected (replaying, the recorded answers are given). ``live_tools`` runs the
        tools in a replay.
        """
        if self.recording:
            return await self._record(agent, input, deps, settings, approve)
        replayed = await replay(
            self.path, agent, deps=deps, settings=settings, live_tools=live_tools
        )
        if replayed.divergence is not None:
            raise CassetteDiverged(
                f"cassette {self.path}: {replayed.divergence} "
                "(run pytest with --record to record it again)",
                replayed,
            )
        return replayed.result

    async def _record(
        self,
        agent: Agent[Any, Any],
        input: str,
        deps: Any,
        settings: ModelSettings | None,
        approve: Callable[[ApprovalRequested], bool] | None,
    ) -> RunResult[Any]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".recording")
        sink = JsonlSink(str(partial), mode="w")
        try:
            async with Runtime(event_sink=sink) as rt:
                handle = rt.start(agent, input, deps=deps, settings=settings)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_answer, handle, approve)
                    result = await handle.result()
                    tg.cancel_scope.cancel()
        finally:
            sink.close()
        os.replace(partial, self.path)  # a cassette is whole, or not there
        return result


async def _answer(
    handle: RunHandle[Any], approve: Callable[[ApprovalRequested], bool] | None
) -> None:
    """Answer the recorded run's approval requests with ``approve`` (none: reject)."""
    async for event in handle.events():
        if isinstance(event, ApprovalRequested):
            if approve is not None and approve(event):
                handle.approve(event.call_id)
            else:
                handle.reject(event.call_id, "rejected while recording the cassette")


_NAME = re.compile(r"^[\w.\-]+$")


def cassette(
    name: str, *, directory: str | os.PathLike[str] | None = None, record: bool | None = None
) -> Cassette:
    """The cassette ``name`` (``<directory>/<name>.jsonl``).

    ``directory`` defaults to ``cassettes/`` next to the running test file (under
    pytest), else ``$TETHER_CASSETTES``, else ``./cassettes``. ``record`` defaults to
    ``pytest --record`` (or ``TETHER_RECORD=1``), and to recording when the file
    does not exist yet.
    """
    if not _NAME.match(name):
        raise ValueError(f"a cassette name is letters, digits, '_', '-' and '.', got {name!r}")
    if directory is not None:
        folder = Path(directory)
    elif _state.directory is not None:
        folder = _state.directory
    else:
        folder = Path(os.environ.get("TETHER_CASSETTES", "cassettes"))
    path = folder / f"{name}.jsonl"
    if record is None:
        record = _state.record or os.environ.get("TETHER_RECORD", "") not in ("", "0")
    return Cassette(path=path, recording=record or not path.exists())


# ------------------------------------------------------------ the pytest plugin


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("tether")
    group.addoption(
        "--record",
        action="store_true",
        default=False,
        help="tether cassettes: record every cassette again (live runs)",
    )


def pytest_configure(config: Any) -> None:
    _state.record = bool(config.getoption("record", False))


def pytest_runtest_setup(item: Any) -> None:
    _state.directory = Path(str(item.path)).parent / "cassettes"


def pytest_runtest_teardown(item: Any) -> None:
    _state.directory = None
