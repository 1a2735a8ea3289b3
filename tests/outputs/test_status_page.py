"""The status page in a real browser (Debian's chromium) on the feedback-loop demo's counts:
only approved applicants get an outcome, so TPR = FPR = 1.000 for everyone and the
equalized-odds difference would read a green 0.000. The page must say "blind: selective
labels" there instead, in no green; on a fair stream with outcomes for everyone, the same
cells show their numbers (so a page that says "blind" everywhere fails too).

The counts are the simulator's events through the engine (no broker: the full demo run with a
browser is ``tests/app/test_demo.py``); the page is served by the monitor's own HTTP server.
"""

from __future__ import annotations

import math
import shutil
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.app.demo import demo_config_text
from monitor.app.simulate import LendingSimulation, iter_hours, scenario
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import RawRecord
from monitor.outputs.http import HttpServer
from monitor.outputs.status import StatusEndpoint, StatusState, page_html, status_json
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


def page_server(endpoint: StatusEndpoint) -> HttpServer:
    """The monitor's own HTTP server with the page and its ``/api/status``, started."""
    server = HttpServer(
        "127.0.0.1",
        0,
        live=lambda: (True, ""),
        ready=lambda: (True, ""),
        registry=CollectorRegistry(),
        pages={"/": lambda: (page_html(), "text/html; charset=utf-8"), "/api/status": endpoint},
    )
    server.start()
    return server


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
    server = page_server(endpoint)
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


def test_a_metric_without_a_value_reads_insufficient_data_not_a_green_dash(browser: Any) -> None:
    """Found by a review: before any outcome arrives the error-rate gaps have no value (not
    blind: nothing is labelled yet), and the page showed them as a green "– [–, –]"."""
    cfg = demo_config()
    sim = LendingSimulation(scenario("fair"), seed=5, start=T0)
    preds = [RawRecord(v) for b in iter_hours(sim, 6) for _, v in b.predictions]
    engine = Engine(cfg, clock=lambda: T0 + 6 * 3600)
    run(engine, preds, [])  # predictions only: no outcome yet
    snap = StatusState(engine.snapshot(), {}, [], [])
    endpoint = StatusEndpoint(lambda: snap, confidence=cfg.confidence, rules=cfg.alerts.rules)
    server = page_server(endpoint)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(f"http://127.0.0.1:{server.port}/")
        page.wait_for_selector('article[data-window="3h"][data-attribute="group"]')
        cells = page.locator('dd[data-metric="eod"], dd[data-metric="tpr_gap"], '
                             'dd[data-metric="fpr_gap"]').all()  # fmt: skip
        assert len(cells) == 3 * len(page.locator("article").all()) > 0
        for cell in cells:
            assert cell.inner_text() == "insufficient data"
            assert "fine" not in (cell.get_attribute("class") or "")
            assert cell.evaluate("e => getComputedStyle(e).color") != GREEN
        dirs = page.locator('dd[data-metric="dir"]').all()
        assert dirs and all(d.inner_text()[0].isdigit() for d in dirs)  # no label needed
        page.close()
    finally:
        server.stop()


# -- the evidence detectors' rows --------------------------------------------------------------
def evidence_state() -> StatusState:
    """Two groups (1,200 and 40 decisions/h, rate 0.5) for 16 h through the engine and the
    alert evaluator, outcomes 1–6 h late and only for approvals: the selection-rate and
    four-fifths detectors watch, the TPR/FPR/equalized-odds ones are blind."""
    import numpy as np

    from tests.alerts.test_evidence import drive, events

    preds, labs = events(16 * 60, lambda m: 0.5, labels=True, seed=4)
    approved = np.isin(labs["key"], preds["key"][preds["pred"] == 1])
    ev = drive(preds, {k: v[approved] for k, v in labs.items()}, cut_minutes=30)
    return StatusState(ev.engine.snapshot(), {}, [], [], tuple(ev.evidence.snapshot()))


def test_status_json_carries_the_evidence_rows_and_no_number_for_blind_ones() -> None:
    import json

    st = evidence_state()
    doc = status_json(st, confidence=0.95, rules=(), now=T0)
    json.dumps(doc, allow_nan=False)  # what /api/status sends: no inf/nan
    got = doc["evidence"]
    assert [(r["group"], r["detector"], r["state"]) for r in got] == [
        (r.group, r.detector, r.state) for r in st.evidence
    ]
    states = {(r.group, r.detector): r.state for r in st.evidence}
    assert states[("b", "selection_rate")] == "watching"
    assert states[("b", "four_fifths")] == "watching"
    assert states[("b", "equalized_odds")] == BLIND and states[("a", "tpr")] == BLIND
    for row, r in zip(got, st.evidence, strict=True):
        assert row["model"] == "credit" and row["attribute"] == "group"
        assert row["log_threshold"] == r.log_threshold > 0
        if r.state == BLIND:
            assert row["blind"] and row["log_e"] is None and row["expected_seconds"] is None
        else:
            assert not row["blind"]
            assert row["log_e"] == r.log_e and row["expected_seconds"] == r.expected_seconds
    # a blind detector cannot fire: it claims no time to detect at the source either
    assert all(math.isnan(r.expected_seconds) for r in st.evidence if r.state == BLIND)
    # the small group's silence is explained: it needs far longer to show the same drop
    exp = {r["group"]: r["expected_seconds"] for r in got if r["detector"] == "selection_rate"}
    print({g: round(s / 3600, 2) for g, s in exp.items()}, "hours to detect a 0.8x drop")
    assert exp["b"] > 10 * exp["a"]


