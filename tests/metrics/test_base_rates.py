"""Seed 000's worked example (two groups of 1,000 applicants, base rates 20 % and 30 %, TPR 0.90
for both): the Chouldechova identity and the FPR that predictive parity plus equal TPR force,
from the pure function and through ``replay`` and the audit report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from monitor.cli import main
from monitor.metrics.base_rates import identity_fpr, tradeoff

# seed 000: (TP, FP, FN, TN) of groups A and B
CELLS = {"A": (180, 120, 20, 680), "B": (270, 130, 30, 570)}


def test_the_identity_gives_each_groups_fpr_and_the_forced_gap() -> None:
    b = np.array([0.2, 0.3])
    ppv = np.array([180 / 300, 270 / 400])  # 0.60, 0.675 (seed 000, step 3)
    tpr = np.array([0.9, 0.9])
    assert identity_fpr(b, ppv, tpr) == pytest.approx([120 / 800, 130 / 700], rel=1e-12)
    t = tradeoff(b, ppv, tpr, 0, np.array([True, True]))
    # with A's precision 0.60 and TPR 0.90, B's FPR would be 0.3/0.7 · 0.4/0.6 · 0.9 = 9/35
    assert t.fpr_at_reference_ppv_tpr == pytest.approx([0.15, 9 / 35], rel=1e-12)
    assert t.forced_fpr_gap == pytest.approx(9 / 35 - 0.15, rel=1e-12)
    assert t.applies
    same = tradeoff(np.array([0.2, 0.2]), ppv, tpr, 0, np.array([True, True]))
    assert not same.applies and same.forced_fpr_gap == pytest.approx(0.0, abs=1e-15)


@pytest.fixture(scope="module")
def seed_000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("seed000")
    rows = ["id,t,p,y,group"]
    i = 0
    for group, (tp, fp, fn, tn) in CELLS.items():
        for p, y, k in ((1, 1, tp), (1, 0, fp), (0, 1, fn), (0, 0, tn)):
            for _ in range(k):
                i += 1
                rows.append(f"{group}{i},{1_700_000_000 + i},{p},{y},{group}")
    (d / "data.csv").write_text("\n".join(rows) + "\n")
    (d / "mapping.yaml").write_text(
        "model: loans\nid: id\ntimestamp: t\nprediction: p\nlabel: y\nlabel_delay: 1s\n"
        "attributes: {group: group}\n"
    )
    (d / "config.yaml").write_text(
        "models:\n  loans:\n    favourable: 0\n    attributes: {group: {}}\n"
        "    reference_groups: {group: A}\n    bucket: 1d\n"
        "    windows: [{name: all, length: 100d}]\n    lateness: 0s\n    join: {ttl: 10d}\n"
    )
    return d


def _args(d: Path) -> list[str]:
    return ["-c", str(d / "config.yaml"), "--csv", str(d / "data.csv"),
            "--csv-mapping", str(d / "mapping.yaml")]  # fmt: skip


def test_replay_and_the_audit_report_show_the_tradeoff(
    seed_000: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", *_args(seed_000), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    t = rep["models"]["loans"]["windows"]["all"]["attributes"]["group"]["base_rate_tradeoff"]
    assert t["reference_group"] == "A" and t["applies"]
    b = t["groups"]["B"]
    assert (b["base_rate"], b["ppv"], b["tpr"]) == pytest.approx((0.3, 0.675, 0.9), rel=1e-12)
    assert b["fpr"] == pytest.approx(130 / 700, rel=1e-12)
    assert b["fpr_identity"] == pytest.approx(130 / 700, rel=1e-12)
    assert b["fpr_at_reference_ppv_tpr"] == pytest.approx(9 / 35, rel=1e-12)
    out = tmp_path / "audit.html"
    assert main(["report", *_args(seed_000), "--out", str(out)]) == 0
    html = out.read_text()
    table = html.split('data-attribute="group" data-kind="tradeoff">')[1].split("</table>")[0]
    assert "Chouldechova" in table and 'data-group="B"' in table
