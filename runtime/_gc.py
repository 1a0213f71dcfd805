"""What a Runtime may do to the process's garbage collector while it runs (``Runtime(gc=...)``).

With thousands of runs in flight, most of CPython's full collections free
nothing: they walk every live run's objects each time the heap has grown by a
quarter (docs/guides/performance.md measures it with ``python -m
benchmarks.gc_share``). A host that runs that many agents may choose, through
:class:`GcTuning`:

- ``threshold``: the collector's thresholds (``gc.set_threshold``) while the
  Runtime runs, restored when it exits;
- ``freeze``: once the Runtime has started, one collection and then
  ``gc.freeze()``, as CPython's documentation suggests for servers: every
  object alive then (modules, classes, the agents and their tools, the
  Runtime's own machinery) moves to the permanent generation, which no later
  collection walks. ``gc.unfreeze()`` undoes it when the Runtime exits, unless
  something else had frozen objects before it.

The collector is the process's, not one Runtime's: Runtimes that run at the
same time share one tuning (the first to start applies it, the last to exit
restores what was there before); a second Runtime asking for a different one
while the first runs is refused. ``Runtime()`` without ``gc=`` never touches
the collector.
"""

from __future__ import annotations

import gc
from typing import Any

import attrs


def _check_threshold(_: object, __: object, value: Any) -> None:
    if value is None:
        return
    if (
        not isinstance(value, tuple)
        or len(value) != 3
        or not all(type(v) is int and v >= 0 for v in value)
    ):
        raise ValueError(
            "GcTuning(threshold=...) must be three non-negative ints "
            f"(gc.set_threshold's generation 0, 1 and 2 thresholds), got {value!r}"
        )


@attrs.frozen(kw_only=True)
class GcTuning:
    """How a Runtime sets the process's garbage collector while it runs (see the module).

    ``GcTuning(threshold=(50_000, 20, 20), freeze=True)`` is what
    docs/guides/performance.md measured for 5,000 runs in flight.
    """

    #: ``gc.set_threshold(*threshold)`` while the Runtime runs (``None``: unchanged).
    threshold: tuple[int, int, int] | None = attrs.field(default=None, validator=_check_threshold)
    #: ``gc.collect()`` then ``gc.freeze()`` once the Runtime has started.
    freeze: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))


@attrs.define
class _Held:
    """The tuning in force, how many Runtimes hold it, and what to restore."""

    tuning: GcTuning
    holders: int
    threshold: tuple[int, int, int]
    unfreeze: bool


_held: _Held | None = None


class GcHold:
    """A Runtime's hold on its :class:`GcTuning`: ``enter`` on start, ``exit`` on exit."""

    __slots__ = ("_entered", "_tuning")

    def __init__(self, tuning: GcTuning | None) -> None:
        if tuning is not None and not isinstance(tuning, GcTuning):
            raise TypeError(f"Runtime(gc=...) must be a tether.runtime.GcTuning, got {tuning!r}")
        self._tuning = tuning
        self._entered = False

    def enter(self) -> None:
        """Apply the tuning (or join the one in force, if it is the same)."""
        global _held
        tuning = self._tuning
        if tuning is None or self._entered:
            return
        if _held is not None:
            if _held.tuning != tuning:
                raise RuntimeError(
                    f"Runtime(gc={tuning!r}): another running Runtime set {_held.tuning!r}; "
                    "the collector is the process's, so Runtimes running at once share one"
                )
            _held.holders += 1
            self._entered = True
            return
        previous = gc.get_threshold()
        unfreeze = False
        if tuning.threshold is not None:
            gc.set_threshold(*tuning.threshold)
        if tuning.freeze:
            unfreeze = gc.get_freeze_count() == 0
            gc.collect()
            gc.freeze()
        _held = _Held(tuning=tuning, holders=1, threshold=previous, unfreeze=unfreeze)
        self._entered = True

    def exit(self) -> None:
        """Let go; the last Runtime to let go restores the collector."""
        global _held
        if not self._entered:
            return
        self._entered = False
        held = _held
        assert held is not None
        held.holders -= 1
        if held.holders:
            return
        _held = None
        if held.tuning.threshold is not None:
            gc.set_threshold(*held.threshold)
        if held.unfreeze:
            gc.unfreeze()


__all__ = ["GcHold", "GcTuning"]
