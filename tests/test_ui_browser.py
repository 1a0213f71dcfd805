"""The example chat pages (examples/ui/) in headless Chromium, against the AG-UI and
UI message stream endpoints of examples/ui_chat.py served on 127.0.0.1: the
answer's text appears in pieces, the tool call renders, and the approval button
resumes the run, which then answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("starlette")

from examples import ui_chat
from examples._service import demo_agent
from tests.browser import ARTIFACTS, serve_asgi
from tests.browser import page as page


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("protocol", ["ag-ui", "vercel-ai"])
def test_the_chat_page_streams_renders_a_tool_call_and_resumes_on_approval(
    page: Any, protocol: str, backend: str
) -> None:
    """Type, send: text streams into the page, the word_count call renders with its
    arguments, Approve resumes the same run and its answer appears."""
    agent = demo_agent("demo", latency_s=0.05, approval=True, chunk_latency_s=0.03)
    with serve_asgi(ui_chat.create_app(agent), backend=backend) as url:
        page.goto(f"{url}/{protocol}/")
        page.fill("#input", "count these four words")
        page.click("#send")
        first = page.locator(".message.assistant").first
        first.wait_for()
        page.wait_for_function(
            "document.querySelector('.message.assistant').textContent === 'Let me count the words.'"
        )
        assert int(first.get_attribute("data-updates")) > 1  # it grew piece by piece
        call = page.locator(".tool-call[data-tool='word_count']")
        page.locator(".approval button.approve").wait_for()  # the call is complete
        assert call.text_content().startswith("word_count(")
        assert '"count these four words"' in call.text_content()
        page.locator(".approval button.approve").click()
        page.wait_for_function("document.getElementById('status').textContent === 'done'")
        assert "4" in call.text_content()  # the tool's result, under its call
        answers = page.locator(".message.assistant").all_text_contents()
        assert answers[-1] == "Your input has 4 words."
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"ui-{protocol}-{backend}.png"))
        page.context.close()  # its keep-alive connections too: the server stops at once


def test_the_pages_load_nothing_from_the_web() -> None:
    """The example pages are self-contained: no script, style or font from elsewhere."""
    for name in ("ag_ui.html", "vercel_ai.html"):
        text = (Path(ui_chat.PAGES) / name).read_text()
        assert "http://" not in text
        assert "https://" not in text
        assert "<script src" not in text
