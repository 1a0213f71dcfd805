"""Policies: checks at four points of a run (see docs/guides/policies.md)."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

import tether.runtime._events as ev

from ._limits import Termination
from ._state import Decision
from ._trail import Trail

if TYPE_CHECKING:
    from tether.actors import RunContext


class PolicyPoint(enum.StrEnum):
    INPUT = "input"
    RESPONSE = "response"
    TOOL_CALL = "tool_call"
    ROUND_END = "round_end"


@attrs.frozen
class Verdict:
    """A policy's answer.

    ``allow`` lets the run go on; ``deny`` (at ``tool_call`` only) turns that
    call into an is_error result and the run goes on; ``block`` ends the run
    ``policy_blocked`` with no further model or tool call; ``ask`` waits for
    the host's approval (see :meth:`~tether.RunHandle.approve`).
    """

    kind: Literal["allow", "deny", "block", "ask"]
    reason: str | None = None

    @classmethod
    def allow(cls) -> Verdict:
        return _ALLOW

    @classmethod
    def deny(cls, reason: str) -> Verdict:
        return cls("deny", reason)

    @classmethod
    def block(cls, reason: str) -> Verdict:
        return cls("block", reason)

    @classmethod
    def ask(cls, reason: str) -> Verdict:
        return cls("ask", reason)


_ALLOW = Verdict("allow")


@runtime_checkable
class Policy(Protocol):
    """An object with ``async check(point, subject) -> Verdict | None`` (``None`` = allow).

    Subjects: ``input``: the input text; ``response``: the
    :class:`~tether.providers.ModelResponse`; ``tool_call``: the
    :class:`~tether.providers.ToolUseBlock` (``id``, ``name``, ``input`` as the
    arguments); ``round_end``: a read-only :class:`~tether.runtime.RunView`.
    A plain function (sync or async) of the same shape is a policy too.

    A policy (or its ``check``) that takes a third positional parameter,
    ``check(point, subject, ctx)``, gets the run's :class:`~tether.RunContext`
    there: ``ctx.deps``, ``ctx.run_id``, the remaining budget, and at
    ``tool_call`` the call's id as ``ctx.call_id``.
    """

    async def check(self, point: PolicyPoint, subject: Any) -> Verdict | None: ...


PolicyFn = (
    Callable[[PolicyPoint, Any], "Verdict | Awaitable[Verdict | None] | None"]
    | Callable[[PolicyPoint, Any, "RunContext[Any]"], "Verdict | Awaitable[Verdict | None] | None"]
)
PolicyLike = Policy | PolicyFn
#: Makes the context a policy that takes one gets: ``(call_id) -> RunContext``.
ContextMaker = Callable[[str], "RunContext[Any]"]


def _takes_context(fn: Any) -> bool:
    try:
        inspect.signature(fn).bind(None, None, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): the two-argument form
        return False
    return True


def as_check(
    policy: PolicyLike, context: ContextMaker | None = None
) -> Callable[[PolicyPoint, Any, str], Awaitable[Verdict]]:
    """Normalize a policy object or function into one async ``check(point, subject, call_id)``."""
    fn: Any = policy.check if isinstance(policy, Policy) else policy
    if not callable(fn):
        raise TypeError(f"a policy must have check(point, subject) or be callable, got {policy!r}")
    wants = context if _takes_context(fn) else None

    async def check(point: PolicyPoint, subject: Any, call_id: str) -> Verdict:
        result = fn(point, subject) if wants is None else fn(point, subject, wants(call_id))
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            return _ALLOW
        if not isinstance(result, Verdict):
            raise TypeError(f"policy returned {result!r}; want a Verdict or None")
        return result

    return check


class Policies:
    """The agent's policies, run in order at each point; records ``PolicyChecked``.

    The first verdict other than allow wins. A policy that raises blocks the run
    (fail closed). ``deny`` and ``ask`` apply to a tool call; at any other
    point they block. The verdict is returned as a value: the caller acts on it.
    """

    __slots__ = ("_checks", "_trail", "active")

    def __init__(
        self,
        policies: Sequence[PolicyLike],
        trail: Trail | None,
        context: ContextMaker | None = None,
    ) -> None:
        # A tuple: no policies is the shared empty tuple, not a tracked list per run.
        self._checks = tuple(as_check(p, context) for p in policies)
        self._trail = trail
        #: Whether there is any policy to check (read every round).
        self.active = bool(self._checks)

    @classmethod
    def of(
        cls, policies: Sequence[PolicyLike], trail: Trail, context: ContextMaker | None = None
    ) -> Policies:
        """A run's policies; :data:`NO_POLICIES`, shared, when there are none."""
        return cls(policies, trail, context) if policies else NO_POLICIES

    async def check(self, point: PolicyPoint, subject: Any, call_id: str | None = None) -> Verdict:
        if not self._checks:
            return _ALLOW
        verdict = _ALLOW
        for check in self._checks:
            try:
                verdict = await check(point, subject, call_id or "")
            except Exception as exc:
                verdict = Verdict.block(f"policy raised {type(exc).__name__}: {exc}")
            if verdict.kind in ("deny", "ask") and point is not PolicyPoint.TOOL_CALL:
                verdict = Verdict.block(verdict.reason or verdict.kind)
            if verdict.kind != "allow":
                break
        trail = self._trail
        assert trail is not None, "only NO_POLICIES has no trail, and it has no checks"
        trail.add(
            ev.PolicyChecked(
                **trail.head(),
                point=point.value,
                verdict=verdict.kind,
                reason=verdict.reason,
                call_id=call_id,
            )
        )
        return verdict


#: An agent without policies: one shared instance, which never records anything.
NO_POLICIES = Policies((), None)


def blocked(verdict: Verdict) -> Decision:
    """The ending a ``block`` verdict implies."""
    return Decision.end(
        Termination.POLICY_BLOCKED, f"blocked by policy: {verdict.reason or 'blocked'}"
    )
