"""mkdocs hook: lay the package out as it installs, for mkdocstrings.

The top-level folders ``runtime/``, ``actors/`` and ``providers/`` are
``tether.runtime``, ``tether.actors`` and ``tether.providers`` (setuptools
``package-dir``). mkdocstrings reads source files without importing them, so it
needs them where their names say: this hook links them under
``build/api-src/tether`` (as ``.ci/typecheck.sh`` does for mypy) at mkdocs'
``startup`` event, which comes before mkdocstrings looks at its ``paths`` (in its
``on_config``; this hook's own ``on_config`` would come too late). Nothing is
imported, so the API pages build without the optional extras or their services.
tests/test_docs_site.py checks that every public name is found there.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "api-src"
SUBPACKAGES = ("runtime", "actors", "providers")


def lay_out(tree: Path = TREE) -> None:
    """(Re)make ``tree/tether`` as a tree of links into the repository."""
    shutil.rmtree(tree, ignore_errors=True)
    package = tree / "tether"
    package.mkdir(parents=True)
    for entry in (ROOT / "tether").iterdir():
        # tether/runtime and the like are links in the checkout too: linked below.
        if entry.name != "__pycache__" and entry.name not in SUBPACKAGES:
            (package / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        (package / name).symlink_to(ROOT / name)


def on_startup(**kwargs: object) -> None:
    """mkdocs' first event (``build``, ``serve``, ``gh-deploy``): lay the tree out."""
    lay_out()


_ROLE = re.compile(r":(?:class|mod|meth|func|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def _role(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **kwargs: object) -> str:
    """Show the docstrings' Sphinx roles (``:class:`~a.B```) as the code they name (``B``)."""
    return _ROLE.sub(_role, html)
