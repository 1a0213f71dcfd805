"""What a run is given beside agent and input: settings, deps (docs/guides/settings-and-deps.md).

- :func:`prepare` checks them at ``Runtime.start`` (settings merged over the
  agent's, honoured by its provider, a ``tool_choice`` the agent can meet), so
  a bad setting is a ``ValueError`` there, never dropped mid-run.
- :class:`PerRun` makes the :class:`~tether.RunContext` that tools, policies
  and judges read (``ctx.deps``, ``run_id``, ``call_id``, remaining budget).

A run given neither (most runs) shares one :data:`NO_EXTRAS` and builds no
context until a tool, a policy or a judge asks for one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from tether.actors import ChildRunner, OutputSink, RunContext
from tether.providers import ModelSettings

from ._agent import Agent, check_for

if TYPE_CHECKING:
    from ._accounting import Accounts


class PlaybackLike(Protocol):
    """A played run's hooks (``_playback.Playback``: a replay's or a fork's)."""

    def bind(self, run: Any) -> None:
        """Called by the run as it is made."""

    def tools(self, factory: Callable[[], Any]) -> Callable[[], Any]:
        """The run's tools actor factory, given the live one's."""


@attrs.frozen(kw_only=True)
class RunExtras:
    """A run's merged model settings (``None``: none set) and its deps."""

    settings: ModelSettings | None = None
    deps: Any = attrs.field(default=None, eq=False, repr=False)
    #: A replayed or forked run's playback (``_playback.Playback``): its recorded tool
    #: results and approvals. ``None`` for every other run.
    playback: PlaybackLike | None = attrs.field(default=None, eq=False, repr=False)

    def clamp_args(self, provider: object) -> dict[str, int | None]:
        """The output caps for :class:`~._accounting.Accounts`: the settings' ``max_tokens``
        (sent when no budget applies, and bounding the clamp), else the provider's."""
        asked = None if self.settings is None else self.settings.max_tokens
        default = getattr(provider, "max_tokens", None)
        if asked is not None:
            default = asked
        return {
            "default_max_tokens": default if isinstance(default, int) else None,
            "asked_max_tokens": asked,
        }


NO_EXTRAS = RunExtras()


def prepare(agent: Agent[Any, Any], settings: ModelSettings | None, deps: Any) -> RunExtras:
    """The run's extras, checked: ``TypeError``/``ValueError`` for what cannot work."""
    if settings is not None and not isinstance(settings, ModelSettings):
        raise TypeError(f"settings= must be a tether.ModelSettings, got {type(settings).__name__}")
    merged = agent.settings.merge(settings) if agent.settings is not None else settings
    if merged is not None and merged.is_empty:
        merged = None
    if merged is not None and settings is not None:
        check_for(agent, merged)  # the agent's own were checked when it was made
    if merged is None and deps is None:
        return NO_EXTRAS
    return RunExtras(settings=merged, deps=deps)


class PerRun:
    """One run's settings and deps, and the contexts made from them."""

    __slots__ = ("_accounts", "deps", "playback", "run_id", "settings")

    def __init__(self, run_id: str, extras: RunExtras, accounts: Accounts) -> None:
        self.run_id = run_id
        self.settings = extras.settings
        self.deps = extras.deps
        self.playback = extras.playback
        self._accounts = accounts

    def context(
        self,
        call_id: str = "",
        run_child: ChildRunner | None = None,
        epoch: int | None = None,
        output_sink: OutputSink | None = None,
    ) -> RunContext[Any]:
        """A context for a tool round (``call_id`` is set per call; ``epoch``: a durable
        run's lease epoch), a policy or a judge."""
        tokens, cost = self._accounts.remaining()
        return RunContext(
            run_id=self.run_id,
            call_id=call_id,
            deps=self.deps,
            run_child=run_child,
            remaining_tokens=tokens,
            remaining_cost_usd=cost,
            epoch=epoch,
            output_sink=output_sink,
        )
