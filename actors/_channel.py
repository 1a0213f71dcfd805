"""Reply channels and doorbells: the cheap half of an actor hop.

Every request carries its own reply channel, so one is made per request, and a
round makes two. An anyio memory object stream pair costs two objects, a shared
state, a generic-alias call and, for each blocking receive, an ``anyio.Event``,
a receiver record and a task lookup. :class:`ReplyChannel` is a smaller thing
for the one case tether needs (one sender, one receiver, a bounded buffer) in
one slotted object. It raises anyio's exceptions where a memory stream would:

- the actor ``send``\\ s (waiting while the buffer is full) or ``send_nowait``\\ s
  (:class:`anyio.WouldBlock` when full) and ``close``\\ s when done;
- the requester ``receive``\\ s (:class:`anyio.EndOfStream` once the actor closed
  and the buffer is empty) and ``abandon``\\ s when it stops listening, after
  which every send raises :class:`anyio.BrokenResourceError`;
- a send after ``close`` raises :class:`anyio.ClosedResourceError`.

It is not a memory object stream, and differs from one on purpose:

- **No checkpoint on the fast path.** A send into room, or a receive of a
  buffered item, completes at once without yielding (a memory stream yields on
  every call). One that must wait parks its task until the other side acts,
  and is a cancellation point. The end of the stream is a cancellation point
  too: ``receive`` checks for a pending cancellation before it raises
  :class:`anyio.EndOfStream`, so a requester whose scope was cancelled while the
  actor closed sees its cancellation, not a stream that ended without an answer.
- **The buffer holds at least one item.** A size-0 (rendezvous) channel is not
  supported; ``ReplyChannel(0)`` raises :class:`ValueError`.
- ``statistics()`` reports the buffer and whether each side is open, not task
  counts (one sender and one receiver, at most one of them parked).

:class:`_Parking` is also what wakes an actor parked on its mailbox
(:class:`~tether.actors._actor.Mailbox`).

Parking uses each backend's own primitive: an asyncio future (which anyio's
cancel scopes cancel like any other await), or trio's
``wait_task_rescheduled``/``reschedule`` pair. The backend is told apart as
sniffio does it first: trio names itself in ``sniffio.thread_local``; anything
else is asyncio's running loop (``asyncio.get_running_loop``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.lowlevel
import attrs
import sniffio

if TYPE_CHECKING:
    import asyncio

# asyncio is imported where it is used (an import of a loaded module is a dict
# lookup, no call): ``import tether`` does not load it, and a trio program never does.

T = TypeVar("T")


class _Parking:
    """One task at a time may park on an instance; ``_wake`` resumes it."""

    __slots__ = ("_parked",)

    def __init__(self) -> None:
        # The parked task's asyncio future or trio task, or None.
        self._parked: Any = None

    def _park(self) -> Awaitable[Any]:
        """What to await to park until ``_wake``: no coroutine of its own (a frame
        less per wait, on every round's hot path)."""
        # sniffio's own first test (a library running in this thread names
        # itself there), read directly.
        if sniffio.thread_local.name != "trio":
            # A cancelled wait cancels the future; ``_wake`` and ``_waiting`` skip
            # a done one, so it needs no clean-up of its own.
            # The loop's create_future, without its call: a park per hop, four a round.
            import asyncio

            future: asyncio.Future[None] = asyncio.Future(loop=asyncio.get_running_loop())
            self._parked = future
            return future
        import trio  # here: only on trio, where it is loaded already

        self._parked = trio.lowlevel.current_task()
        return trio.lowlevel.wait_task_rescheduled(self._abort)  # noqa: ASYNC105 (awaited by the caller)

    def _abort(self, _: object) -> Any:
        self._parked = None
        import trio

        return trio.lowlevel.Abort.SUCCEEDED

    def _waiting(self) -> bool:
        parked = self._parked
        if parked is None:
            return False
        import asyncio

        return not (isinstance(parked, asyncio.Future) and parked.done())

    def _wake(self) -> None:
        parked = self._parked
        if parked is None:
            return
        self._parked = None
        import asyncio

        if isinstance(parked, asyncio.Future):
            if not parked.done():
                parked.set_result(None)
        else:
            import trio

            trio.lowlevel.reschedule(parked)


@attrs.frozen
class ReplyStatistics:
    """What :meth:`ReplyChannel.statistics` reports."""

    current_buffer_used: int
    max_buffer_size: int
    sender_open: bool
    receiver_open: bool
    #: a task (sender or receiver) is parked on the channel
    waiting: bool


class ReplyChannel(_Parking, Generic[T]):
    """A request's reply stream: one sender (the actor), one receiver (the requester)."""

    __slots__ = ("_abandoned", "_buffer", "_closed", "_size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a reply channel holds at least one item, not {size}")
        self._parked = None  # _Parking.__init__, inlined: two channels a round
        # A list, not a deque: a reply holds a few items, and a deque is 600 bytes. Made
        # by the first send: a run parked in its model call holds no empty one.
        self._buffer: list[T] | None = None
        self._size = size
        self._closed = False
        self._abandoned = False

    # ---------------------------------------------------------------- sender

    def send_nowait(self, item: T) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._abandoned:
            raise anyio.BrokenResourceError
        buffer = self._buffer
        if buffer is None:
            self._buffer = [item]
        elif len(buffer) >= self._size:
            raise anyio.WouldBlock
        else:
            buffer.append(item)
        if self._parked is not None:
            self._wake()

    async def send(self, item: T) -> None:
        while True:
            try:
                self.send_nowait(item)
                return
            except anyio.WouldBlock:
                pass
            await self._park()  # until the receiver takes an item or abandons

    def close(self) -> None:
        """The sender is done: the receiver gets what is buffered, then EndOfStream."""
        if not self._closed:
            self._closed = True
            if self._parked is not None:
                self._wake()

    def __enter__(self) -> ReplyChannel[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -------------------------------------------------------------- receiver

    async def receive(self) -> T:
        while self._may_block():
            await self._park()
        try:
            return self.receive_nowait()
        except anyio.EndOfStream:
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise

    def _may_block(self) -> bool:
        return not self._buffer and not self._closed

    def receive_nowait(self) -> T:
        """A buffered item at once: :class:`anyio.WouldBlock` when there is none yet,
        :class:`anyio.EndOfStream` once the sender closed and the buffer is empty.

        With :meth:`wait_receivable` it is :meth:`receive` without a coroutine of its
        own: a requester's loop parks one frame less deep, and makes no coroutine per
        item (two replies a round). Unlike :meth:`receive` it is no cancellation
        point at the end of the stream: such a loop checks for a pending
        cancellation itself (``anyio.lowlevel.checkpoint_if_cancelled``) before it
        treats the end as the actor's.
        """
        buffer = self._buffer
        if buffer:
            item = buffer.pop(0)
            if self._parked is not None:
                self._wake()  # a sender waiting for room
            return item
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    #: What to await after :meth:`receive_nowait` raised WouldBlock: parks until the
    #: sender sends or closes (``_park`` itself, so no frame of its own), a
    #: cancellation point. Then try :meth:`receive_nowait` again.
    wait_receivable = _Parking._park

    def statistics(self) -> ReplyStatistics:
        """The buffer's fill and size, and whether each side is still open."""
        return ReplyStatistics(
            current_buffer_used=len(self._buffer or ()),
            max_buffer_size=self._size,
            sender_open=not self._closed,
            receiver_open=not self._abandoned,
            waiting=self._waiting(),
        )

    def abandon(self) -> None:
        """The receiver stops listening: later sends raise BrokenResourceError."""
        if not self._abandoned:
            self._abandoned = True
            self._buffer = None
            if self._parked is not None:
                self._wake()
