"""Every Python example in the README and in docs/ runs, or is marked as a fragment on purpose.

The rule (docs/guides/development.md, "Code blocks in the docs"):

- a block fenced ``python`` is a whole program, run as written in a temporary directory,
  once on asyncio and once on trio (``anyio.run`` is pointed at each);
- ``<!-- fragment: why -->`` on the line before a ``python`` fence marks a piece of a
  program (it names things defined elsewhere): it is only compiled, so it stays valid
  Python (``await`` at its top level is allowed);
- ``<!-- needs: postgres -->`` runs the block against the test server of tests/pg.py,
  in a schema of its own (``DATABASE_URL`` and ``TETHER_SCHEMA`` are set for it), and
  is skipped, saying why, without one (under CI it fails instead);
- ``<!-- needs: ray -->`` runs the block only when ``RAY_ADDRESS`` names a running
  Ray cluster (starting one here would take most of this file's time); else it is
  skipped, saying so;
- no block is fenced ``py``: a fence that is neither run nor marked would be neither;
- ``<!-- needs: examples -->`` before an ``sh`` block runs it with bash from the
  repository's root (``python`` is this interpreter), on a free port instead of the
  one it names, when the ``examples`` extra is installed.

Other shell blocks and diagrams (``sh``, ``text``) are not run. A block that appears
in several places (the README repeats a few of the docs' examples) runs once.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!--\s*(fragment|needs)\s*:\s*([^>]*?)\s*-->\s*\Z")


@attrs.frozen
class Block:
    """One fenced block of a page, with its place and the marker before it."""

    where: str
    lang: str
    code: str
    mark: str | None  # "fragment", "needs postgres", "needs ray" or None


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of one page, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        kind = None
        if mark:
            kind = "fragment" if mark.group(1) == "fragment" else f"needs {mark.group(2)}"
        found.append(
            Block(
                where=f"{path.relative_to(ROOT)}:{line}",
                lang=match.group(1),
                code=match.group(2),
                mark=kind,
            )
        )
    return found


ALL = [block for path in FILES for block in blocks_of(path)]
PYTHON = [block for block in ALL if block.lang == "python"]


def distinct(blocks: list[Block]) -> list[Block]:
    """Each block's first appearance only."""
    first: dict[str, Block] = {}
    for block in blocks:
        first.setdefault(block.code, block)
    return list(first.values())


DISTINCT = distinct(PYTHON)


def test_the_docs_have_examples() -> None:
    """The README and the docs show runnable code, and the docs have pages."""
    assert len(FILES) > 20
    assert sum(block.mark is None for block in PYTHON) >= 15


def test_no_block_is_unmarked_py() -> None:
    """Every Python block is fenced ``python`` (run, or marked a fragment), never ``py``."""
    wrong = [block.where for block in ALL if block.lang in ("py", "python3", "pycon")]
    assert wrong == [], f"fence these ```python, marked <!-- fragment: why --> if so: {wrong}"


def test_every_marker_is_known() -> None:
    """A marker is one of the rule's, before the kind of block it is for."""
    marks = {(block.mark, block.lang) for block in ALL if block.mark}
    known = {"fragment", "needs postgres", "needs ray"}
    assert marks <= {(mark, "python") for mark in known} | {("needs examples", "sh")}


SHELL = [block for block in ALL if block.lang == "sh" and block.mark == "needs examples"]


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("block", SHELL, ids=[block.where for block in SHELL])
def test_shell_example_runs(block: Block) -> None:
    """The shell block runs as written (on a free port): it waits for its server, then talks."""
    pytest.importorskip("fastapi", reason="the examples extra is not installed")
    pytest.importorskip("uvicorn", reason="the examples extra is not installed")
    ports = set(re.findall(r"\b8000\b", block.code))
    assert ports, "the example names port 8000; the test moves it to a free one"
    script = block.code.replace("8000", str(free_port()))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # Its own process group: whatever happens, nothing it started outlives the test.
    proc = subprocess.Popen(
        ["bash", "-c", script + "\nwait"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    assert '"run_id"' in out, (out, err)
    assert "curl: (7)" not in err


def anchors_of(path: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub and mkdocs make them."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    titles = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def test_the_readme_links_resolve() -> None:
    """Every relative link of the README names a file that exists (and a heading in it).

    The docs' own links are checked by ``mkdocs build --strict``; the README is not part
    of the site, so this checks it, for GitHub's sake.
    """
    readme = ROOT / "README.md"
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        file, _, anchor = target.partition("#")
        path = ROOT / file if file else readme
        if not path.exists() or (anchor and anchor not in anchors_of(path)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("block", DISTINCT, ids=[block.where for block in DISTINCT])
def test_example_runs(
    block: Block,
    backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    """The block runs as written (files go to a temp dir), on each backend; a fragment compiles.

    An example starts its event loop with ``anyio.run(main)`` (some name a backend): here
    ``anyio.run`` runs it on ``backend``, so every example is shown to work on both.
    """
    if block.mark == "fragment":
        if backend == "trio":
            pytest.skip("a fragment is only compiled, once")
        compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return
    if block.mark == "needs postgres":
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("pg_dsn"))
        monkeypatch.setenv("TETHER_SCHEMA", request.getfixturevalue("pg_schema"))
    elif block.mark == "needs ray" and not os.environ.get("RAY_ADDRESS"):
        pytest.skip("needs a running Ray cluster: set RAY_ADDRESS to run this example")
    monkeypatch.chdir(tmp_path)
    real_run, this_backend = anyio.run, backend

    def run_here(func: Any, *args: Any, backend: object = None, **kwargs: Any) -> Any:
        """``anyio.run`` on this test's backend, whichever the example names."""
        return real_run(func, *args, backend=this_backend, **kwargs)

    monkeypatch.setattr(anyio, "run", run_here)
    # dont_inherit: the block runs as written, without this file's `from __future__` import
    # (postponed annotations would change what a Pydantic model resolves, and where).
    code = compile(block.code, block.where, "exec", dont_inherit=True)
    exec(code, {"__name__": "docs_example"})
