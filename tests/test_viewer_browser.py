"""The run viewer in a real browser (headless Chromium): the list and its filters, a
run's page, a live run, approve, cancel, and an action refused without a token
(docs/guides/viewer.md). Screenshots go to build/screenshots/; with
TETHER_UPDATE_DOCS_SHOTS=1 the run page's is also copied to docs/images/viewer-run.png."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether import web

from .browser import ARTIFACTS, serve_asgi
from .browser import page as page
from .viewer_agents import GATES, asker, calc, fill, gated

TOKEN = "s3cret-viewer-token"
DOCS_SHOT = Path(__file__).resolve().parent.parent / "docs" / "images" / "viewer-run.png"


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run store filled by real runs (answered, max_steps, one parked)."""
    path = tmp_path_factory.mktemp("viewer") / "runs.db"
    anyio.run(fill, path)
    return path


@pytest.fixture
def store_copy(filled: Path, tmp_path: Path) -> Path:
    """A copy of the filled store for one test (its actions change it)."""
    target = tmp_path / "runs.db"
    for suffix in ("", "-wal", "-shm"):  # fill() closes the store: no WAL is left, normally
        source = filled.with_name(filled.name + suffix)
        if source.exists():
            shutil.copy(source, target.with_name(target.name + suffix))
    return target


class Hosted:
    """An ASGI app that, in its lifespan, runs a Runtime on the store (as a service
    would) and serves the viewer with it; ``start`` names runs to start then."""

    def __init__(self, path: Path, start: dict[str, str] | None = None) -> None:
        self.path = path
        self.start = start or {}
        self.viewer: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.viewer(scope, receive, send)
            return
        async with AsyncExitStack() as stack:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    store = tether.SQLiteRunStore(self.path)
                    rt = await stack.enter_async_context(
                        tether.Runtime(store=store, agents=[asker(), gated()])
                    )
                    for run_id, key in self.start.items():
                        GATES.setdefault(key, threading.Event())
                        await rt.submit(gated(), key, run_id=run_id)  # recorded on return
                    self.viewer = web.app(
                        store=store, runtime=rt, tokens={"tests": TOKEN}, agents=[calc()]
                    )
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    for gate in GATES.values():
                        gate.set()
                    break
        await send({"type": "lifespan.shutdown.complete"})


@pytest.fixture
def served(store_copy: Path) -> Iterator[str]:
    with serve_asgi(Hosted(store_copy)) as url:
        yield url


def shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=False)
    return path


def use_token(page: Any) -> None:
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Use").click()
    page.get_by_role("status").get_by_text("Token set.").wait_for()


def test_the_list_shows_the_runs_and_its_filters_work(served: str, page: Any) -> None:
    """Every stored run is listed with its columns; agent, status and termination filter."""
    page.goto(served + "/")
    rows = page.locator("table.runs tbody tr")
    assert rows.count() == 5
    assert page.get_by_role("main").is_visible()
    calc_row = page.locator('tr[data-run="calc-0"]')
    assert "answered" in calc_row.inner_text()
    assert "$" in calc_row.inner_text()  # priced
    shot(page, "viewer-list.png")
    # A linked column sorts every run in the store: by tokens, down, then up.
    page.get_by_role("link", name="Tokens").click()
    page.wait_for_url("**sort=tokens**")
    tokens = [int(r.get_attribute("data-tokens") or -1) for r in rows.all()]
    assert tokens == sorted(tokens, reverse=True)
    assert page.locator('th[aria-sort="descending"]').inner_text().startswith("Tokens")
    page.get_by_role("link", name="Tokens").click()
    page.wait_for_url("**order=oldest**")
    assert [int(r.get_attribute("data-tokens") or -1) for r in rows.all()] == sorted(tokens)
    # A column button sorts the page shown: by agent.
    page.get_by_role("button", name="Agent").click()
    agents = [r.get_attribute("data-agent") or "" for r in rows.all()]
    assert agents == sorted(agents)
    page.goto(served + "/")
    page.get_by_label("Status").select_option("parked")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**status=parked**")
    assert [r.get_attribute("data-run") for r in rows.all()] == ["ask-0"]
    page.goto(served + "/")
    page.get_by_label("Termination").select_option("max_steps")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**termination=max_steps**")
    assert [r.get_attribute("data-run") for r in rows.all()] == ["loop-0"]
    page.goto(served + "/?agent=calc&order=oldest")
    assert [r.get_attribute("data-run") for r in rows.all()] == ["calc-0", "calc-1", "calc-2"]
    # Keyboard: the run links are reachable and open the run.
    page.locator('tr[data-run="calc-0"] a').focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/runs/calc-0")


