"""Either HTTP provider, by name, against a fake server (each wire module makes its own)."""

from __future__ import annotations

from typing import Any

from . import anthropic_wire, gemini_wire, openai_wire, responses_wire

WIRES = {
    "anthropic": anthropic_wire,
    "openai": openai_wire,
    "openai-responses": responses_wire,
    "gemini": gemini_wire,
}


def make_provider(kind: str, url: str, stream: bool = True, **kw: Any) -> Any:
    """``kind``'s provider for the fake server at ``url`` (the test key unless ``api_key=``)."""
    return WIRES[kind].provider(url, stream=stream, **kw)
