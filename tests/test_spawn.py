"""``actors.spawn`` and ``actors.cancel_scope``: anyio's, without their per-call extras."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from tether.actors import _spawn, cancel_scope, spawn

pytestmark = pytest.mark.anyio


async def test_spawned_tasks_run_and_the_group_waits_for_them(anyio_backend: str) -> None:
    """The group's exit waits for every spawned task; each ran with its arguments."""
    seen: list[int] = []

    async def child(i: int) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            spawn(tg, child, i, name=f"child-{i}")
    assert sorted(seen) == [0, 1, 2, 3, 4]


async def test_a_spawned_task_carries_its_name(anyio_backend: str) -> None:
    """The task is named as asked (what get_running_tasks and tracebacks show)."""
    names: list[str] = []

    async def child() -> None:
        names.append(anyio.get_current_task().name)

    async with anyio.create_task_group() as tg:
        spawn(tg, child, name="tether-test:child")
    assert names == ["tether-test:child"]


async def test_an_error_in_a_spawned_task_cancels_its_siblings(anyio_backend: str) -> None:
    """A spawned task's error cancels the group and comes out of it, as with start_soon."""
    cancelled = anyio.Event()

    async def sibling() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async def failing() -> None:
        await anyio.lowlevel.checkpoint()
        raise ValueError("boom")

    async def group() -> None:
        async with anyio.create_task_group() as tg:
            spawn(tg, sibling, name="sibling")
            spawn(tg, failing, name="failing")

    with pytest.raises(ExceptionGroup) as info:
        await group()
    assert info.group_contains(ValueError, match="boom")
    assert cancelled.is_set()


@pytest.mark.parametrize("how", ["anyio", "cancel_scope", "cancel_scope on another anyio"])
async def test_cancelling_the_group_cancels_spawned_tasks(
    anyio_backend: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled group's spawned tasks are cancelled once, and none outlives the group:
    by anyio's ``cancel``, or by ``cancel_scope`` (a second call does nothing), also
    where it falls back to anyio's ``cancel`` (an anyio release it was not checked on)."""
    if how == "cancel_scope on another anyio":
        monkeypatch.setattr(_spawn, "_CHECKED", False)
    before = len(anyio.get_running_tasks())
    finished = 0

    async def child() -> None:
        nonlocal finished
        try:
            await anyio.sleep_forever()
        finally:
            finished += 1

    async with anyio.create_task_group() as tg:
        for i in range(3):
            spawn(tg, child, name=f"child-{i}")
        await anyio.wait_all_tasks_blocked()
        if how == "anyio":
            tg.cancel_scope.cancel()
        else:
            cancel_scope(tg.cancel_scope, "test: stop the children")
            cancel_scope(tg.cancel_scope, "test: again")
        assert tg.cancel_scope.cancel_called
        await anyio.sleep_forever()  # the group's host is cancelled too
    assert tg.cancel_scope.cancelled_caught
    assert finished == 3
    assert len(anyio.get_running_tasks()) == before


async def test_spawning_into_a_closed_group_raises(anyio_backend: str) -> None:
    """A group that has exited refuses new tasks with start_soon's RuntimeError."""

    async def child() -> None:
        pass  # pragma: no cover (never started)

    async with anyio.create_task_group() as tg:
        pass
    with pytest.raises(RuntimeError, match="not active"):
        spawn(tg, child, name="late")


async def test_cancel_scope_before_the_scope_is_entered(anyio_backend: str) -> None:
    """A scope cancelled before it is entered cancels what runs in it at once."""
    scope = anyio.CancelScope()
    cancel_scope(scope, "test: cancelled early")
    with scope:
        await anyio.sleep_forever()
    assert scope.cancelled_caught


async def test_cancel_scope_comes_before_the_deadline(anyio_backend: str) -> None:
    """A scope with a deadline, cancelled early, ends at once and not at its deadline."""
    deadline = anyio.current_time() + 30
    with anyio.CancelScope(deadline=deadline) as scope:
        cancel_scope(scope, "test: before the deadline")
        await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert anyio.current_time() < deadline


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio's message is trio's own
async def test_cancel_scope_names_the_reason_not_the_calling_task(anyio_backend: str) -> None:
    """On asyncio the cancellation's message carries the reason, not the caller's repr."""
    messages: list[str] = []

    async def child() -> None:
        try:
            await anyio.sleep_forever()
        except BaseException as exc:
            messages.append(str(exc))
            raise

    async with anyio.create_task_group() as tg:
        spawn(tg, child, name="child")
        await anyio.wait_all_tasks_blocked()
        cancel_scope(tg.cancel_scope, "test: a short reason")
    assert len(messages) == 1
    assert messages[0].endswith("reason: test: a short reason")
    if _spawn.anyio_checked():  # elsewhere it is anyio's own scope.cancel(reason), repr and all
        assert "Task" not in messages[0]
