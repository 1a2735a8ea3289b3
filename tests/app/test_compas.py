"""replay on ProPublica's COMPAS data (shipped in examples/compas/) equals an independent
pandas recount."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from monitor.cli import main
from tests.conftest import COMPAS_CSV, ROOT


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    assert COMPAS_CSV.exists(), f"{COMPAS_CSV} is shipped with the example"
    out = tmp_path_factory.mktemp("compas") / "report.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(
            [
                "replay",
                "-c",
                str(ROOT / "examples/compas/config.yaml"),
                "--csv",
                str(COMPAS_CSV),
                "--csv-mapping",
                str(ROOT / "examples/compas/mapping.yaml"),
                "--format",
                "json",
            ]
        )
    assert rc == 0
    out.write_text(buf.getvalue())
    return json.loads(buf.getvalue())


def pandas_counts() -> pd.DataFrame:
    df = pd.read_csv(COMPAS_CSV)
    df = df[
        (df.days_b_screening_arrest <= 30)
        & (df.days_b_screening_arrest >= -30)
        & (df.is_recid != -1)
        & (df.c_charge_degree != "O")
        & (df.score_text != "N/A")
    ]
    df = df.assign(p=df.score_text.isin(["Medium", "High"]).astype(int), y=df.two_year_recid)
    return df


def test_filter_keeps_6172_rows(report: dict) -> None:
    assert len(pandas_counts()) == 6172
    assert report["counters"]["predictions"] == 6172
    assert report["counters"]["labels"] == 6172
    # every label arrived: none awaits one; all are kept until the TTL (de-duplication)
    assert report["counters"]["awaiting_label"] == 0
    assert report["counters"]["labelled_kept_until_ttl"] == 6172
    # the rows ProPublica's filter leaves out are reported (an audit says what it did not see)
    assert report["csv_rows_excluded"] == len(pd.read_csv(COMPAS_CSV)) - 6172 == 1042


def test_text_summary_names_what_the_join_holds() -> None:
    """``make compas``'s summary: the held predictions by what they wait for, apart from the
    event counts (it said "pending 6172" after every label had arrived)."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(
            ["replay", "-c", str(ROOT / "examples/compas/config.yaml"), "--csv", str(COMPAS_CSV),
             "--csv-mapping", str(ROOT / "examples/compas/mapping.yaml")]
        )  # fmt: skip
    assert rc == 0
    lines = buf.getvalue().splitlines()
    events = next(line for line in lines if line.startswith("events: "))
    assert "predictions 6172, labels 6172" in events
    assert "pending" not in events.replace("_pending", "") and "awaiting" not in events
    assert (
        "join holds: 0 predictions awaiting their label; 6172 labelled predictions kept until "
        "their TTL, to recognise a repeated prediction or label"
    ) in lines


@pytest.mark.parametrize("attribute", ["race", "sex"])
def test_confusion_counts_per_group(report: dict, attribute: str) -> None:
    df = pandas_counts()
    groups = report["models"]["compas"]["windows"]["all"]["attributes"][attribute]["groups"]
    expected = {}
    for g, sub in df.groupby(attribute):
        expected[g] = {
            "n": len(sub),
            "favourable": int((sub.p == 0).sum()),  # low risk is the favourable outcome
            "tp": int(((sub.p == 1) & (sub.y == 1)).sum()),
            "fp": int(((sub.p == 1) & (sub.y == 0)).sum()),
            "fn": int(((sub.p == 0) & (sub.y == 1)).sum()),
            "tn": int(((sub.p == 0) & (sub.y == 0)).sum()),
        }
    got = {
        g: {k: r[k] for k in ("n", "favourable", "tp", "fp", "fn", "tn")} for g, r in groups.items()
    }
    assert got == expected


def test_black_defendants_fpr_twice_white(report: dict) -> None:
    """ProPublica's headline finding, on this filter: FPR 0.423 vs 0.220."""
    g = report["models"]["compas"]["windows"]["all"]["attributes"]["race"]["groups"]
    df = pandas_counts()
    for race in ("African-American", "Caucasian"):
        sub = df[(df.race == race) & (df.y == 0)]
        assert g[race]["fpr"] == pytest.approx((sub.p == 1).mean())
    assert g["African-American"]["fpr"] / g["Caucasian"]["fpr"] > 1.9


def test_the_html_audit_report_shows_the_rows_the_filter_left_out(tmp_path: Path) -> None:
    """Found by a review: the HTML report showed nowhere (but in its embedded JSON) that the
    mapping's ``where`` left 1,042 of 7,214 cases out; the text table did."""
    import re

    out = tmp_path / "audit.html"
    rc = main(["report", "-c", str(ROOT / "examples/compas/config.yaml"), "--csv",
               str(COMPAS_CSV), "--csv-mapping", str(ROOT / "examples/compas/mapping.yaml"),
               "-o", str(out)])  # fmt: skip
    assert rc == 0
    visible = out.read_text().split('<script type="application/json"', 1)[0]
    row = re.search(r'<th scope="row">csv_rows_left_out_by_where</th><td[^>]*>([^<]+)<', visible)
    assert row is not None and row.group(1).replace(",", "").strip() == str(7214 - 6172)


def test_the_report_says_the_alerts_judged_none_of_the_outcomes(report: dict) -> None:
    """Found by a review: COMPAS's outcomes come two years after the last screening, after
    every boundary the predictions close, so no alert rule judged a label; the report said
    nothing of it ("No alert fired" beside a significant equalized-odds gap)."""
    (warning,) = [w for w in report["warnings"] if "judged them" in w]
    assert warning.startswith("model compas: 6,172 of its 6,172 labels (100%) came after 2014-")
    assert report["counters"]["labels"] == 6172
