"""A headless Chromium page for browser tests: Debian's ``chromium`` driven by
Playwright's Python package through ``executable_path`` (no browser download).

Outside CI a machine without Chromium skips these tests, saying so; under CI
(``CI`` set) a missing Chromium fails them, since ``.ci/run`` installs it.
Browser tests are plain (synchronous) tests: the server under test runs in a
thread of its own (``serve_asgi``) and Playwright's sync API drives the page.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: Screenshots the browser tests write, kept by CI as artifacts.
ARTIFACTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"


def chromium_path() -> str:
    """The Chromium executable, or a skip (a failure under CI) saying why."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    why = "no Chromium on PATH (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
def page() -> Iterator[Any]:
    """A fresh page, 1280x800, in a headless Chromium of its own."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium_path()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            yield context.new_page()
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_asgi(app: Any, *, backend: str = "asyncio") -> Iterator[str]:
    """Serve an ASGI app on 127.0.0.1 in a thread (uvicorn on asyncio, hypercorn
    on trio); yield its base URL; shut it down on exit. The app's lifespan runs,
    so an app that starts its Runtime in its lifespan works as deployed."""
    port = free_port()
    if backend == "asyncio":
        import uvicorn

        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        stop = lambda: setattr(server, "should_exit", True)  # noqa: E731
    else:
        import trio
        from hypercorn.config import Config
        from hypercorn.trio import serve

        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.loglevel = "WARNING"
        started = threading.Event()
        loop: dict[str, Any] = {}

        async def main() -> None:
            loop["done"] = trio.Event()
            loop["token"] = trio.lowlevel.current_trio_token()
            started.set()
            await serve(app, config, shutdown_trigger=loop["done"].wait)

        thread = threading.Thread(target=trio.run, args=(main,), daemon=True)

        def stop() -> None:
            started.wait(20)
            trio.from_thread.run_sync(loop["done"].set, trio_token=loop["token"])

    thread.start()
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"the server did not start on port {port}") from None
            time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop()
        thread.join(20)
