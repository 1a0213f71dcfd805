"""Ceilings, counters and termination reasons."""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs


class Termination(enum.StrEnum):
    """Why a run ended: exactly one per run (see docs/concepts/terminations.md)."""

    ANSWERED = "answered"
    TERMINAL_TOOL = "terminal_tool"
    QUALITY_EXHAUSTED = "quality_exhausted"
    MAX_STEPS = "max_steps"
    MAX_TOOL_CALLS = "max_tool_calls"
    MAX_CONTINUES = "max_continues"
    TOKEN_CEILING = "token_ceiling"
    COST_CEILING = "cost_ceiling"
    DEADLINE = "deadline"
    CANCELLED = "cancelled"
    POLICY_BLOCKED = "policy_blocked"
    FATAL_TOOL_ERROR = "fatal_tool_error"
    PROVIDER_FAILED = "provider_failed"
    REFUSAL = "refusal"
    CONTEXT_EXCEEDED = "context_exceeded"
    TRUNCATED_TOOL_CALL = "truncated_tool_call"
    UNKNOWN_STOP_REASON = "unknown_stop_reason"
    CRASHED = "crashed"
    #: The run store could not record the run's end (or a round) for longer than the
    #: run's lease: the end the run reached is not reported, and the store gets
    #: this one once it can (DESIGN §22, :mod:`._durable`).
    STORE_FAILED = "store_failed"

    @property
    def ok(self) -> bool:
        """True for the two successful endings: ``answered`` and ``terminal_tool``."""
        return self in (Termination.ANSWERED, Termination.TERMINAL_TOOL)


def _positive_int(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None and attribute.name not in _REQUIRED_INTS:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Limits.{attribute.name} must be an int, got {value!r}")
    low = 0 if attribute.name in _ZERO_OK else 1
    if value < low:
        raise ValueError(f"Limits.{attribute.name} must be >= {low}, got {value!r}")


def _positive_number(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"Limits.{attribute.name} must be a number, got {value!r}")
    if math.isnan(value) or value <= 0:
        raise ValueError(f"Limits.{attribute.name} must be > 0, got {value!r}")


_REQUIRED_INTS = frozenset(
    {
        "max_steps",
        "max_quality_retries",
        "max_provider_attempts",
        "max_continues",
        "max_tool_retries",
    }
)
# A zero here is meaningful: "no quality retries", "no continuation", "no tool retries".
_ZERO_OK = frozenset({"max_quality_retries", "max_continues", "max_tool_retries", "max_tool_calls"})


@attrs.frozen(kw_only=True)
class Limits:
    """Every ceiling of a run (see docs/concepts/ceilings.md).

    A step is one round: one logical model call; provider retries inside it do
    not count. ``max_total_tokens`` counts input plus output tokens.
    ``None`` means "no ceiling" where it is allowed.
    """

    max_steps: int = attrs.field(default=10, validator=_positive_int)
    max_tool_calls: int | None = attrs.field(default=None, validator=_positive_int)
    max_quality_retries: int = attrs.field(default=2, validator=_positive_int)
    max_provider_attempts: int = attrs.field(default=3, validator=_positive_int)
    max_continues: int = attrs.field(default=2, validator=_positive_int)
    max_tool_retries: int = attrs.field(default=2, validator=_positive_int)
    max_total_tokens: int | None = attrs.field(default=None, validator=_positive_int)
    max_cost_usd: float | None = attrs.field(default=None, validator=_positive_number)
    timeout_s: float | None = attrs.field(default=None, validator=_positive_number)


@attrs.frozen(kw_only=True)
class Usage:
    """What a run consumed. ``cost_usd`` is ``None`` when any part could not be priced.

    ``input_tokens`` counts every input token the run's calls sent, whether the
    provider read it from its prompt cache, wrote it there, or neither (what
    OpenAI calls ``prompt_tokens``); ``cache_read_tokens`` and
    ``cache_write_tokens`` say how many of them were cache reads and writes
    (priced at the cache prices). They count the run's own model and judge
    calls; a sub-agent's are in its own result.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    model_calls: int = 0
    provider_attempts: int = 0
    steps: int = 0
    tool_calls: int = 0
    quality_retries: int = 0
    continues: int = 0
    #: Some of the tokens were estimated by tether: a provider reported no usage
    #: for a call (see ``tether.runtime.estimate_tokens``).
    estimated: bool = False
    #: Of ``input_tokens``: read from the provider's prompt cache.
    cache_read_tokens: int = 0
    #: Of ``input_tokens``: written to the provider's prompt cache.
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@attrs.define(kw_only=True)
class UsageMeter:
    """The mutable counters behind :class:`Usage`; only the Run changes them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False
    model_calls: int = 0
    provider_attempts: int = 0
    steps: int = 0
    tool_calls: int = 0
    quality_retries: int = 0
    continues: int = 0
    estimated: bool = False
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def charge(self, input_tokens: int, output_tokens: int, cost_usd: float | None) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        if cost_usd is None:
            self.unpriced = True
        else:
            self.cost_usd += cost_usd

    def freeze(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=None if self.unpriced else round(self.cost_usd, 10),
            model_calls=self.model_calls,
            provider_attempts=self.provider_attempts,
            steps=self.steps,
            tool_calls=self.tool_calls,
            quality_retries=self.quality_retries,
            continues=self.continues,
            estimated=self.estimated,
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
        )
