"""The soak (benchmarks/soak.py) keeps working: a tiny soak on each backend.

No outcome is asserted beyond the bookkeeping: the soak's own verdict is the
point of running it at full size (see README, "Limits and their guarantees").
"""

from __future__ import annotations

import attrs
import pytest

import tether
from benchmarks import soak
from tether.providers import Reply, ScriptedProvider


@pytest.mark.anyio
async def test_a_tiny_soak_accounts_for_every_run(anyio_backend: str) -> None:
    """Every run is tallied, faults and interrupts are injected, and the table shows it."""
    tally = await soak.soak(
        anyio_backend, runs=80, faults=0.2, cancels=0.2, stops=0.1, seed=1, concurrency=16
    )
    assert tally.runs + tally.lost == 80
    assert sum(tally.terminations.values()) == tally.runs
    assert sum(tally.injected.values()) > 0
    assert tally.interrupts["cancels sent"] + tally.interrupts["stops sent"] > 0
    assert not tally.leaked
    table = soak.table([tally])
    assert f"| runs | {tally.runs} |" in table
    assert "| **crashed** |" in table


def test_plans_are_the_same_for_a_seed() -> None:
    """A run's plan depends on the seed and its index only, so both backends soak alike."""
    a, b = soak.plan(7, 3, 0.5, 0.5, 0.0), soak.plan(7, 3, 0.5, 0.5, 0.0)
    assert (a.kind, a.injected, a.interrupt, a.moment) == (
        b.kind,
        b.injected,
        b.interrupt,
        b.moment,
    )


@pytest.mark.anyio
async def test_the_checks_catch_a_broken_trail(anyio_backend: str) -> None:
    """A result whose trail lost its RunFinished, or whose usage disagrees, is flagged."""
    agent = tether.Agent(name="a", provider=ScriptedProvider([Reply(text="hi")]))
    async with tether.Runtime() as rt:
        result = await rt.run(agent, "q")
    assert soak.consistency(result) == []
    cut = attrs.evolve(result, events=result.events[:-1])
    assert "the last event is not RunFinished" in soak.consistency(cut)
    more = attrs.evolve(result, usage=attrs.evolve(result.usage, input_tokens=999))
    assert any(p.startswith("usage") for p in soak.consistency(more))
