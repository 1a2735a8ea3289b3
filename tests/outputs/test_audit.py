"""``fairness-monitor report``: the HTML audit report shows exactly the numbers of
``replay --format json`` (and of ``status`` for a checkpoint), and is self-contained."""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.app.demo import demo_config_text
from monitor.app.replay import replay as replay_events
from monitor.cli import main
from monitor.config.durations import iso_utc as iso
from monitor.config.spec import load_config
from monitor.ingest.events import RawRecord
from monitor.state.checkpoint import CheckpointStore, encode
from monitor.state.engine import Engine


class Tables(HTMLParser):
    """Collects every ``data-value`` cell: (kind, window, attribute, row, field) -> text."""

    def __init__(self) -> None:
        super().__init__()
        self.table: dict[str, str] = {}
        self.row = ""
        self.cells: dict[tuple[str, str, str, str, str], str] = {}
        self.urls: list[str] = []
        self.svgs = 0
        self.bounds: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for k in ("src", "href"):
            if k in a:
                self.urls.append(a[k])
        if tag == "svg":
            self.svgs += 1
        if "data-bound" in a:
            self.bounds.append(a["data-bound"])
        if tag == "table":
            self.table = a
        elif tag == "tr":
            self.row = a.get("data-group") or a.get("data-metric") or ""
        elif tag == "td" and "data-field" in a:
            t = self.table
            key = (
                t.get("data-kind", ""),
                t.get("data-window", ""),
                t.get("data-attribute", ""),
                self.row,
                a["data-field"],
            )
            self.cells[key] = a["data-value"]


def parse(path: Path) -> Tables:
    p = Tables()
    p.feed(path.read_text())
    return p


def as_value(text: str) -> Any:
    return None if text == "" else float(text)


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(list(args))
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("audit")
    config = tmp / "demo.yaml"
    config.write_text(demo_config_text(checkpoint=str(tmp / "cp.sqlite")))
    rc, _ = cli(
        "simulate", "--scenario", "feedback-loop", "--hours", "30", "--seed", "11",
        "--start", "1767225600", "--out", str(tmp),
    )  # fmt: skip
    assert rc == 0
    return tmp, config


def compare(tables: Tables, report: dict[str, Any]) -> int:
    """Every group number and every disparity of every window/attribute, exactly."""
    checked = 0
    for w, wrep in report["models"]["lending"]["windows"].items():
        for attr, a in wrep["attributes"].items():
            for g, row in a["groups"].items():
                for field in ("n", "favourable", "selection_rate", "tpr", "fpr", "ppv",
                              "labelled", "impact_ratio"):  # fmt: skip
                    got = as_value(tables.cells[("groups", w, attr, g, field)])
                    assert got == row[field], (w, attr, g, field)
                    checked += 1
            for metric in ("disparate_impact_ratio", "statistical_parity_difference",
                           "equalized_odds_difference", "tpr_gap", "fpr_gap", "ppv_gap"):  # fmt: skip
                for field in ("value", "lower", "upper"):
                    got = as_value(tables.cells[("disparities", w, attr, metric, field)])
                    assert got == a[metric][field], (w, attr, metric, field)
                    checked += 1
            eps = tables.cells[("disparities", w, attr, "differential_fairness_epsilon", "value")]
            assert as_value(eps) == a["differential_fairness_epsilon"]
    for k, v in report["counters"].items():
        assert as_value(tables.cells[("counters", "", "", "", k)]) == v
    return checked


