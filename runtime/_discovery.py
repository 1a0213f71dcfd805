"""Tool discovery: a ``search_tools`` tool over the agent's catalogue.

The run answers ``search_tools`` itself (it changes the run's active tools,
which only the run may touch). Tools it finds become callable from the next
round on, quality retries included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tether.actors import ToolSpec, tool
from tether.providers import ToolDef

if TYPE_CHECKING:
    from ._typed import TypedOutput

#: How many tools one search returns at most.
SEARCH_LIMIT = 5


async def search_tools(query: str) -> str:
    """Find tools by what they do. Returns matching tools' names and descriptions;
    the tools found can be called from the next step on.

    Args:
        query: words describing the capability you need, e.g. "send email".
    """
    raise AssertionError("search_tools is answered by the run itself")  # pragma: no cover


SEARCH_TOOL: ToolSpec = tool(search_tools)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 1}


def search_catalogue(catalogue: Iterable[ToolSpec], query: str) -> list[ToolSpec]:
    """The best matches for ``query`` by shared words in name and description."""
    wanted = _words(query)
    scored = []
    for order, spec in enumerate(catalogue):
        name_words = _words(spec.name.replace("_", " "))
        hits = len(wanted & name_words) * 2 + len(wanted & _words(spec.description))
        if hits:
            scored.append((-hits, order, spec))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [spec for _, _, spec in scored[:SEARCH_LIMIT]]


class ActiveTools:
    """The tools a run offers the model now, and their definitions (built once per change).

    Without discovery that is the agent's whole catalogue. With it, only
    ``search_tools`` at first; :meth:`promote` adds what a search found. A
    typed output's ``final_result`` tool is offered from the start either way
    (it is not searched for).
    """

    __slots__ = ("_definitions", "catalogue", "discovery", "specs")

    def __init__(
        self, tools: Sequence[ToolSpec], discovery: bool, output: TypedOutput | None = None
    ) -> None:
        #: Whether the catalogue is held back behind ``search_tools``.
        self.discovery = discovery
        #: What ``search_tools`` searches (empty without discovery).
        self.catalogue: Sequence[ToolSpec] = tools if discovery else ()
        self.specs: dict[str, ToolSpec] = (
            {SEARCH_TOOL.name: SEARCH_TOOL} if discovery else {t.name: t for t in tools}
        )
        if output is not None and output.tool is not None:
            self.specs[output.tool.name] = output.tool
        self._definitions: tuple[ToolDef, ...] | None = None

    def definitions(self) -> tuple[ToolDef, ...]:
        if self._definitions is None:
            self._definitions = tuple(spec.definition() for spec in self.specs.values())
        return self._definitions

    def promote(self, found: Iterable[ToolSpec]) -> list[str]:
        """Make ``found`` callable; the names that were not already."""
        added = []
        for spec in found:
            if spec.name not in self.specs:
                self.specs[spec.name] = spec
                added.append(spec.name)
                self._definitions = None
        return added


def choose_tools(
    tools: Sequence[ToolSpec[Any]],
    discovery: str,
    threshold: int,
    typed_output: TypedOutput | None,
) -> ActiveTools:
    """An agent's active tools at the start of a run: its whole catalogue, or
    ``search_tools`` first (``discovery="first"``, or ``"auto"`` past the threshold)."""
    first = discovery == "first" or (discovery == "auto" and len(tools) > threshold)
    return ActiveTools(tools, first, typed_output)
