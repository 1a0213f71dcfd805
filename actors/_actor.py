"""The actor base: a task with a mailbox, supervised with bounded restarts.

An actor handles one request at a time from its mailbox (:class:`Mailbox`: the
semantics of an anyio memory object stream of attrs messages in one object, with
the doorbell that wakes the actor). Every
request carries its own reply channel (:class:`~._channel.ReplyChannel`); the
actor closes it when it is done, so a requester never hangs: if the actor
crashes, the supervisor fails the request in flight with :class:`ActorFailed`
and closes its reply channel. A crashed actor is replaced by a fresh one on the
same mailbox while the :class:`RestartPolicy` allows; past that, the mailbox
closes and every later request fails at once with :class:`ActorCrashed`.
"""

from __future__ import annotations

import contextlib
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel
import attrs

from ._channel import ReplyChannel, _Parking
from ._tool_errors import ActorCrashed


@attrs.frozen(kw_only=True)
class RestartPolicy:
    """OTP-style restart intensity: at most ``max_restarts`` within ``period_s``.

    A crash past that gives up: the actor stays down and its run ends
    ``crashed``. The request that was in flight is never replayed (a tool may
    have side effects); it is failed back to the run.
    """

    max_restarts: int = 3
    period_s: float = 5.0

    def __attrs_post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"RestartPolicy.max_restarts must be >= 0, got {self.max_restarts}")
        if not self.period_s > 0:
            raise ValueError(f"RestartPolicy.period_s must be > 0, got {self.period_s}")


@attrs.frozen
class ActorFailed:
    """The reply a requester gets when the actor crashed on its request."""

    error: ActorCrashed


class Request(Protocol):
    @property
    def reply(self) -> ReplyChannel[Any]: ...


R = TypeVar("R", bound=Request)
R_contra = TypeVar("R_contra", bound=Request, contravariant=True)


class Actor(Protocol[R_contra]):
    async def handle(self, request: R_contra) -> None:
        """Serve one request; reply on ``request.reply`` and close it."""
        ...


