"""Checks of a decoded JSON answer's shape; a wrong shape raises :class:`MalformedResponse`."""

from __future__ import annotations

from typing import Any

import attrs

from ._arguments import loads_body, parse_tool_arguments
from ._errors import MalformedResponse
from ._wire_errors import _truncate


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


@attrs.frozen
class Shape:
    """Checks on a decoded body; a mismatch raises :class:`MalformedResponse`."""

    provider: str

    def fail(self, what: str, value: Any = None, expected: str = "") -> MalformedResponse:
        got = f", got {_type_name(value)}" if expected else ""
        exp = f" to be {expected}" if expected else ""
        return MalformedResponse(f"{self.provider}: malformed response: expected {what}{exp}{got}")

    def obj(self, value: Any, what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(what, value, "an object")
        return value

    def arr(self, value: Any, what: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(what, value, "an array")
        return value

    def text(self, value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise self.fail(what, value, "a string")
        return value

    def opt_text(self, value: Any, what: str) -> str | None:
        return None if value is None else self.text(value, what)

    def opt_int(self, value: Any, what: str, default: int = 0) -> int:
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.fail(what, value, "a non-negative integer")
        return value

    def json(self, raw: bytes | str, what: str) -> Any:
        try:
            return loads_body(raw)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise MalformedResponse(
                f"{self.provider}: malformed response: {what} is not valid JSON "
                f"({_truncate(str(exc), 120)})"
            ) from exc


__all__ = [
    "Shape",
    "parse_tool_arguments",  # re-exported from ._arguments
]
