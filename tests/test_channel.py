"""The reply channel and the doorbell: one sender, one receiver, a documented contract."""

from __future__ import annotations

import anyio
import pytest

from tether.actors import ReplyChannel
from tether.actors._actor import spawn_mailbox

from .helpers import cancel_once_blocked

pytestmark = pytest.mark.anyio


async def test_items_arrive_in_order_then_end_of_stream() -> None:
    """Items sent before close arrive in order, then receive raises EndOfStream."""
    channel: ReplyChannel[int] = ReplyChannel(4)
    for i in range(3):
        channel.send_nowait(i)
    channel.close()
    assert [await channel.receive() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(anyio.EndOfStream):
        await channel.receive()


async def test_receive_nowait_and_wait_receivable() -> None:
    """receive_nowait: WouldBlock while empty and open, the items in order, then EndOfStream;
    wait_receivable (after a WouldBlock) parks until the sender sends or closes."""
    channel: ReplyChannel[int] = ReplyChannel(2)
    got: list[object] = []

    async def receiver() -> None:
        while True:
            try:
                got.append(channel.receive_nowait())
                continue
            except anyio.WouldBlock:
                got.append("parked")
            except anyio.EndOfStream:
                got.append("end")
                return
            await channel.wait_receivable()

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        await anyio.wait_all_tasks_blocked()
        assert got == ["parked"]
        channel.send_nowait(1)
        channel.send_nowait(2)
        await anyio.wait_all_tasks_blocked()
        assert got == ["parked", 1, 2, "parked"]
        channel.close()
    assert got == ["parked", 1, 2, "parked", "end"]


async def test_send_after_close_is_closed_and_full_buffer_would_block() -> None:
    """A full buffer makes send_nowait raise WouldBlock; after close, ClosedResourceError."""
    channel: ReplyChannel[int] = ReplyChannel(1)
    channel.send_nowait(1)
    with pytest.raises(anyio.WouldBlock):
        channel.send_nowait(2)
    channel.close()
    with pytest.raises(anyio.ClosedResourceError):
        channel.send_nowait(3)


async def test_send_after_abandon_is_broken() -> None:
    """Once the receiver abandons the channel, both sends raise BrokenResourceError."""
    channel: ReplyChannel[int] = ReplyChannel(1)
    channel.abandon()
    with pytest.raises(anyio.BrokenResourceError):
        channel.send_nowait(1)
    with pytest.raises(anyio.BrokenResourceError):
        await channel.send(1)


async def test_receiver_parks_until_a_send() -> None:
    """A receiver on an empty channel stays parked until an item is sent."""
    channel: ReplyChannel[str] = ReplyChannel(1)
    got: list[str] = []

    async def receiver() -> None:
        got.append(await channel.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        await anyio.wait_all_tasks_blocked()
        assert got == []
        channel.send_nowait("hello")
    assert got == ["hello"]


async def test_a_full_sender_waits_for_room_and_the_receiver_gets_everything() -> None:
    """A sender waits for room, is never more than the buffer ahead, and every item arrives."""
    channel: ReplyChannel[int] = ReplyChannel(2)
    sent: list[int] = []

    async def sender() -> None:
        with channel:
            for i in range(10):
                await channel.send(i)
                sent.append(i)

    received: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        while True:
            try:
                received.append(await channel.receive())
            except anyio.EndOfStream:
                break
            # The sender is never more than the buffer ahead of us.
            assert len(sent) - len(received) <= 2
    assert received == list(range(10)) == sent


async def test_abandoning_wakes_a_blocked_sender_with_broken() -> None:
    """Abandoning wakes a sender parked on a full buffer with BrokenResourceError."""
    channel: ReplyChannel[int] = ReplyChannel(1)
    outcome: list[str] = []

    async def sender() -> None:
        channel.send_nowait(0)
        try:
            await channel.send(1)  # the buffer is full: parks
        except anyio.BrokenResourceError:
            outcome.append("broken")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await anyio.wait_all_tasks_blocked()
        channel.abandon()
    assert outcome == ["broken"]


async def test_a_parked_receive_is_cancellable_and_the_channel_stays_usable() -> None:
    """A parked receive can be cancelled, and the channel still works after."""
    channel: ReplyChannel[int] = ReplyChannel(1)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_once_blocked, scope)
            await channel.receive()
    assert scope.cancelled_caught
    channel.send_nowait(7)
    assert await channel.receive() == 7


async def test_a_parked_sender_is_cancellable() -> None:
    """A sender parked on a full buffer can be cancelled; its item is not sent, the rest work."""
    channel: ReplyChannel[int] = ReplyChannel(1)
    channel.send_nowait(0)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_once_blocked, scope)
            await channel.send(1)
    assert scope.cancelled_caught
    assert await channel.receive() == 0
    channel.send_nowait(2)  # room again
    assert await channel.receive() == 2


async def test_the_doorbell_wakes_an_actor_parked_on_its_mailbox() -> None:
    """Each send wakes an actor parked on its mailbox; closing the ref ends its loop."""
    ref, mailbox = spawn_mailbox("echo", 1)
    served: list[int] = []

    async def actor() -> None:
        with mailbox.stream:
            while True:
                try:
                    request = await mailbox.receive()
                except anyio.EndOfStream:
                    return
                with request.reply:
                    request.reply.send_nowait(request.value * 2)
                served.append(request.value)

    class Echo:
        def __init__(self, value: int) -> None:
            self.value = value
            self.reply: ReplyChannel[int] = ReplyChannel(1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(actor)
        for i in range(3):
            await anyio.wait_all_tasks_blocked()  # the actor is parked on its doorbell
            request = Echo(i)
            await ref.send(request)
            assert await request.reply.receive() == 2 * i
        ref.close()  # rings: the actor sees the end of its mailbox and returns
    assert served == [0, 1, 2]


def test_a_size_zero_channel_is_refused_not_a_hang() -> None:
    """ReplyChannel(0) raises ValueError at once; it does not pretend to be a rendezvous."""
    with pytest.raises(ValueError, match="at least one item"):
        ReplyChannel(0)


async def test_statistics_report_the_buffer_and_both_sides() -> None:
    """statistics() shows the fill, the size, and which side has gone."""
    channel: ReplyChannel[int] = ReplyChannel(2)
    channel.send_nowait(1)
    stats = channel.statistics()
    assert (stats.current_buffer_used, stats.max_buffer_size) == (1, 2)
    assert stats.sender_open
    assert stats.receiver_open
    assert not stats.waiting
    channel.close()
    channel.abandon()
    stats = channel.statistics()
    assert not stats.sender_open
    assert not stats.receiver_open
    assert stats.current_buffer_used == 0


async def test_end_of_stream_inside_a_cancelled_scope_is_the_cancellation() -> None:
    """A requester whose scope is cancelled sees the cancellation, not EndOfStream."""
    channel: ReplyChannel[int] = ReplyChannel(1)
    channel.close()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await channel.receive()
        pytest.fail("receive returned inside a cancelled scope")  # pragma: no cover
    assert scope.cancelled_caught
