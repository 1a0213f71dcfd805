"""The API reference finds what it documents: every public name, with its docstring.

mkdocstrings reads the source through griffe, without importing it, from the tree
``docs/_hooks.py`` lays out (``runtime/`` as ``tether.runtime``, and so on). Here
griffe loads that tree the same way and each package's ``__all__`` is looked up in
it, so a name the reference would miss fails a test rather than the docs build only.
(``mkdocs build --strict`` itself runs in ``.ci/run``.)
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any

import pytest

griffe = pytest.importorskip("griffe", reason="the docs extra (mkdocstrings) is not installed")

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["tether", "tether.runtime", "tether.actors", "tether.providers"]


def load_hooks() -> Any:
    """docs/_hooks.py, the mkdocs hook, as a module."""
    spec = importlib.util.spec_from_file_location("tether_docs_hooks", ROOT / "docs" / "_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package laid out as it installs, by the docs' own hook."""
    path = tmp_path_factory.mktemp("api-src")
    load_hooks().lay_out(path)
    return path


@pytest.fixture(scope="module")
def loader(tree: Path) -> Any:
    """griffe's loader over the tree, each package loaded as mkdocstrings does, aliases resolved."""
    loader = griffe.GriffeLoader(search_paths=[str(tree)])
    for name in PACKAGES:
        # by name only: as a path, "tether" would be this checkout's tether/ folder
        loader.load(name, try_relative_path=False)
    loader.resolve_aliases(implicit=False, external=False)
    return loader


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_its_docstring(package: str, loader: Any) -> None:
    """Each name of the package's ``__all__`` is found, with the docstring it has at runtime."""
    static = loader.modules_collection[package]
    live = importlib.import_module(package)
    missing, differ = [], []
    for name in live.__all__:
        try:
            found = static[name]
        except (KeyError, griffe.AliasResolutionError):
            missing.append(name)
            continue
        obj = getattr(live, name)
        doc = obj.__doc__ if inspect.isclass(obj) or inspect.isfunction(obj) else None
        if doc and "__doc__" in vars(obj) and obj.__name__ == name:  # not another's alias
            text = found.docstring.value if found.docstring else ""
            if text != inspect.cleandoc(doc):
                differ.append(name)
    assert missing == []
    assert differ == []


def test_the_integrations_are_found(loader: Any) -> None:
    """The integrations' pages read their modules from the same tree, extras or not."""
    for name in ("tether.events", "tether.mcp", "tether.postgres", "tether.ray", "tether.otel"):
        assert loader.modules_collection[name].docstring is not None, name


def test_sphinx_roles_render_as_code() -> None:
    """A docstring's ``:class:`~a.B``` shows as ``B`` on the site, ``:mod:`a.b``` as ``a.b``."""
    hooks = load_hooks()
    html = ":class:<code>~tether.events.RunFinished</code> and :mod:<code>tether.ray</code>"
    assert hooks.on_page_content(html) == "<code>RunFinished</code> and <code>tether.ray</code>"
