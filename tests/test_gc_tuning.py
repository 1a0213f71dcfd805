"""``Runtime(gc=GcTuning(...))``: the collector set while the Runtime runs, restored after."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import tether
from tether.providers import Reply, ScriptedProvider

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    """Whatever a test does, the process's collector is as it was afterwards."""
    threshold = gc.get_threshold()
    frozen = gc.get_freeze_count()
    yield
    gc.set_threshold(*threshold)
    if gc.get_freeze_count() and not frozen:
        gc.unfreeze()


def agent() -> tether.Agent:
    return tether.Agent(name="a", provider=ScriptedProvider([Reply(text="hi")]))


async def test_a_runtime_without_gc_leaves_the_collector_alone() -> None:
    """No ``gc=``: thresholds and the frozen count never change."""
    before = gc.get_threshold(), gc.get_freeze_count()
    async with tether.Runtime() as rt:
        assert (gc.get_threshold(), gc.get_freeze_count()) == before
        await rt.run(agent(), "q")
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


async def test_thresholds_hold_while_the_runtime_runs() -> None:
    """``threshold`` is set on entry and the previous thresholds come back on exit."""
    before = gc.get_threshold()
    tuning = tether.GcTuning(threshold=(50_000, 20, 20))
    async with tether.Runtime(gc=tuning) as rt:
        assert gc.get_threshold() == (50_000, 20, 20)
        result = await rt.run(agent(), "q")
    assert result.output == "hi"
    assert gc.get_threshold() == before


async def test_freeze_moves_start_up_objects_out_of_collections_until_exit() -> None:
    """``freeze=True`` freezes what is alive at start (the agent among it), unfrozen on exit."""
    assert gc.get_freeze_count() == 0
    a = agent()
    async with tether.Runtime(gc=tether.GcTuning(freeze=True)) as rt:
        assert gc.get_freeze_count() > 0
        assert not any(o is a for o in gc.get_objects())  # frozen: no generation holds it
        assert (await rt.run(a, "q")).output == "hi"
    assert gc.get_freeze_count() == 0


async def test_freeze_is_not_undone_when_objects_were_frozen_before() -> None:
    """A process that froze objects itself keeps them frozen after the Runtime exits."""
    gc.freeze()
    async with tether.Runtime(gc=tether.GcTuning(freeze=True)):
        pass
    assert gc.get_freeze_count() > 0


async def test_runtimes_at_once_share_one_tuning() -> None:
    """The same tuning twice: the last to exit restores; a different one is refused."""
    before = gc.get_threshold()
    tuning = tether.GcTuning(threshold=(10_000, 10, 10))
    async with tether.Runtime(gc=tuning):
        async with tether.Runtime(gc=tether.GcTuning(threshold=(10_000, 10, 10))):
            assert gc.get_threshold() == (10_000, 10, 10)
        assert gc.get_threshold() == (10_000, 10, 10)  # the first still holds it
        other = tether.Runtime(gc=tether.GcTuning(threshold=(1_000, 10, 10)))
        with pytest.raises(RuntimeError, match="share one"):
            await other.__aenter__()
        assert gc.get_threshold() == (10_000, 10, 10)
    assert gc.get_threshold() == before


@pytest.mark.parametrize(
    "threshold", [(1, 2), (1, 2, -3), (1.5, 2, 3), [700, 10, 10], "700,10,10", (True, 1, 1)]
)
def test_a_bad_threshold_is_refused_at_construction(threshold: object) -> None:
    """Three non-negative ints in a tuple, or ``ValueError`` naming them."""
    with pytest.raises(ValueError, match="three non-negative ints"):
        tether.GcTuning(threshold=threshold)  # type: ignore[arg-type]


def test_gc_must_be_a_tuning() -> None:
    """``Runtime(gc=...)`` takes a ``GcTuning`` or ``None``."""
    with pytest.raises(TypeError, match="GcTuning"):
        tether.Runtime(gc=(50_000, 20, 20))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tether.GcTuning(freeze=1)  # type: ignore[arg-type]
