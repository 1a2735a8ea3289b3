"""The status page in a real browser (Debian's chromium) on the feedback-loop demo's counts:
only approved applicants get an outcome, so TPR = FPR = 1.000 for everyone and the
equalized-odds difference would read a green 0.000. The page must say "blind: selective
labels" there instead, in no green; on a fair stream with outcomes for everyone, the same
cells show their numbers (so a page that says "blind" everywhere fails too).

The counts are the simulator's events through the engine (no broker: the full demo run with a
browser is ``tests/app/test_demo.py``); the page is served by the monitor's own HTTP server.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.app.demo import demo_config_text
from monitor.app.simulate import LendingSimulation, iter_hours, scenario
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import RawRecord
from monitor.outputs.http import HttpServer
from monitor.outputs.status import StatusEndpoint, StatusState, page_html
from monitor.state.engine import Engine
from tests.conftest import require
from tests.helpers import T0, run

GREEN = "rgb(27, 110, 58)"  # --ok on the page
BLIND = "blind: selective labels"


def demo_config() -> Config:
    import yaml

    return parse_config(yaml.safe_load(demo_config_text()))


def state(cfg: Config, name: str, hours: float = 14) -> StatusState:
    sim = LendingSimulation(scenario(name), seed=5, start=T0)
    preds: list[RawRecord] = []
    labels: list[RawRecord] = []
    for b in iter_hours(sim, hours):
        preds += [RawRecord(v) for _, v in b.predictions]
        labels += [RawRecord(v) for _, v in b.labels]
    engine = Engine(cfg, clock=lambda: T0 + hours * 3600)
    run(engine, preds, labels)
    return StatusState(engine.snapshot(), {}, [], [])


@pytest.fixture(scope="module")
def browser() -> Any:
    chromium = shutil.which("chromium")
    require(chromium is not None, "Debian's chromium for the status-page test")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield b
        b.close()


def test_blind_metrics_read_blind_not_a_green_number(browser: Any) -> None:
    cfg = demo_config()
    states = {s: state(cfg, s) for s in ("feedback-loop", "fair")}
    current = ["feedback-loop"]
    endpoint = StatusEndpoint(
        lambda: states[current[0]], confidence=cfg.confidence, rules=cfg.alerts.rules
    )
    server = HttpServer(
        "127.0.0.1",
        0,
        live=lambda: (True, ""),
        ready=lambda: (True, ""),
        registry=CollectorRegistry(),
        pages={"/": lambda: (page_html(), "text/html; charset=utf-8"), "/api/status": endpoint},
    )
    server.start()
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{server.port}/")
        page.wait_for_selector('article[data-window="12h"][data-attribute="group"]')

        def color(loc: Any) -> str:
            return str(loc.evaluate("e => getComputedStyle(e).color"))

        cards = page.locator("article").all()
        assert len(cards) == 2 * 3  # the 3h and 12h windows × 3 attribute sets
        blind_cells = 0
        for card in cards:
            for key in ("eod", "tpr_gap", "fpr_gap"):
                cell = card.locator(f'dd[data-metric="{key}"]')
                assert cell.inner_text() == BLIND, key
                assert "fine" not in (cell.get_attribute("class") or "")
                assert color(cell) != GREEN
                assert cell.get_attribute("data-blind") == (
                    "selective labels: only decisions with prediction 1 are labelled"
                )
                blind_cells += 1
            for td in card.locator('td[data-metric="tpr"], td[data-metric="fpr"]').all():
                assert td.inner_text() == BLIND and color(td) != GREEN
                blind_cells += 1
            # the DIR needs no label: still a number
            dir_cell = card.locator('dd[data-metric="dir"]')
            assert dir_cell.inner_text()[0].isdigit()
            assert card.locator('[data-note="selective-labels"]').count() == 1
        assert blind_cells == 2 * (3 * 3 + 2 * (2 + 2 + 4))
        # no green number anywhere among the error-rate metrics
        greens = page.locator(".fine").all()
        assert all(g.get_attribute("data-metric") == "dir" for g in greens)

        # a fair stream with outcomes for everyone: the same cells show numbers
        current[0] = "fair"
        page.reload()
        page.wait_for_selector('article[data-window="12h"][data-attribute="group"]')
        assert page.locator(".blind").count() == 0
        for cell in page.locator('dd[data-metric="eod"]').all():
            text = cell.inner_text()
            assert text[0].isdigit() and "[" in text, text
        assert BLIND not in page.locator("body").inner_text()
        page.close()
    finally:
        server.stop()
    assert errors == []
