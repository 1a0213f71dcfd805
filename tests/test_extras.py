"""Each integration module says which extra to install when its packages are missing,
and ``tether.__version__`` is the installed distribution's."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

import pytest

import tether

#: module → (the packages its extra brings, hidden here, and the extra's name).
EXTRAS = {
    "tether.a2a": (("a2a",), "a2a"),
    "tether.mcp": (("mcp", "mcp_types", "httpx2"), "mcp"),
    "tether.postgres": (("psycopg", "psycopg_pool"), "postgres"),
    "tether.ray": (("ray",), "ray"),
    "tether.otel": (("opentelemetry",), "otel"),
    "tether.ui.ag_ui": (("ag_ui",), "ui"),
}


def _import_hiding(module: str, hidden: tuple[str, ...]) -> str:
    """What importing ``module`` prints in a fresh interpreter where ``hidden`` are missing."""
    script = textwrap.dedent(
        f"""
        import sys
        for name in {hidden!r}:
            sys.modules[name] = None  # as if the extra were not installed
        import tether
        assert tether.Runtime and tether.Agent
        try:
            import {module}
        except ImportError as exc:
            print(type(exc).__name__, exc)
        else:
            print("imported")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return proc.stdout


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_an_integration_without_its_extra_names_the_extra(module: str) -> None:
    """import tether.X without the extra: an ImportError saying pip install 'tether[X]'."""
    hidden, extra = EXTRAS[module]
    out = _import_hiding(module, hidden)
    assert out.startswith("ImportError"), out
    assert f"pip install 'tether[{extra}]'" in out


def test_the_vercel_endpoint_needs_no_extra() -> None:
    """tether.ui.vercel_ai imports with no package beyond tether's own (no ag-ui, no pydantic)."""
    assert _import_hiding("tether.ui.vercel_ai", ("ag_ui", "pydantic")).strip() == "imported"


def test_the_cli_runs_without_rich() -> None:
    """The cli extra (rich) is optional: tether.cli imports and prints plain text without it."""
    out = _import_hiding("tether.cli", ("rich",))
    assert out.strip() == "imported"


def test_version_is_the_distribution_version() -> None:
    """tether.__version__ is importlib.metadata.version('tether')."""
    assert tether.__version__ == importlib.metadata.version("tether")
    assert isinstance(tether.__version__, str)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tether.nope  # type: ignore[attr-defined]  # noqa: B018