def test_a_run_page_shows_every_round_tool_call_and_judgement(served: str, page: Any) -> None:
    """Rounds, the model responses, the tool call with arguments and result, the judgement."""
    page.goto(served + "/runs/calc-0")
    assert page.locator("section.round").count() == 3  # setup, round 1, round 2
    tool = page.locator("li.ev.tool")
    assert tool.count() == 1
    assert '"a": 2' in tool.inner_text()
    assert "ok" in tool.inner_text()
    judged = page.locator("li.ev.judged")
    assert "passed" in judged.inner_text()
    assert "mentions_sum" in judged.inner_text()
    assert "1.00" in judged.inner_text()
    assert page.locator("li.ev.model").count() == 2
    assert page.locator(".waterfall").count() >= 2
    assert "The sum is 5." in page.get_by_role("main").inner_text()
    shot(page, "viewer-run.png")
    # The docs' picture: the rounds with the model calls, the tool call and the judgement.
    page.evaluate("document.getElementById('round-1').scrollIntoView()")
    rounds = shot(page, "viewer-run-rounds.png")
    if os.environ.get("TETHER_UPDATE_DOCS_SHOTS"):  # else the checkout would change each run
        shutil.copy(rounds, DOCS_SHOT)
    page.goto(served + "/runs/loop-0")
    assert "max_steps" in page.locator("li.ev.finish").inner_text()


def test_a_finished_run_replays_from_its_page(served: str, page: Any) -> None:
    """The Replay button re-runs the agent's code offline; the page says ``identical``."""
    page.goto(served + "/runs/calc-2")
    use_token(page)
    page.get_by_role("button", name="Replay this run").click()
    page.get_by_role("status").get_by_text("replay: identical").wait_for()


def test_an_action_without_a_token_is_refused(served: str, page: Any) -> None:
    """Approve with no token: 401 said on the page, and the run stays parked."""
    page.goto(served + "/runs/ask-0")
    page.get_by_role("button", name="Approve").click()
    page.get_by_role("status").get_by_text("refused (401)").wait_for()
    page.reload()
    assert page.locator("#run-status").inner_text() == "parked"


def test_approving_a_parked_call_resumes_the_run_to_answered(served: str, page: Any) -> None:
    """Approve from the page: the run resumes and ends answered, shown without a reload."""
    page.goto(served + "/runs/ask-0")
    use_token(page)
    page.evaluate("window.notReloaded = true")
    page.get_by_role("button", name="Approve").click()
    page.get_by_role("status").get_by_text("approve: done").wait_for()
    page.locator("li.ev.finish").get_by_text("answered").wait_for(timeout=20_000)
    assert page.evaluate("window.notReloaded") is True
    assert "bumped k" in page.locator("li.ev.tool").last.inner_text()


def test_a_live_run_updates_without_a_reload(page: Any, store_copy: Path) -> None:
    """A running run's page follows it over SSE: its end appears without a reload."""
    GATES.pop("live-gate", None)
    with serve_asgi(Hosted(store_copy, {"live-1": "live-gate"})) as url:
        page.goto(url + "/runs/live-1")
        # The Runtime serving the page runs it: the page shows its round in flight
        # (the store has it only from the round's end), its tool call held at the gate.
        assert page.locator("#run").get_attribute("data-live")
        assert page.locator("#run-status").inner_text() == "running"
        page.locator("li.ev.tool.running").wait_for(timeout=20_000)
        # Its agent's limits come from the Runtime that runs it: usage drawn as bars.
        assert page.get_by_role("meter", name="steps: 1 of 10").count() == 1
        page.evaluate("window.notReloaded = true")
        GATES["live-gate"].set()
        page.locator("li.ev.finish").get_by_text("answered").wait_for(timeout=20_000)
        assert page.evaluate("window.notReloaded") is True
        assert "gate live-gate opened" in page.locator("li.ev.tool").last.inner_text()


def test_cancel_from_the_page_ends_the_run_cancelled(page: Any, store_copy: Path) -> None:
    """Cancel with a token: the run ends cancelled with the reason given."""
    GATES.pop("never", None)
    with serve_asgi(Hosted(store_copy, {"stuck-1": "never"}), backend="trio") as url:
        page.goto(url + "/runs/stuck-1")
        assert page.locator("#run-status").inner_text() == "running"
        use_token(page)
        page.get_by_label("Reason", exact=True).fill("enough of that")
        page.get_by_role("button", name="Cancel run").click()
        page.locator("li.ev.finish").get_by_text("cancelled").wait_for(timeout=20_000)
        assert "enough of that" in page.locator("li.ev.finish").inner_text()


def test_the_run_page_works_on_a_phone(served: str, page: Any) -> None:
    """At 390 px wide nothing of the run page scrolls sideways."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(served + "/runs/calc-0")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390
    shot(page, "viewer-run-phone.png")
