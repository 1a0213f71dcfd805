"""A run's transcript: where it starts, what each request may carry, what is kept.

:class:`Transcript` is the Run's room for the messages that outlive one
round or one run:

- **in**: the ``history=`` a caller passed, or the stored messages of the
  run's conversation (``conversation=``), loaded at the ``memory`` stage
  after the run's turn came (:class:`Turns`: runs on one conversation go one
  after the other, in start order);
- **each request**: bounded to the model's context window by the agent's
  context strategy (:mod:`._context`), on a running estimate, so a transcript
  far below the window costs one estimate per new message, never a pass over
  the whole transcript;
- **out**: the whole transcript, also when a strategy trimmed what the model
  saw, is the run's ``RunResult.messages``; and when the run ends ok its new
  messages are appended to its conversation, in one transaction, before the
  run reports its result. A run that fails, is cancelled or is killed appends
  nothing.

A run gets no Transcript when it has none of these to do (no history, no
conversation, no known window, a strategy that never trims), and then its
round loop pays nothing for them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

import tether.runtime._events as ev
from tether.providers import Message, ModelRequest, ToolDef

from ._conversations import ConversationStore
from ._estimate import estimate_message, estimate_overhead
from ._history import check_history
from ._limits import Termination
from ._state import Decision, RunState
from ._trail import Trail
from ._window import BoundingStrategy, ContextStrategy, KeepAll

if TYPE_CHECKING:
    from ._agent import Agent


class Turns:
    """Whose turn it is on each conversation, among one Runtime's runs.

    :meth:`take` is called when a run starts (synchronously, so turns follow
    start order); the first ticket of a conversation has the turn, each other
    one waits for the tickets before it to be released.
    """

    __slots__ = ("_queues",)

    def __init__(self) -> None:
        self._queues: dict[str, deque[Ticket]] = {}

    def take(self, conversation: str) -> Ticket:
        queue = self._queues.setdefault(conversation, deque())
        ticket = Ticket(self, conversation, ready=not queue)
        queue.append(ticket)
        return ticket

    @property
    def waiting(self) -> int:
        """Tickets not yet released (the turns held and the runs waiting for one)."""
        return sum(len(q) for q in self._queues.values())

    def _release(self, ticket: Ticket) -> None:
        queue = self._queues[ticket.conversation]
        if queue[0] is ticket:
            queue.popleft()
            if queue:
                queue[0].wake()
            else:
                del self._queues[ticket.conversation]
        else:
            queue.remove(ticket)


class Ticket:
    """One run's place in its conversation's queue."""

    __slots__ = ("_event", "_released", "_turns", "conversation", "ready")

    def __init__(self, turns: Turns, conversation: str, *, ready: bool) -> None:
        self._turns = turns
        self.conversation = conversation
        self.ready = ready
        self._event: anyio.Event | None = None
        self._released = False

    async def wait(self) -> None:
        """Until it is this ticket's turn (a checkpoint even when it is already)."""
        if self.ready:
            await anyio.lowlevel.checkpoint()
            return
        self._event = anyio.Event()
        await self._event.wait()

    def wake(self) -> None:
        self.ready = True
        if self._event is not None:
            self._event.set()

    def release(self) -> None:
        """Give the turn (or the place in the queue) up; only the first call counts."""
        if not self._released:
            self._released = True
            self._turns._release(self)


@attrs.frozen
class Chat:
    """A run's conversation: the store, the id, and its ticket."""

    store: ConversationStore
    conversation: str
    ticket: Ticket


def context_window(provider: object) -> int | None:
    """The provider's ``context_window``, when it states a positive int."""
    window = getattr(provider, "context_window", None)
    return window if isinstance(window, int) and window > 0 else None