class Mailbox(_Parking):
    """An actor's mailbox: the buffer, both ends' state and the doorbell, in one object.

    The semantics are those of an anyio memory object stream of ``size`` items
    with one receiving end (DESIGN §2 names the memory channel as the contract),
    without its five other objects (two stream ends, their shared state, two
    waiter tables and a deque): a parked run holds one mailbox per actor.

    - The sending side (:class:`ActorRef`): ``send_nowait`` raises
      :class:`anyio.WouldBlock` when full, :class:`anyio.BrokenResourceError` once
      the receiving side closed, :class:`anyio.ClosedResourceError` once the
      sender closed; ``send`` waits for room; ``close_sender`` ends the stream.
    - The receiving side (the actor, as ``mailbox.stream``): ``receive_nowait``
      raises :class:`anyio.WouldBlock` when empty, :class:`anyio.EndOfStream`
      once the sender closed and the buffer is empty; ``close`` (also on leaving
      ``with mailbox.stream:``) refuses later sends.
    - The doorbell (``mailbox.bell``): ``wait`` parks the actor until ``ring``.
    """

    __slots__ = ("_buffer", "_receiver_closed", "_sender_closed", "_senders", "_size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a mailbox holds at least one request, not {size}")
        self._parked = None  # _Parking.__init__, inlined
        # A list, not a deque: it holds a request or two, and a deque is 600 bytes. None
        # while empty: an idle actor (a parked run's) holds no empty list.
        self._buffer: list[Any] | None = None
        self._size = size
        self._sender_closed = False
        self._receiver_closed = False
        # Senders parked on a full mailbox, made on the first (rare: one sender a run).
        self._senders: list[_Parking] | None = None

    @property
    def stream(self) -> Mailbox:
        """The receiving end (this object)."""
        return self

    @property
    def bell(self) -> Mailbox:
        """The doorbell (this object)."""
        return self

    #: Park the actor until :meth:`ring` (``_park`` itself: no frame of its own).
    wait = _Parking._park

    #: Wake the actor if it is parked (``_wake`` itself).
    ring = _Parking._wake

    # ---------------------------------------------------------------- sender

    def send_nowait(self, request: Any) -> None:
        if self._sender_closed:
            raise anyio.ClosedResourceError
        if self._receiver_closed:
            raise anyio.BrokenResourceError
        buffer = self._buffer
        if buffer is None:
            self._buffer = [request]
        elif len(buffer) >= self._size:
            raise anyio.WouldBlock
        else:
            buffer.append(request)

    async def send(self, request: Any) -> None:
        """``send_nowait``, waiting for room while the mailbox is full (a checkpoint)."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                self.send_nowait(request)
            except anyio.WouldBlock:
                pass
            else:
                await anyio.lowlevel.cancel_shielded_checkpoint()
                return
            waiter = _Parking()
            if self._senders is None:
                self._senders = []
            self._senders.append(waiter)
            try:
                await waiter._park()
            finally:
                with contextlib.suppress(ValueError):
                    self._senders.remove(waiter)

    def close_sender(self) -> None:
        """No more requests: the actor gets what is buffered, then ``EndOfStream``."""
        self._sender_closed = True
        self._wake()

    def _wake_senders(self) -> None:
        senders = self._senders
        if senders:
            for waiter in senders:
                waiter._wake()

    # -------------------------------------------------------------- receiver

    def receive_nowait(self) -> Any:
        if self._receiver_closed:
            raise anyio.ClosedResourceError
        buffer = self._buffer
        if buffer:
            request = buffer.pop(0)
            if not buffer:
                self._buffer = None
            if self._senders:
                self._wake_senders()  # room for a sender waiting
            return request
        if self._sender_closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> Any:
        """The next request; ``anyio.EndOfStream`` once the mailbox is closed and empty."""
        while True:
            try:
                return self.receive_nowait()
            except anyio.WouldBlock:
                pass
            await self._park()

    def close(self) -> None:
        """The actor takes no more requests: later sends raise ``BrokenResourceError``."""
        if not self._receiver_closed:
            self._receiver_closed = True
            self._wake_senders()

    def __enter__(self) -> Mailbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ActorRef(Generic[R]):
    """The sending side of an actor's mailbox."""

    __slots__ = ("_mailbox", "name")

    def __init__(self, name: str, mailbox: Mailbox) -> None:
        self.name = name
        self._mailbox = mailbox

    async def send(self, request: R) -> None:
        mailbox = self._mailbox
        try:
            try:
                mailbox.send_nowait(request)
            except anyio.WouldBlock:
                # Full (the actor has not taken earlier requests): wait for room.
                # The actor takes requests with receive_nowait, which admits us.
                mailbox.ring()
                await mailbox.send(request)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            request.reply.close()
            # A run being cancelled finds its children gone: that is its
            # cancellation, not a crash.
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise ActorCrashed(
                self.name, "the actor gave up after repeated crashes", gave_up=True
            ) from None
        except BaseException:
            # Cancelled before delivery: nobody else will ever close the reply channel.
            request.reply.close()
            raise
        mailbox.ring()

    def close(self) -> None:
        self._mailbox.close_sender()


def spawn_mailbox(name: str, size: int = 8) -> tuple[ActorRef[Any], Mailbox]:
    mailbox = Mailbox(size)  # once per actor
    return ActorRef(name, mailbox), mailbox


class Timed(Protocol):
    """An actor whose calls have deadlines, served inside one cancel scope (the tool actor).

    :func:`supervise` enters ``scope()``'s scope around the actor's serving for as long
    as nothing cuts it, so a call re-arms its deadline instead of entering a scope of its
    own. When the deadline cuts a request's call, the scope is left, ``cut(request)``
    finishes that request outside it, and serving goes on in a fresh scope.
    """

    def scope(self) -> _LifeScope: ...

    async def cut(self, request: Any) -> None: ...


