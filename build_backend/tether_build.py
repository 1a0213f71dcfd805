"""The build backend: setuptools, with editable installs that type-checkers can read.

The package is laid out as ``tether/`` plus the top-level folders ``runtime/``,
``actors/`` and ``providers/``, installed as ``tether.runtime``, ``tether.actors``
and ``tether.providers`` (the ``package-dir`` mapping in pyproject.toml). For
such a mapping setuptools' default editable install is an import hook, which
Python runs but mypy and pyright never execute: after ``pip install -e .`` a
user's ``mypy --strict`` said ``import-not-found`` for ``tether``.

So ``pip install -e .`` here asks setuptools for its *strict* editable mode: a
tree of links to the sources under ``build/__editable__.tether-*`` and a plain
``.pth`` entry pointing at it, which every type-checker follows. Edits to a
source file show at once; a *new* module needs ``pip install -e .`` again (the
tree links files, not folders). An explicit choice still wins:
``pip install -e . --config-settings editable_mode=lenient``.

Everything else (wheels, sdists, metadata) is setuptools' own, unchanged.
"""

from __future__ import annotations

from setuptools.build_meta import *  # noqa: F403  (the PEP 517 hooks, re-exported)
from setuptools.build_meta import build_editable as _setuptools_build_editable

ConfigSettings = dict[str, "str | list[str] | None"]


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings | None = None,
    metadata_directory: str | None = None,
) -> str:
    """Setuptools' editable wheel, in strict mode unless the caller chose a mode."""
    settings: ConfigSettings = dict(config_settings or {})
    if not {"editable_mode", "editable-mode"} & settings.keys():
        settings["editable_mode"] = "strict"
    return str(_setuptools_build_editable(wheel_directory, settings, metadata_directory))
