"""``Agent``: the immutable definition of what a run does."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs

from tether.actors import Judge, RestartPolicy, ToolSettings, ToolSpec, tool
from tether.providers import Provider

from ._context import ContextStrategy, KeepAll
from ._lessons import LessonStore
from ._limits import Limits
from ._policy import PolicyLike
from ._subagent import agent_tool
from ._toolsets import Toolset

Discovery = Literal["first", "auto", "off"]


def _to_tools(value: Iterable[ToolSpec | Toolset | Callable[..., Any]]) -> tuple[ToolSpec, ...]:
    # Toolsets stay in for now: __attrs_post_init__ moves them to Agent.toolsets.
    tools: tuple[Any, ...] = tuple(
        v if isinstance(v, ToolSpec | Toolset) else tool(v) for v in value
    )
    names = [t.name for t in tools if isinstance(t, ToolSpec)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"two tools share a name: {', '.join(dupes)}")
    return tools


def _to_policies(value: Iterable[PolicyLike]) -> tuple[PolicyLike, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class Agent:
    """What a run does: instructions, provider, tools, judge, policies, memory, limits.

    Plain functions in ``tools`` are wrapped with :func:`tether.tool`; toolsets
    (``tether.mcp`` servers) in ``tools`` move to ``toolsets``, and the Runtime
    connects them when a run starts (their tools count for discovery). The
    ``discovery`` setting registers a ``search_tools`` tool: ``"first"``
    always, ``"auto"`` when there are more than ``discovery_threshold`` tools,
    ``"off"`` never.
    """

    name: str
    provider: Provider
    instructions: str = ""
    tools: Sequence[ToolSpec] = attrs.field(default=(), converter=_to_tools)
    judge: Judge | None = None
    policies: Sequence[PolicyLike] = attrs.field(default=(), converter=_to_policies)
    memory: LessonStore | None = None
    #: The scope lessons are stored and recalled under; the agent's name by default.
    memory_scope: str | None = None
    recall_limit: int = 5
    limits: Limits = attrs.field(factory=Limits)
    context: ContextStrategy = attrs.field(factory=KeepAll)
    tool_settings: ToolSettings = attrs.field(factory=ToolSettings)
    discovery: Discovery = "auto"
    discovery_threshold: int = 20
    restart: RestartPolicy = attrs.field(factory=RestartPolicy)
    #: The toolsets (``tether.mcp`` servers) given in ``tools``: the Runtime connects them.
    toolsets: Sequence[Toolset] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        if any(isinstance(t, Toolset) for t in self.tools):
            toolsets = (*self.toolsets, *(t for t in self.tools if isinstance(t, Toolset)))
            plain = tuple(t for t in self.tools if isinstance(t, ToolSpec))
            object.__setattr__(self, "tools", plain)
            object.__setattr__(self, "toolsets", toolsets)
        for toolset in self.toolsets:
            if not isinstance(toolset, Toolset):
                raise TypeError(f"Agent.toolsets holds toolsets only, got {toolset!r}")
        if len({id(t) for t in self.toolsets}) != len(self.toolsets):
            raise ValueError("the same toolset is listed twice in Agent.tools")
        if not self.name or not isinstance(self.name, str):
            raise ValueError("Agent.name must be a non-empty string")
        if not callable(getattr(self.provider, "stream", None)):
            raise TypeError(
                f"Agent.provider must implement the Provider protocol (stream(request, ctx)), "
                f"got {type(self.provider).__name__}"
            )
        if self.judge is not None and not callable(getattr(self.judge, "judge", None)):
            raise TypeError(f"Agent.judge must have judge(candidate), got {self.judge!r}")
        if self.memory is not None and not callable(getattr(self.memory, "recall", None)):
            raise TypeError(f"Agent.memory must be a LessonStore, got {self.memory!r}")
        if self.recall_limit < 0:
            raise ValueError(f"Agent.recall_limit must be >= 0, got {self.recall_limit}")
        if self.discovery not in ("first", "auto", "off"):
            raise ValueError(
                f"Agent.discovery must be 'first', 'auto' or 'off', got {self.discovery!r}"
            )
        if not isinstance(self.limits, Limits):
            raise TypeError(f"Agent.limits must be a tether.Limits, got {self.limits!r}")

    @property
    def scope(self) -> str:
        return self.memory_scope or self.name

    def as_tool(self, *, name: str | None = None, description: str | None = None) -> ToolSpec:
        """This agent as a tool (``task: str``) that runs it as a child run of the caller.

        The child draws on the caller's remaining token and cost budget, is
        cancelled with it, and appears in its events (``ChildRunFinished``).
        """
        return agent_tool(
            self,
            agent_name=self.name,
            instructions=self.instructions,
            timeout_s=self.limits.timeout_s,
            name=name,
            description=description,
        )
