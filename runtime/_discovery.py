"""Tool discovery: a ``search_tools`` tool over the agent's catalogue.

The run answers ``search_tools`` itself (it changes the run's active tools,
which only the run may touch). Tools it finds become callable from the next
round on, quality retries included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tether.actors import ToolSpec, tool

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
