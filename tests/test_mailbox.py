"""An actor's mailbox (``tether.actors._actor.Mailbox``): an anyio memory object stream's
semantics in one object (DESIGN §2), on both backends."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from tether.actors import ActorCrashed, ReplyChannel
from tether.actors._actor import Mailbox, spawn_mailbox

from .helpers import cancel_once_blocked

pytestmark = pytest.mark.anyio


class _Ask:
    def __init__(self, value: int) -> None:
        self.value = value
        self.reply: ReplyChannel[int] = ReplyChannel(1)


def test_the_stream_errors_of_each_side() -> None:
    """Full: WouldBlock; after the sender closed: ClosedResourceError for it, the buffer
    then EndOfStream for the actor; after the actor closed: BrokenResourceError."""
    box = Mailbox(1)
    with pytest.raises(anyio.WouldBlock):
        box.receive_nowait()
    box.send_nowait(1)
    with pytest.raises(anyio.WouldBlock):
        box.send_nowait(2)
    box.close_sender()
    with pytest.raises(anyio.ClosedResourceError):
        box.send_nowait(3)
    assert box.receive_nowait() == 1
    with pytest.raises(anyio.EndOfStream):
        box.receive_nowait()

    other = Mailbox(2)
    with other.stream:  # leaving it closes the actor's side
        other.send_nowait(1)
    with pytest.raises(anyio.BrokenResourceError):
        other.send_nowait(2)
    with pytest.raises(anyio.ClosedResourceError):
        other.receive_nowait()
    with pytest.raises(ValueError, match="at least one request"):
        Mailbox(0)


async def test_a_sender_waits_for_room_and_the_actor_admits_it() -> None:
    """On a full mailbox ``send`` parks until the actor takes a request; order is kept."""
    ref, box = spawn_mailbox("echo", 1)
    taken: list[int] = []
    async with anyio.create_task_group() as tg:

        async def fill() -> None:
            for i in range(3):
                await ref.send(_Ask(i))  # the second and third wait for room

        tg.start_soon(fill)
        await anyio.wait_all_tasks_blocked()
        assert box._senders  # a sender is parked on the full mailbox
        while len(taken) < 3:
            try:
                taken.append(box.receive_nowait().value)
            except anyio.WouldBlock:
                await anyio.wait_all_tasks_blocked()
    assert taken == [0, 1, 2]
    assert not box._senders


async def test_a_sender_cancelled_while_waiting_for_room_leaves_nothing() -> None:
    """Cancelled on a full mailbox: its request is not delivered, its reply is closed, no
    waiter stays behind, and the mailbox works on."""
    ref, box = spawn_mailbox("echo", 1)
    await ref.send(_Ask(0))
    late = _Ask(1)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_once_blocked, scope)
            await ref.send(late)
    assert scope.cancelled_caught
    assert late.reply.statistics().sender_open is False  # closed: its requester won't hang
    assert not box._senders
    assert box.receive_nowait().value == 0
    with pytest.raises(anyio.WouldBlock):
        box.receive_nowait()  # the cancelled request never arrived
    await ref.send(_Ask(2))
    assert box.receive_nowait().value == 2


async def test_a_sender_waiting_when_the_actor_stops_gets_actor_crashed() -> None:
    """The actor closes its side while a sender waits for room: the sender is woken with
    ActorCrashed (gave up) and its reply is closed."""
    ref, box = spawn_mailbox("echo", 1)
    await ref.send(_Ask(0))
    waiting = _Ask(1)
    errors: list[ActorCrashed] = []

    async def send() -> None:
        try:
            await ref.send(waiting)
        except ActorCrashed as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(send)
        await anyio.wait_all_tasks_blocked()
        box.close()
    assert len(errors) == 1
    assert errors[0].gave_up
    assert waiting.reply.statistics().sender_open is False


async def test_closing_the_sender_wakes_a_parked_actor_with_end_of_stream() -> None:
    """An actor parked on its doorbell sees the buffered requests, then EndOfStream."""
    ref, box = spawn_mailbox("echo", 2)
    seen: list[object] = []

    async def actor() -> None:
        while True:
            try:
                seen.append((await box.receive()).value)
            except anyio.EndOfStream:
                seen.append("end")
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(actor)
        await anyio.wait_all_tasks_blocked()
        await ref.send(_Ask(7))
        await anyio.wait_all_tasks_blocked()
        ref.close()
    assert seen == [7, "end"]
