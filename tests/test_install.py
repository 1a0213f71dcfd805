"""What the README's install commands give a user.

- The quick start installs ``.[cli]`` (the core and ``rich``) to run the demo, so
  the demo must import nothing outside what those install: no Ray, PostgreSQL,
  MCP, OpenTelemetry or web framework, which only ``.[dev]`` and the extras bring.
- ``pip install -e .`` must give type-checkers the package: the build backend
  (build_backend/tether_build.py) asks setuptools for its strict editable mode,
  a link tree behind a plain ``.pth`` entry that mypy follows, where setuptools'
  default for the package-dir mapping is an import hook mypy cannot see.

The editable install runs twice: offline into a venv that borrows this one's
packages (the default tier; it needs a setuptools that builds editable wheels by
itself, which ``.[dev]`` installs), and exactly as the README says, in a fresh
venv from the package index (the slow tier).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

#: What only the extras bring; the demo must import none of it.
HEAVY = ("ray", "psycopg", "psycopg_pool", "mcp", "opentelemetry", "fastapi", "starlette")

#: Runs the demo as ``python -m tether demo`` does, then prints the top-level modules.
DEMO = """
import json, runpy, sys
sys.argv = ["tether", "demo", *sys.argv[1:]]
try:
    runpy.run_module("tether", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    if exit.code not in (None, 0):
        raise
print(json.dumps(sorted({name.partition(".")[0] for name in sys.modules})))
"""

#: A user's file: mypy --strict must find tether and check the calls against it.
USER_FILE = """\
import tether
from tether.providers import ScriptedProvider
from tether.runtime import Runtime

agent = tether.Agent(name="helper", provider=ScriptedProvider([]))
runtime: Runtime = tether.Runtime()
"""


def _closure(extras: tuple[str, ...]) -> set[str]:
    """The distributions ``pip install tether[extras]`` installs, by normalised name."""
    seen: set[str] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [("tether", extras)]
    while todo:
        name, wanted = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen and not wanted:
            continue
        seen.add(key)
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            env_ok = any(
                req.marker is None or req.marker.evaluate({"extra": extra})
                for extra in ("", *wanted)
            )
            if env_ok:
                todo.append((req.name, tuple(req.extras)))
    return seen


def _distributions_of(modules: list[str]) -> dict[str, set[str]]:
    """Each imported third-party top-level module and the distributions providing it."""
    owners = metadata.packages_distributions()
    stdlib = sys.stdlib_module_names | set(sys.builtin_module_names)
    found: dict[str, set[str]] = {}
    for module in modules:
        if module in stdlib or module.startswith("_") or module == "tether":
            continue
        dists = {d.lower().replace("_", "-") for d in owners.get(module, [])}
        if dists:
            found[module] = dists
    return found


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_demo_imports_only_what_the_quick_start_installs(backend: str) -> None:
    """``python -m tether demo`` imports the core and ``rich``: ``.[cli]``, nothing heavier."""
    proc = subprocess.run(
        [sys.executable, "-c", DEMO, "--agents", "12", "--backend", backend],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    modules: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not [m for m in modules if m in HEAVY]
    allowed = _closure(("cli",))
    outside = {m: d for m, d in _distributions_of(modules).items() if not d & allowed}
    # httpx imports click for its own command line when it happens to be installed.
    outside.pop("click", None)
    assert outside == {}, f"the demo imports what .[cli] does not install: {outside}"


def _setuptools_builds_editables() -> bool:
    """setuptools 70.1+ writes wheels itself; older ones need the ``wheel`` package."""
    try:
        version = tuple(int(p) for p in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    if version >= (70, 1):
        return True
    try:
        metadata.version("wheel")
    except metadata.PackageNotFoundError:
        return False
    return version >= (68, 0)


def _copy_checkout(dest: Path) -> Path:
    """The files a clone has that the install reads (the tests and the rest need not come)."""
    src = dest / "tether-checkout"
    src.mkdir()
    for name in ("pyproject.toml", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("build_backend", "runtime", "actors", "providers"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        ROOT / "tether", src / "tether", symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    return src


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return where / "bin" / "python"


def _mypy_on_a_user_file(python: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """mypy --strict on a user's file, outside the checkout, against ``python``'s packages."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "app.py").write_text(USER_FILE)
    (user / "wrong.py").write_text(USER_FILE + "count: int = runtime\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--python-executable",
            str(python),
            "app.py",
            "wrong.py",
        ],
        cwd=user,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _assert_mypy_sees_the_package(proc: subprocess.CompletedProcess[str]) -> None:
    out = proc.stdout
    assert "import-not-found" not in out, out
    assert "import-untyped" not in out, out
    # The well-typed file passes; the wrong one fails on its one wrong line, so the
    # package was really read, not skipped.
    assert "app.py" not in out, out
    assert (
        'wrong.py:7: error: Incompatible types in assignment (expression has type "Runtime"' in out
    )
    assert "Found 1 error in 1 file (checked 2 source files)" in out, out


@pytest.mark.skipif(
    not _setuptools_builds_editables(),
    reason="this venv's setuptools cannot build an editable wheel offline (reinstall .[dev])",
)
def test_mypy_finds_the_package_after_an_editable_install(tmp_path: Path) -> None:
    """``pip install -e .`` into a new venv; mypy --strict on a user's file then reads tether."""
    python = _venv(tmp_path / "venv")
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The new venv borrows this one's packages (pip, setuptools, the dependencies),
    # as /work/mkwt.sh does, so the install needs no network.
    # (Asked of a new interpreter: this process's sys.path may have been changed.)
    borrowed = subprocess.run(
        [
            sys.executable,
            "-c",
            'import sys; print(*(p for p in sys.path if p.endswith("-packages")))',
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    (site / "00-borrowed.pth").write_text("".join(f"{p}\n" for p in borrowed))
    src = _copy_checkout(tmp_path)
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    proc = subprocess.run(
        [*pip, "-e", str(src)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    _assert_mypy_sees_the_package(_mypy_on_a_user_file(python, tmp_path))


@pytest.mark.slow
def test_the_readme_install_then_mypy_from_a_fresh_venv(tmp_path: Path) -> None:
    """The README's ``pip install -e .``, in a fresh venv from the package index, then mypy."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    src = _copy_checkout(tmp_path)
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-e", str(src)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    _assert_mypy_sees_the_package(_mypy_on_a_user_file(python, tmp_path))