def test_report_numbers_equal_replay_json(sim: tuple[Path, Path]) -> None:
    tmp, config = sim
    inputs = ["-c", str(config), "-p", str(tmp / "predictions.jsonl"),
              "-l", str(tmp / "labels.jsonl")]  # fmt: skip
    rc, out = cli("replay", *inputs, "--format", "json")
    assert rc == 0
    report = json.loads(out)
    html_path = tmp / "audit.html"
    rc, _ = cli("report", *inputs, "--out", str(html_path))
    assert rc == 0
    tables = parse(html_path)
    checked = compare(tables, report)
    # 3 windows × (2 + 2 + 4 groups × 8 numbers + 3 × 19 disparity numbers)
    assert checked == 3 * (8 * 8 + 3 * 18)
    # the backtest's alerts are in the report, in the same order
    text = html_path.read_text()
    # selective labels (only approved applicants get an outcome): the error-rate metrics say
    # so in place of a number, in the JSON and in the HTML
    a = report["models"]["lending"]["windows"]["3h"]["attributes"]["group"]
    for metric in ("equalized_odds_difference", "tpr_gap", "fpr_gap"):
        assert a[metric]["value"] is None and a[metric]["blind"] == (
            "selective labels: only decisions with prediction 1 are labelled"
        )
        # it compares no pair either (it named "A vs A", a tie of made-up rates: a review)
        assert a[metric]["low_group"] is None and a[metric]["high_group"] is None
        cell = re.search(
            rf'data-window="3h" data-attribute="group" data-kind="disparities">.*?'
            rf'data-metric="{metric}"><th scope="row">[^<]*</th><td ([^>]*)>([^<]*)</td>',
            text,
            re.S,
        )
        assert cell is not None and cell.group(2) == "blind: selective labels", metric
        assert 'class="blind"' in cell.group(1)
    for g, row in a["groups"].items():
        assert row["tpr"] is None and row["fpr"] is None and set(row["blind"]) >= {"tpr", "fpr"}
        assert row["ppv"] is not None and "ppv" not in row["blind"], g
    assert a["ppv_gap"]["blind"] is None and a["disparate_impact_ratio"]["blind"] is None
    blind_cells = re.findall(r'data-field="(tpr|fpr)" class="blind">blind: selective labels<', text)
    assert len(blind_cells) == 2 * 8 * 2  # TPR and FPR × 8 groups × the 2 windows with labels
    # a pair picked from many says so: its interval holds over all of them (Bonferroni)
    named = 0
    for w, wrep in report["models"]["lending"]["windows"].items():
        for attr, ar in wrep["attributes"].items():
            for metric in ("disparate_impact_ratio", "statistical_parity_difference"):
                d = ar[metric]
                if d["low_group"] is None:
                    continue
                of = f" (most extreme of {d['pairs']} pairs)" if d["pairs"] > 1 else ""
                cell = f"<td>{html.escape(d['low_group'] + ' vs ' + d['high_group'] + of)}</td>"
                assert cell in text, (w, attr, metric, cell)
                named += d["pairs"] > 1
    assert named >= 2  # the 4-group attribute, in each window with data
    fired = re.findall(r'data-alert="(\w+)" data-state="firing"', text)
    assert fired == [a["name"] for a in report["alerts"] if a["state"] == "firing"]
    assert "FourFifthsRule" in fired and "FairnessDrift" in fired
    # the intervals it names are the ones computed (the registry's: MOVER-R for the DIR)
    assert "MOVER-R with Wilson limits" in text and "Katz" not in text
    # self-contained: no fetched resource; plots embedded, with the 0.8 line
    assert tables.urls == []
    assert not re.search(r"url\(|@import|<script[^>]+src=|<link", text)
    assert tables.svgs == 2 * 3 * 2  # 2 plots × 3 attributes × the 2 windows with data
    assert "0.8" in tables.bounds
    # the embedded data is the replay's report
    data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    assert data is not None
    embedded = json.loads(data.group(1).replace("<\\/", "</"))
    assert embedded["models"] == report["models"]