class Transcript:
    """One run's transcript room (see the module docstring)."""

    __slots__ = (
        "_base",
        "_chat",
        "_history",
        "_last",
        "_overhead",
        "_reserve",
        "_sizes",
        "_state",
        "_strategy",
        "_synced",
        "_total",
        "_trail",
        "_trimmed",
        "_whole",
        "_window",
    )

    def __init__(
        self,
        agent: Agent[Any, Any],
        history: Sequence[Message],
        chat: Chat | None,
        window: int | None,
    ) -> None:
        self._history = tuple(history)
        self._chat = chat
        self._window = window
        self._strategy: ContextStrategy = agent.context
        reserve = getattr(agent.provider, "max_tokens", None)
        #: Output tokens a request without its own max_tokens may use.
        self._reserve = reserve if isinstance(reserve, int) else 0
        self._state: RunState | None = None
        self._trail: Trail | None = None
        self._base = 0
        # The whole transcript, as opposed to the run's messages, which are what
        # the model sees (a strategy may have trimmed them); and the running
        # estimate of what the model sees.
        self._whole: list[Message] = []
        self._synced = 0
        self._trimmed = False
        self._last: Message | None = None
        self._sizes: list[int] = []
        self._total = 0
        # The estimate of the system prompt and tools, kept with the objects it was
        # made of (the run keeps both until discovery or recall changes them).
        self._overhead: tuple[str, tuple[ToolDef, ...], int] | None = None

    @classmethod
    def of(
        cls, agent: Agent[Any, Any], history: Sequence[Message] = (), chat: Chat | None = None
    ) -> Transcript | None:
        """The run's transcript room, or ``None`` when it has nothing to do."""
        window = context_window(agent.provider)
        if not history and chat is None and window is None and isinstance(agent.context, KeepAll):
            return None
        return cls(agent, history, chat, window)

    # ------------------------------------------------------------------ in

    async def begin(self) -> None:
        """Before admission: wait for the run's turn on its conversation."""
        if self._chat is not None:
            await self._chat.ticket.wait()

    async def load(self, state: RunState, trail: Trail) -> Decision | None:
        """At the memory stage: the history (or the stored conversation) goes first.

        A conversation that cannot be loaded, or breaks the pairing rules, ends
        the run (``crashed``, with the store's error): it cannot go on without
        its history, and must not append to what it could not read.
        """
        self._state, self._trail = state, trail
        history, chat = self._history, self._chat
        if chat is not None:
            try:
                history = check_history(await chat.store.load(chat.conversation))
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                trail.add(
                    ev.ConversationFailed(
                        **trail.head(),
                        conversation=chat.conversation,
                        operation="load",
                        error=error,
                    )
                )
                why = f"conversation {chat.conversation!r} could not be loaded ({error})"
                return Decision.end(Termination.CRASHED, why)
            trail.add(
                ev.ConversationLoaded(
                    **trail.head(), conversation=chat.conversation, messages=len(history)
                )
            )
        state.messages[:0] = history
        self._base = len(history)
        return None

    # ------------------------------------------------------------ requests

    def bound(self, request: ModelRequest) -> ModelRequest:
        """``request``, or one whose messages the strategy bounded to the window."""
        state, window = self._state, self._window
        assert state is not None
        total = self._sync(state.messages)
        if window is None:
            return request
        reserve = request.max_tokens if request.max_tokens is not None else self._reserve
        system, tools, overhead = self._overhead or ("", (), -1)
        if overhead < 0 or system is not request.system or tools is not request.tools:
            overhead = estimate_overhead(request)
            self._overhead = (request.system, request.tools, overhead)
        budget = window - overhead - reserve
        if total <= budget or not isinstance(self._strategy, BoundingStrategy):
            return request
        before = len(state.messages)
        kept = self._strategy.bound(state.messages, self._sizes, budget)
        if kept is None:
            return request
        state.messages[:] = kept
        after = self._sync(state.messages)
        trail = self._trail
        assert trail is not None
        trail.add(
            ev.ContextBounded(
                **trail.head(),
                window=window,
                budget=budget,
                tokens_before=total,
                tokens_after=after,
                messages_before=before,
                messages_after=len(kept),
            )
        )
        return attrs.evolve(request, messages=tuple(kept))

    def _sync(self, messages: list[Message]) -> int:
        """Mirror new messages into the whole transcript; the estimate of ``messages``.

        The run only appends to its messages, except when a strategy trims
        them (replacing them with fewer of the same): then they are estimated
        afresh, and the whole transcript, which already has them all, is kept.
        """
        synced = self._synced
        if synced and (len(messages) < synced or messages[synced - 1] is not self._last):
            self._trimmed = True
            self._sizes = [estimate_message(m) for m in messages]
            self._total = sum(self._sizes)
        else:
            for message in messages[synced:]:
                size = estimate_message(message)
                self._sizes.append(size)
                self._total += size
                self._whole.append(message)
        self._synced = len(messages)
        self._last = messages[-1] if messages else None
        return self._total

    # ----------------------------------------------------------------- out

    async def finish(self, decision: Decision | None) -> Decision | None:
        """When the run has decided (or was cut short), before it reports its result.

        The run's messages become the whole transcript again; a run that ends
        ok appends its new messages to its conversation (shielded: a started
        append completes, so a cancel cannot split the result from the store).
        The run's turn is given up on every path.
        """
        state, chat = self._state, self._chat
        try:
            if state is None:
                return decision  # cut before its history was loaded
            self._sync(state.messages)
            if self._trimmed:
                state.messages[:] = self._whole
            if chat is None or decision is None or decision.termination is None:
                return decision
            if not decision.termination.ok:
                return decision
            return await self._append(chat, state, decision)
        finally:
            if chat is not None:
                chat.ticket.release()

    async def _append(self, chat: Chat, state: RunState, decision: Decision) -> Decision:
        trail = self._trail
        assert trail is not None
        new = self._whole[self._base :]
        with anyio.CancelScope(shield=True):
            try:
                await chat.store.append(
                    chat.conversation, new, expected_length=self._base, run_id=state.run_id
                )
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                trail.add(
                    ev.ConversationFailed(
                        **trail.head(),
                        conversation=chat.conversation,
                        operation="append",
                        error=error,
                    )
                )
                why = f"the run's messages were not appended to {chat.conversation!r} ({error})"
                return attrs.evolve(decision, error=why)
        trail.add(
            ev.ConversationAppended(
                **trail.head(), conversation=chat.conversation, messages=len(new)
            )
        )
        return decision


__all__ = ["Chat", "Ticket", "Transcript", "Turns", "context_window"]
