"""``Agent``: the immutable definition of what a run does."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, Literal, Protocol, TypeAlias

import attrs
from typing_extensions import TypeForm, TypeVar

from tether.actors import (
    OUTPUT_TOOL,
    Judge,
    RestartPolicy,
    RunContext,
    ToolSettings,
    ToolSpec,
    tool,
)
from tether.providers import ModelSettings, Provider, check_settings, infer_provider

from ._lessons import LessonStore
from ._limits import Limits
from ._policy import PolicyLike
from ._subagent import agent_tool
from ._toolsets import Toolset
from ._typed import OutputMode, TypedOutput
from ._window import ContextStrategy, KeepAll

Discovery = Literal["first", "auto", "off"]

#: The type of the deps a run of the agent carries (``rt.start(..., deps=...)``).
DepsT = TypeVar("DepsT", default=Any)
#: The type of a run's output (``Agent(output_type=...)``); ``str`` unless given.
OutputT = TypeVar("OutputT", default=str)
_D = TypeVar("_D")

#: ``Agent(instructions=...)``: a ``str``, or a sync or async function of the run's
#: :class:`~tether.RunContext` returning one, called once per run when it starts.
Instructions: TypeAlias = (
    str | Callable[[RunContext[_D]], str] | Callable[[RunContext[_D]], Awaitable[str]]
)


class PlainFunction(Protocol):
    """A function ``Agent(tools=...)`` wraps with :func:`tether.tool` (it has a ``__name__``).

    Spelled as a protocol, not ``Callable``, because a ``ToolSpec`` is callable
    too: so mypy matches a tool against ``ToolSpec[DepsT]`` and checks its deps.
    """

    __name__: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def _to_tools(
    value: Iterable[ToolSpec[_D] | Toolset | PlainFunction],
) -> tuple[ToolSpec[_D], ...]:
    # Toolsets stay in for now: __attrs_post_init__ moves them to Agent.toolsets.
    tools: tuple[Any, ...] = tuple(
        v if isinstance(v, ToolSpec | Toolset) else tool(v) for v in value
    )
    names = [t.name for t in tools if isinstance(t, ToolSpec)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"two tools share a name: {', '.join(dupes)}")
    return tools


def _to_provider(value: Provider | str) -> Provider:
    """A model string (``"anthropic:claude-sonnet-4-5"``) made a provider; a provider as it is."""
    return infer_provider(value) if isinstance(value, str) else value


def _to_policies(value: Iterable[PolicyLike]) -> tuple[PolicyLike, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class Agent(Generic[DepsT, OutputT]):
    """What a run does: instructions, provider, tools, judge, policies, memory, limits.

    Plain functions in ``tools`` are wrapped with :func:`tether.tool`; toolsets
    (``tether.mcp`` servers) in ``tools`` move to ``toolsets``, and the Runtime
    connects them when a run starts (their tools count for discovery). The
    ``discovery`` setting registers a ``search_tools`` tool: ``"first"``
    always, ``"auto"`` when there are more than ``discovery_threshold`` tools,
    ``"off"`` never. ``settings`` are the agent's :class:`~tether.ModelSettings`
    (a run's own are merged over them), checked against the provider here.

    ``Agent[DepsT, OutputT]``: ``DepsT`` is the type of the deps its runs carry,
    inferred from tools that take a ``RunContext[DepsT]`` (``Any`` otherwise);
    ``OutputT`` is the type of ``RunResult.output``, ``output_type`` (``str`` by
    default): anything ``@tether.tool`` can describe. The model answers through a
    ``final_result`` tool (``output_mode="tool"``) or, where the provider has
    one, its native structured-output mode (``"native"``); see
    :mod:`tether.runtime._typed`.
    """

    name: str
    #: A provider, or a model string (``"openai:gpt-4.1-mini"``, see
    #: :func:`tether.providers.infer_provider`) made into one here.
    provider: Provider = attrs.field(converter=_to_provider)
    #: The system prompt: a ``str``, or a sync or async callable ``(RunContext) -> str``
    #: called once per run when it starts (see :mod:`tether.runtime._instructions`).
    instructions: Instructions[DepsT] = ""
    tools: Sequence[ToolSpec[DepsT]] = attrs.field(default=(), converter=_to_tools)
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
    settings: ModelSettings | None = None
    output_type: TypeForm[OutputT] = str  # type: ignore[assignment]
    output_mode: OutputMode = "tool"
    #: Derived from ``output_type``: ``None`` for ``str``.
    typed_output: TypedOutput | None = attrs.field(init=False, eq=False, repr=False)

    @typed_output.default
    def _make_typed_output(self) -> TypedOutput | None:
        return TypedOutput.of(self.output_type, self.output_mode)

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
        _check_instructions(self.instructions)
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
        if self.settings is not None:
            if not isinstance(self.settings, ModelSettings):
                raise TypeError(
                    f"Agent.settings must be a tether.ModelSettings, got {self.settings!r}"
                )
            check_for(self, self.settings)
        self._check_output()

    def _check_output(self) -> None:
        typed = self.typed_output
        if typed is None:
            return
        if any(t.name == OUTPUT_TOOL for t in self.tools):
            raise ValueError(
                f"a tool is named {OUTPUT_TOOL!r}, the name of the output tool of an agent with "
                "an output_type: rename the tool"
            )
        if typed.mode == "native" and not getattr(self.provider, "native_output", False):
            raise ValueError(
                f"Agent(output_mode='native'): the provider {type(self.provider).__name__} has no "
                "native structured-output mode that tether uses; use output_mode='tool' (the "
                "default, which works with every provider)"
            )

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
            instructions=self.instructions if isinstance(self.instructions, str) else "",
            timeout_s=self.limits.timeout_s,
            name=name,
            description=description,
        )


def _check_instructions(value: object) -> None:
    """``TypeError`` unless ``value`` is a ``str`` or a callable taking one argument."""
    if isinstance(value, str):
        return
    if not callable(value):
        raise TypeError(
            "Agent.instructions must be a str or a function (ctx: tether.RunContext) -> str "
            f"(sync or async), got {type(value).__name__}"
        )
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # no signature to read (some builtins): try it at run time
        return
    try:
        signature.bind(None)
    except TypeError:
        raise TypeError(
            f"Agent.instructions: {getattr(value, '__qualname__', value)!r} must take one "
            f"argument, the run's tether.RunContext (its signature is {signature})"
        ) from None


def check_for(agent: Agent[Any, Any], settings: ModelSettings) -> None:
    """``ValueError`` unless ``agent``'s provider and tools can honour ``settings``."""
    check_settings(agent.provider, settings)
    choice = settings.tool_choice
    if choice is None or choice in ("auto", "none"):
        return
    names = [t.name for t in agent.tools]
    output_tool = agent.typed_output.tool if agent.typed_output is not None else None
    if output_tool is not None:
        if choice in ("required", output_tool.name):
            return  # final_result is offered from the start, discovery or not
        names.append(output_tool.name)
    if not names:
        raise ValueError(
            f"ModelSettings.tool_choice={choice!r} needs a tool, and agent {agent.name!r} has none"
        )
    if choice == "required":
        return
    if choice not in names:
        raise ValueError(
            f"ModelSettings.tool_choice={choice!r} names no tool of agent {agent.name!r} "
            f"(its tools: {', '.join(sorted(names))})"
        )
    if agent.discovery == "first" or (
        agent.discovery == "auto" and len(names) > agent.discovery_threshold
    ):
        raise ValueError(
            f"ModelSettings.tool_choice={choice!r}: with tool discovery on, the model sees "
            f"only search_tools at first; set Agent(discovery='off') to force a tool"
        )
