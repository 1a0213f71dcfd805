"""``RunResult`` and the one-line summary of a run's path."""

from __future__ import annotations

import attrs

from tether.providers import Message

from . import _events as ev
from ._judging import Judgement
from ._limits import Termination, Usage


@attrs.frozen(kw_only=True)
class RunResult:
    """What a run produced.

    ``output`` is the answer (``answered``), the terminal tool's result
    (``terminal_tool``), the last candidate (``quality_exhausted``), the text
    so far (``max_continues``), or ``None`` when the run produced no answer.
    ``passed`` is ``None`` without a judge or when nothing was judged.
    """

    run_id: str
    output: str | None
    termination: Termination
    passed: bool | None
    judgement: Judgement | None
    usage: Usage
    messages: tuple[Message, ...]
    events: tuple[ev.Event, ...]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.termination.ok

    def summary(self) -> str:
        """The path of the run on one line, e.g.
        ``Memory(1) → Model → Tools(2) → Model → Judge(0.62 ✗) → Model → Judge(0.91 ✓) → answered``.
        """
        return summarize(self.events)


def summarize(events: tuple[ev.Event, ...] | list[ev.Event]) -> str:
    parts: list[str] = []
    tools = 0
    retries = 0
    for event in events:
        if tools and not isinstance(
            event, ev.ToolCallStarted | ev.ToolCallFinished | ev.PolicyChecked
        ):
            parts.append(f"Tools({tools})")
            tools = 0
        if isinstance(event, ev.LessonsRecalled):
            parts.append(f"Memory({len(event.lesson_ids)})")
        elif isinstance(event, ev.ProviderRetry):
            retries += 1
        elif isinstance(event, ev.ModelCallFinished):
            parts.append(f"Model(retry×{retries})" if retries else "Model")
            retries = 0
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
            parts.append(f"Ceiling({event.ceiling})")
        elif isinstance(event, ev.RunFinished):
            if retries:
                parts.append(f"Model(retry×{retries})")
            parts.append(event.termination.value)
    return " → ".join(parts)