def test_report_from_checkpoint_equals_status(sim: tuple[Path, Path]) -> None:
    """A checkpoint written as the service writes it: report == status --format json."""
    tmp, config = sim
    cfg = load_config(str(config))
    engine = Engine(cfg)
    preds = [RawRecord(line) for line in (tmp / "predictions.jsonl").read_bytes().splitlines()]
    labels = [RawRecord(line) for line in (tmp / "labels.jsonl").read_bytes().splitlines()]
    replay_events(engine, preds, labels, batch_size=5000)
    cp = tmp / "checkpoint.sqlite"
    store = CheckpointStore(str(cp))
    store.save([(0, {"lending-predictions": 1}, encode(*engine.export_partition(0)))])
    store.close()
    rc, out = cli("status", "-c", str(config), "--checkpoint", str(cp), "--format", "json")
    assert rc == 0
    status = json.loads(out)
    html_path = tmp / "from-checkpoint.html"
    rc, _ = cli("report", "-c", str(config), "--checkpoint", str(cp), "--out", str(html_path))
    assert rc == 0
    tables = parse(html_path)
    assert compare(tables, status) > 300
    assert tables.svgs == 2 * 3 * 2  # history re-evaluated over the retained span


def test_a_firing_alert_from_a_checkpoint_says_when_its_numbers_are_from(
    sim: tuple[Path, Path],
) -> None:
    """Found by a review: ``report --checkpoint`` printed "FourFifthsRule firing at <the time
    it fired>" beside the numbers of the last boundary judged, hours later. A firing alert
    read from a checkpoint says both: when it fired, and when its numbers are from."""
    tmp, config = sim
    cfg = load_config(str(config))
    engine = Engine(cfg)
    evaluator = AlertEvaluator(cfg, engine)
    preds = [RawRecord(line) for line in (tmp / "predictions.jsonl").read_bytes().splitlines()]
    labels = [RawRecord(line) for line in (tmp / "labels.jsonl").read_bytes().splitlines()]
    replay_events(engine, preds, labels, batch_size=5000, evaluator=evaluator)
    firing = [a for a in evaluator.book.firing() if a.name == "FourFifthsRule"]
    assert firing, [t.alert.name for t in evaluator.history]
    judged = max(evaluator.last.values()) * cfg.models["lending"].bucket
    assert all(a.at < judged for a in firing)  # fired before the last boundary judged
    cp = tmp / "alerts-checkpoint.sqlite"
    store = CheckpointStore(str(cp))
    store.save(
        [(0, {"lending-predictions": 1}, encode(*engine.export_partition(0)))],
        alerts=persist.dumps(evaluator),
    )
    store.close()
    html_path = tmp / "alerts-from-checkpoint.html"
    rc, _ = cli("report", "-c", str(config), "--checkpoint", str(cp), "--out", str(html_path))
    assert rc == 0
    text = html.unescape(html_path.read_text())
    for a in firing:
        line = f"FourFifthsRule</strong> firing at {iso(a.at)}; numbers as of {iso(judged)} "
        assert line in text, text[text.find("<h2>Alerts") :][:2000]


def test_report_needs_an_input(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(demo_config_text())
    with contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(["report", "-c", str(config), "--out", str(tmp_path / "x.html")])
    assert rc == 2
    assert "give --predictions FILE or --csv FILE" in err.getvalue()


def test_a_mistyped_checkpoint_path_is_an_error_not_an_empty_report(tmp_path: Path) -> None:
    """Found in review: ``report --checkpoint`` (and ``status``) on a path with no file wrote
    an HTML report of nothing ("No alert fired") and created an empty 262 KB checkpoint there.
    Reading never creates: one line naming the path, exit 2, no file."""
    config = tmp_path / "c.yaml"
    config.write_text(demo_config_text())
    missing = tmp_path / "nonexist.sqlite"
    for command in (["report", "--out", str(tmp_path / "x.html")], ["status"]):
        with contextlib.redirect_stderr(io.StringIO()) as err:
            rc = main([command[0], "-c", str(config), "--checkpoint", str(missing), *command[1:]])
        assert rc == 2 and f"no checkpoint file at {missing}" in err.getvalue()
        assert not missing.exists() and not (tmp_path / "x.html").exists()
