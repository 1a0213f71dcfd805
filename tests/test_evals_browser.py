"""The HTML report of ``tether eval`` in headless Chromium: it renders, a case drills down."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tether import cli

from .browser import ARTIFACTS

ROOT = Path(__file__).resolve().parent.parent
DATASET = str(ROOT / "examples" / "evals" / "capitals.jsonl")
AGENTS = str(ROOT / "examples" / "evals" / "capitals.py")


def test_the_html_report_renders_and_a_case_opens(page: Any, tmp_path: Path) -> None:
    """The page (loaded from a file: nothing else to fetch) shows 50 cases and the
    regressed ones; clicking a case opens its drill-down, with its output and scores."""
    v1, html = tmp_path / "v1.json", tmp_path / "v2.html"
    base = ["eval", DATASET, "--judge", "exact", "--plain"]
    codes: list[int] = []

    def evals() -> None:
        codes.append(cli.main([*base, "--agent", f"{AGENTS}:agent", "--out", str(v1)]))
        second = ["--agent", f"{AGENTS}:agent_v2", "--baseline", str(v1), "--html", str(html)]
        codes.append(cli.main([*base, *second]))

    # In a thread: Playwright's sync API holds an event loop in this one.
    thread = threading.Thread(target=evals)
    thread.start()
    thread.join(60)
    assert codes == [0, 0]
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(html.as_uri())
    assert page.title() == "tether eval: capitals-v2 on capitals"
    assert page.locator("tr.case").count() == 50
    assert page.locator("tr.case .badge", has_text="regressed").count() == 7
    detail = page.locator("#detail-2")  # australia, the third case
    assert detail.is_hidden()
    row = page.locator('tr.case[data-case="australia"]')
    row.click()
    assert detail.is_visible()
    assert row.get_attribute("aria-expanded") == "true"
    assert detail.locator("pre.output").first.inner_text() == "Sydney"
    assert "expected Canberra, got Sydney" in detail.inner_text()
    assert "pass rate 100.0% → 0.0%" in detail.inner_text()
    page.locator("#failed-only").check()
    assert page.locator("tr.case:visible").count() == 7
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "eval-report.png"), full_page=False)
    row.click()
    assert detail.is_hidden()
    assert errors == []
    assert requests == [html.as_uri()]