def test_evidence_table_shows_the_snapshot_and_blind_rows_read_blind(browser: Any) -> None:
    st = evidence_state()
    endpoint = StatusEndpoint(lambda: st, confidence=0.95, rules=())
    server = page_server(endpoint)
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{server.port}/")
        page.wait_for_selector('article[data-evidence][data-model="credit"]')
        card = page.locator('article[data-evidence][data-attribute="group"]')
        shown = card.locator("tbody tr").all()
        assert len(shown) == len(st.evidence) == 8
        for tr, r in zip(shown, st.evidence, strict=True):
            assert tr.get_attribute("data-group") == r.group
            assert tr.get_attribute("data-detector") == r.detector
            ev, state, exp = (
                tr.locator(f'td[data-field="{f}"]') for f in ("evidence", "state", "expected")
            )
            assert state.inner_text() == r.state
            if r.state == BLIND:
                for cell in (ev, state, exp):
                    text = cell.inner_text()
                    assert text == BLIND and not any(c.isdigit() for c in text), text
                    assert cell.evaluate("e => getComputedStyle(e).color") != GREEN
                assert tr.locator(".meter").count() == 0
            else:
                assert ev.inner_text().strip() == f"{r.log_e:.1f} / {r.log_threshold:.1f}"
                h = r.expected_seconds / 3600
                want = (
                    f"~{round(r.expected_seconds / 60)} min"
                    if h < 1
                    else (f"~{h:.1f} h" if h < 10 else f"~{round(h)} h")
                )
                assert exp.inner_text() == want, (exp.inner_text(), r)
                width = tr.locator(".meter > span").evaluate("e => e.style.width")
                frac = min(1.0, max(0.0, r.log_e / r.log_threshold))
                assert abs(float(width.rstrip("%")) - frac * 100) <= 0.05, (width, r)
        b = card.locator('tr[data-group="b"][data-detector="selection_rate"]')
        print("small group:", b.inner_text())
        assert " h" in b.locator('td[data-field="expected"]').inner_text()
        assert "a change worth a page (a rate to 0.8×" in card.inner_text()
        page.close()
    finally:
        server.stop()
    assert errors == []


def test_updated_is_when_the_loop_published_the_state_not_when_it_was_first_viewed() -> None:
    """Found by a review: ``generated_at`` was stamped when a state was first rendered, so the
    first look at a stalled loop's old state read "Updated" just now. A state carries the time
    the loop published it; the clock only stands in for a state without one."""
    import json

    clock = [5_000.0]
    published = [StatusState(None, {}, [], [], published_at=1_000.0)]
    endpoint = StatusEndpoint(
        lambda: published[0], confidence=0.95, rules=(), clock=lambda: clock[0]
    )
    assert json.loads(endpoint()[0])["generated_at"] == 1_000.0  # viewed 4,000 s later
    clock[0] = 9_000.0
    assert json.loads(endpoint()[0])["generated_at"] == 1_000.0  # still the same state
    published[0] = StatusState(None, {}, [], [])
    assert json.loads(endpoint()[0])["generated_at"] == 9_000.0


def test_each_card_is_coloured_by_the_rules_that_judge_it() -> None:
    """Found by a review: the page took the first rule per metric whatever its windows or
    attribute sets, and a rule on an alias (``equal_opportunity_difference``) did not bound
    the TPR-gap headline."""
    from monitor.config.rules import AlertRule

    cfg = demo_config()
    rules = [
        AlertRule("Dir12", "disparate_impact_ratio", "<", 0.9, windows=("12h",)),
        AlertRule("Opp", "equal_opportunity_difference", ">", 0.05),
    ]
    doc = status_json(state(cfg, "fair"), confidence=0.95, rules=rules, now=0.0)
    cards = {
        (w, attr): a["bounds"]
        for m in doc["models"].values()
        for w, win in m["windows"].items()
        for attr, a in win["attributes"].items()
    }
    assert cards[("12h", "group")]["disparate_impact_ratio"] == 0.9
    assert cards[("3h", "group")]["disparate_impact_ratio"] == 0.8  # the registry's default
    assert all(b["tpr_gap"] == 0.05 for b in cards.values())
    assert doc["bounds"]["tpr_gap"] == 0.05
