"""The repeat check: a tool call the same as one of the previous round's is nudged.

"The same" is the same tool name and the same arguments in canonical JSON
(keys sorted, no spaces, an unencodable value by its repr), so key order
never matters and ``1`` is not ``1.0`` nor ``true``.

Encoding every call's arguments every round only to compare them with the
next round's is most of the check's cost, and almost every comparison fails.
:class:`RecentCalls` keeps the previous round's calls as they came and
compares them by Python equality first, which canonical equality implies for
anything a model's JSON decodes to; only a call equal that way is encoded, to
confirm it. The exception: JSON's ``NaN``, never equal to itself, so a call
whose arguments hold one is never taken for a repeat.

A checkpoint holds the canonical pairs (the same JSON as before this class):
:meth:`RecentCalls.keys` makes them when asked, and a restored run checks
its first tool round against them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tether.providers import ToolUseBlock

# Made once: json.dumps with options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr).encode
# The C encoder that ``_CANONICAL`` drives, called directly: the same text with no Python
# frame per call (JSONEncoder.encode and iterencode are Python). Checked once against
# ``_CANONICAL``; where it is missing or differs, ``canonical`` uses ``_CANONICAL``.
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)


def _c_canonical(arguments: Any) -> str:
    assert _C_ENCODER is not None
    # A fresh ``markers`` dict each call: it detects circular input, as encode() does.
    encode = _C_ENCODER(
        {}, repr, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True
    )
    return "".join(encode(arguments, 0))


def _c_encoder_works() -> bool:
    sample: Any = {"b": [1, 2.5, None, True, "é\n"], "a": {"z": float("inf"), "y": object}}
    try:
        return _C_ENCODER is not None and _c_canonical(sample) == _CANONICAL(sample)
    except Exception:
        return False


_ENCODE: Callable[[Any], str] = _c_canonical if _c_encoder_works() else _CANONICAL


def canonical(arguments: Any) -> str:
    """``arguments`` as canonical JSON (their repr where even that fails)."""
    try:
        return _ENCODE(arguments)
    except (TypeError, ValueError):
        return repr(arguments)


class RecentCalls:
    """The previous tool round's calls (see the module docstring)."""

    __slots__ = ("_calls", "_keys")

    def __init__(
        self,
        calls: Sequence[ToolUseBlock] = (),
        keys: Iterable[tuple[str, str]] | None = None,
    ) -> None:
        self._calls = calls
        self._keys = None if keys is None else frozenset(keys)

    def repeats(self, call: ToolUseBlock) -> bool:
        """Whether ``call`` is one of these calls again (same name, same arguments)."""
        keys = self._keys
        if keys is not None:  # restored from a checkpoint: the canonical pairs
            return (call.name, canonical(call.input)) in keys
        name, arguments = call.name, call.input
        for before in self._calls:
            if (
                before.name == name
                and before.input == arguments
                and canonical(before.input) == canonical(arguments)
            ):
                return True
        return False

    def keys(self) -> frozenset[tuple[str, str]]:
        """The calls as (name, canonical arguments): what a checkpoint holds."""
        if self._keys is None:
            self._keys = frozenset((c.name, canonical(c.input)) for c in self._calls)
        return self._keys

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecentCalls):
            return NotImplemented
        return self.keys() == other.keys()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecentCalls({sorted(self.keys())!r})"


#: No calls before: a run's first round, and the default.
NO_CALLS = RecentCalls()