class _LifeScope(Protocol):
    @property
    def cancel_called(self) -> bool: ...

    @property
    def cancelled_caught(self) -> bool: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> bool | None: ...


class _NoScope:
    """The serving scope of an actor that is not :class:`Timed`."""

    __slots__ = ()
    cancel_called = False
    cancelled_caught = False

    def __enter__(self) -> _NoScope:
        return self

    # Static: ``with`` holds the ``__exit__`` it looked up for as long as the block runs,
    # and a static one is the function itself, not a bound method made per actor.
    @staticmethod
    def __exit__(*exc: object) -> None:
        return None


_NO_SCOPE = _NoScope()


async def supervise(
    name: str,
    factory: Callable[[], Actor[Any]],
    mailbox: Mailbox,
    policy: RestartPolicy,
) -> None:
    """Run ``factory()``'s actor on ``mailbox``, restarting it on crashes within ``policy``."""
    crashes: deque[float] | None = None  # made on the first crash
    actor = factory()
    stream, bell = mailbox.stream, mailbox.bell
    request = None
    # try/finally, not ``with stream``: a parked frame would hold the bound __exit__.
    try:
        while True:
            # A Timed actor serves in one scope until a deadline cuts a call (see Timed).
            timed = getattr(actor, "scope", None)
            scope: _LifeScope = _NO_SCOPE if timed is None else timed()
            with scope:
                while True:
                    # Mailbox.receive, inlined: an idle actor parks one frame less deep.
                    try:
                        request = stream.receive_nowait()
                    except anyio.WouldBlock:
                        request = None  # wait below: a parked handler frame keeps the exception
                    except anyio.EndOfStream:
                        return
                    if request is None:
                        await bell.wait()
                        continue
                    try:
                        await actor.handle(request)
                    except Exception:
                        crashes, gave_up = _crashed(name, request, crashes, policy)
                        if gave_up:
                            return  # closing the mailbox fails every later request
                        actor = factory()
                        break  # the new actor serves in a scope of its own
                    if scope.cancel_called:
                        break  # the deadline passed as the call ended: a fresh scope
            if request is not None and scope.cancelled_caught:
                # The scope's deadline cut the call in flight: it is finished outside.
                try:
                    await actor.cut(request)  # type: ignore[attr-defined]
                except Exception:
                    crashes, gave_up = _crashed(name, request, crashes, policy)
                    if gave_up:
                        return
                    actor = factory()
    finally:
        if request is not None:
            # Unwound with a request in flight: its requester must not wait for ever.
            request.reply.close()
        # Requests still queued (the actor was stopped or gave up) are failed,
        # so no requester waits for ever and no reply channel is left open.
        drain(name, stream)
        stream.close()


def _crashed(
    name: str, request: Request, crashes: deque[float] | None, policy: RestartPolicy
) -> tuple[deque[float], bool]:
    """Fail ``request`` after its handler crashed; whether the actor gives up."""
    now = anyio.current_time()
    if crashes is None:
        crashes = deque()
    while crashes and now - crashes[0] > policy.period_s:
        crashes.popleft()
    gave_up = len(crashes) >= policy.max_restarts
    fail(request, ActorCrashed(name, traceback.format_exc(), gave_up=gave_up))
    if not gave_up:
        crashes.append(now)
    return crashes, gave_up


def drain(name: str, mailbox: Mailbox) -> None:
    while True:
        try:
            request = mailbox.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return
        fail(request, ActorCrashed(name, "the actor stopped before serving this request"))


def fail(request: Request, error: ActorCrashed) -> None:
    """Fail ``request`` with ``error`` without blocking, then close its reply channel."""
    reply = request.reply
    with contextlib.suppress(
        anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError
    ):
        reply.send_nowait(ActorFailed(error))
    reply.close()
