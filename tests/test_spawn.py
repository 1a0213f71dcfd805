"""``actors.spawn``: start_soon without anyio's task handle, with start_soon's semantics."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from tether.actors import spawn

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


async def test_cancelling_the_group_cancels_spawned_tasks(anyio_backend: str) -> None:
    """A cancelled group's spawned tasks are cancelled, and none outlives the group."""
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
        tg.cancel_scope.cancel()
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
