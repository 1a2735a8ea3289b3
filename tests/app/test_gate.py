"""``fairness-monitor gate``: exit 1 on a significant breach (COMPAS, race: the four-fifths rule),
0 on a fair set, 2 on bad input; the JUnit XML validated against a JUnit schema.

The numbers are checked against independent computations: a pandas recount of COMPAS with
ProPublica's filter, Wilson limits from statsmodels and the MOVER-R ratio interval written out
here (Donner & Zou 2012), and synthetic sets whose rates are known by construction.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import xmlschema
import yaml
from statsmodels.stats.proportion import proportion_confint

from monitor.cli import main
from tests.app.test_compas import pandas_counts
from tests.conftest import COMPAS_CSV, ROOT

SCHEMA = Path(__file__).with_name("junit.xsd")
COMPAS_CONFIG = ROOT / "examples/compas/config.yaml"
COMPAS_MAPPING = ROOT / "examples/compas/mapping.yaml"
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(SCHEMA))


def gate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["gate", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def compas_config(tmp_path: Path, rules: list[dict[str, object]]) -> Path:
    """The example's config with these alert rules."""
    cfg = yaml.safe_load(COMPAS_CONFIG.read_text())
    cfg["alerts"] = {"rules": rules}
    path = tmp_path / "compas.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def compas_args(config: Path, junit: Path) -> list[str]:
    return ["-c", str(config), "--csv", str(COMPAS_CSV), "--csv-mapping", str(COMPAS_MAPPING),
            "--junit", str(junit)]  # fmt: skip


def mover_ratio(x1: int, n1: int, x2: int, n2: int, alpha: float = 0.05) -> tuple[float, float]:
    """MOVER-R interval of p1/p2 with Wilson limits (Donner & Zou 2012), from statsmodels'
    Wilson limits at level 1 − ``alpha``: the oracle for the gate's interval."""
    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = proportion_confint(x1, n1, alpha=alpha, method="wilson")
    l2, u2 = proportion_confint(x2, n2, alpha=alpha, method="wilson")
    pp = p1 * p2
    lo = (pp - math.sqrt(pp**2 - l1 * (2 * p1 - l1) * u2 * (2 * p2 - u2))) / (u2 * (2 * p2 - u2))
    hi = (pp + math.sqrt(pp**2 - u1 * (2 * p1 - u1) * l2 * (2 * p2 - l2))) / (l2 * (2 * p2 - l2))
    return lo, hi


def cases(junit: Path) -> dict[str, ET.Element]:
    return {c.attrib["name"]: c for c in ET.parse(junit).getroot().iter("testcase")}


def counts_agree(junit: Path) -> None:
    """The suites' counts are those of their testcases (a schema cannot say so)."""
    root = ET.parse(junit).getroot()
    suites = root.findall("testsuite")
    for s in suites:
        tcs = s.findall("testcase")
        assert int(s.attrib["tests"]) == len(tcs)
        assert int(s.attrib["failures"]) == sum(tc.find("failure") is not None for tc in tcs)
        assert int(s.attrib["skipped"]) == sum(tc.find("skipped") is not None for tc in tcs)
    assert int(root.attrib["tests"]) == sum(int(s.attrib["tests"]) for s in suites)
    assert int(root.attrib["failures"]) == sum(int(s.attrib["failures"]) for s in suites)


# -- COMPAS: a significant four-fifths breach on race ------------------------------------------


def test_compas_race_breaches_four_fifths_significantly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: xmlschema.XMLSchema
) -> None:
    """Favourable is the low-risk prediction (config.yaml: favourable 0): the low-risk rate of
    African-American defendants over Caucasian ones (the reference) is below 0.8, and so is the
    upper limit of its 95% interval."""
    config = compas_config(
        tmp_path,
        [{"name": "FourFifths", "metric": "disparate_impact_ratio", "bound": 0.8,
          "significant": True, "attributes": ["race"]}],
    )  # fmt: skip
    junit = tmp_path / "gate.xml"
    rc, out, _ = gate(capsys, *compas_args(config, junit))
    assert rc == 1

    df = pandas_counts()
    low_risk = {r: int((sub.p == 0).sum()) for r, sub in df.groupby("race")}
    n = {r: len(sub) for r, sub in df.groupby("race")}
    aa, cau = "African-American", "Caucasian"
    dir_ = (low_risk[aa] / n[aa]) / (low_risk[cau] / n[cau])
    # every other group with at least 30 has a higher low-risk rate than African-American
    rates = {r: low_risk[r] / n[r] for r in n if n[r] >= 30}
    assert min(rates, key=rates.__getitem__) == aa
    # the lowest of them against the configured reference: one of len(rates) - 1 pairs, so the
    # interval holds over all of them (Bonferroni: each at 1 - 0.05 / pairs)
    pairs = len(rates) - 1
    assert pairs > 1
    lo, hi = mover_ratio(low_risk[aa], n[aa], low_risk[cau], n[cau], alpha=0.05 / pairs)
    assert dir_ < hi < 0.8  # the breach is significant, independently of the gate

    schema.validate(str(junit))
    counts_agree(junit)
    tc = cases(junit)
    assert set(tc) == {"FourFifths [race]"}  # the rule applies to race only
    failure = tc["FourFifths [race]"].find("failure")
    assert failure is not None
    msg = failure.attrib["message"]
    assert msg == (
        f"disparate_impact_ratio {dir_:.3f}, 95% CI over {pairs} pairs [{lo:.3f}, {hi:.3f}] "
        "wholly below 0.8: "
        f"{aa} vs {cau}"
    )
    text = failure.text or ""
    judged, short = text.split("insufficient data (below min_samples, not judged):")
    for race in n:
        line = f"  {race}: selection_rate {low_risk[race] / n[race]:.3f} "
        assert line in (judged if n[race] >= 30 else short), race
        assert f"(n={n[race]})" in text
    assert any(n[r] < 30 for r in n)  # Native American: reported, not judged
    assert msg in out and "gate FAILED: 1 of 1 checks" in out


def test_compas_sex_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On sex the DIR's interval lies wholly above 0.8 (pandas recount): exit 0."""
    config = compas_config(
        tmp_path,
        [{"name": "FourFifths", "metric": "disparate_impact_ratio", "bound": 0.8,
          "significant": True, "attributes": ["sex"]}],
    )  # fmt: skip
    junit = tmp_path / "gate.xml"
    rc, out, _ = gate(capsys, *compas_args(config, junit))
    df = pandas_counts()
    fav = {s: int((sub.p == 0).sum()) for s, sub in df.groupby("sex")}
    n = {s: len(sub) for s, sub in df.groupby("sex")}
    lo, _ = mover_ratio(fav["Male"], n["Male"], fav["Female"], n["Female"])
    assert lo > 0.8 and rc == 0
    assert cases(junit)["FourFifths [sex]"].find("failure") is None
    assert "gate passed: 0 of 1 checks" in out


def test_compas_default_rules_and_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: xmlschema.XMLSchema
) -> None:
    """Without --fail-on: the configured rules (the shipped defaults here) on every attribute
    set, one testcase per rule × attribute set; the FPR gap on race is judged between the
    groups that have the data (ProPublica: 0.423 vs 0.220), not lost to a small group."""
    junit = tmp_path / "gate.xml"
    rc, _, _ = gate(capsys, *compas_args(COMPAS_CONFIG, junit))
    assert rc == 1
    schema.validate(str(junit))
    counts_agree(junit)
    tc = cases(junit)
    rules = ["FourFifthsRule", "EqualizedOddsGap", "TruePositiveRateGap", "FalsePositiveRateGap"]
    assert set(tc) == {f"{r} [{a}]" for r in rules for a in ("race", "sex", "age", "race&sex")}
    df = pandas_counts()
    neg = df[df.y == 0]
    fpr = {r: (sub.p == 1).mean() for r, sub in neg.groupby("race") if len(sub) >= 30}
    failure = tc["FalsePositiveRateGap [race]"].find("failure")
    assert failure is not None
    hi, lo = max(fpr, key=fpr.__getitem__), min(fpr, key=fpr.__getitem__)
    assert failure.attrib["message"].startswith(f"fpr_gap {fpr[hi] - fpr[lo]:.3f}, 95% CI")
    assert failure.attrib["message"].endswith(f": {lo} vs {hi}")


def test_whole_data_whatever_the_configured_windows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """COMPAS under a live-stream config (1-minute buckets, a 1-hour window, the default 30-day
    join TTL; labels come 730 days late): the gate still counts every label, and its FPR gap on
    race is the pandas recount's."""
    cfg = yaml.safe_load(COMPAS_CONFIG.read_text())
    model = cfg["models"]["compas"]
    model.update(bucket="1m", windows=[{"name": "1h", "length": "1h"}], lateness="1h")
    del model["join"]
    config = tmp_path / "live.yaml"
    config.write_text(yaml.safe_dump(cfg))
    rc, out, _ = gate(capsys, "-c", str(config), "--csv", str(COMPAS_CSV), "--csv-mapping",
                      str(COMPAS_MAPPING), "--fail-on", "fpr_gap")  # fmt: skip
    df = pandas_counts()
    assert rc == 1
    assert f"model compas: {len(df)} predictions ({len(df)} labelled)" in out
    assert "configured windows as long: none" in out and "events not counted" not in out
    neg = df[df.y == 0]
    fpr = {r: (sub.p == 1).mean() for r, sub in neg.groupby("race") if len(sub) >= 30}
    hi, lo = max(fpr, key=fpr.__getitem__), min(fpr, key=fpr.__getitem__)
    assert f"FAIL  fpr_gap [race]  fpr_gap {fpr[hi] - fpr[lo]:.3f}, 95% CI" in out


# -- synthetic sets -------------------------------------------------------------------------------


def write_set(tmp_path: Path, groups: dict[str, tuple[int, int]]) -> list[str]:
    """Predictions and labels: per group (n, favourable); among the favourable (prediction 1)
    half are labelled 1, among the others a quarter; one event a minute."""
    preds, labels = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    t = T0
    with preds.open("w") as p, labels.open("w") as lab:
        for g, (n, fav) in groups.items():
            for i in range(n):
                pid, yhat = f"{g}-{i}", int(i < fav)
                y = int(i % 2 == 0) if yhat else int(i % 4 == 0)
                p.write(json.dumps({"prediction_id": pid, "timestamp": t, "model_id": "loan",
                                    "prediction": yhat, "attributes": {"group": g}}) + "\n")  # fmt: skip
                lab.write(json.dumps({"prediction_id": pid, "timestamp": t + 3600, "label": y}))
                lab.write("\n")
                t += 60
    return ["-p", str(preds), "-l", str(labels)]


def loan_config(tmp_path: Path, extra: dict[str, object] | None = None) -> str:
    cfg: dict[str, object] = {
        "models": {
            "loan": {
                "attributes": {"group": {}},
                "reference_groups": {"group": "A"},
                "bucket": "1h",
                "windows": [{"name": "1h", "length": "1h"}, {"name": "all", "length": "30d"}],
                "lateness": "0s",
            }
        },
        **(extra or {}),
    }
    path = tmp_path / "loan.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_fair_set_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: xmlschema.XMLSchema
) -> None:
    """Two groups with the same counts in every cell: every rule passes (exit 0). A third group
    of 12 with no favourable decision is named as insufficient data and judged by no rule."""
    data = write_set(tmp_path, {"A": (1000, 600), "B": (1000, 600), "C": (12, 0)})
    junit = tmp_path / "gate.xml"
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), *data, "--junit", str(junit))
    assert rc == 0, out
    schema.validate(str(junit))
    counts_agree(junit)
    tc = cases(junit)
    assert len(tc) == 4 and all(c.find("failure") is None for c in tc.values())
    dir_case = (tc["FourFifthsRule [group]"].findtext("system-out") or "").splitlines()
    assert dir_case[1].startswith("disparate_impact_ratio 1.000, 95% CI")
    assert dir_case[3].startswith("  A: selection_rate 0.600 ") and "(n=1000)" in dir_case[3]
    assert dir_case[4].startswith("  B: selection_rate 0.600 ") and "(n=1000)" in dir_case[4]
    assert dir_case[-1].startswith("  C: selection_rate 0.000") and "(n=12)" in dir_case[-1]
    assert "not judged, insufficient data: C (n=12)" in out
    assert "gate passed: 0 of 4 checks" in out


def test_a_breach_within_the_noise_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DIR 0.7 on 60 per group: below 0.8, but the interval reaches past it (the oracle says
    so): not significant, exit 0, and said."""
    data = write_set(tmp_path, {"A": (60, 30), "B": (60, 21)})
    lo, hi = mover_ratio(21, 60, 30, 60)
    assert lo < 0.7 < 0.8 < hi
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), *data, "--fail-on", "FourFifthsRule")
    assert rc == 0
    assert f"disparate_impact_ratio 0.700, 95% CI [{lo:.3f}, {hi:.3f}], bound < 0.8" in out
    assert "past the bound, but not significantly" in out


def test_a_significant_pair_behind_a_noisier_extreme_one_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """C (40 rows) has the lowest ratio, 0.60, its interval past 0.8; B vs A 0.70 of 5,000
    each is wholly below it at the level over the 2 pairs against A (the oracle says so): exit 1, B named
    with its own interval (a review: it passed)."""
    data = write_set(tmp_path, {"A": (5000, 2500), "B": (5000, 1750), "C": (40, 12)})
    lo, hi = mover_ratio(1750, 5000, 2500, 5000, alpha=0.05 / 2)  # 2 pairs: A is configured
    assert hi < 0.8
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), *data, "--fail-on", "FourFifthsRule")
    assert rc == 1
    assert f"disparate_impact_ratio 0.700, 95% CI over 2 pairs [{lo:.3f}, {hi:.3f}]" in out
    assert "wholly below 0.8: B vs A" in out
    assert "(the most extreme pair, C vs A, is not significant alone)" in out


def test_too_few_per_group_is_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: xmlschema.XMLSchema
) -> None:
    """29 per group (seed 002 asks 30): a skipped testcase, never a failure, however unequal."""
    data = write_set(tmp_path, {"A": (29, 29), "B": (29, 0)})
    junit = tmp_path / "gate.xml"
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), *data, "--fail-on",
                      "disparate_impact_ratio", "--junit", str(junit))  # fmt: skip
    assert rc == 0
    schema.validate(str(junit))
    skipped = cases(junit)["disparate_impact_ratio [group]"].find("skipped")
    assert skipped is not None and "insufficient data: 0 group(s)" in skipped.attrib["message"]
    assert "skip  disparate_impact_ratio [group]" in out


def test_rules_of_short_windows_are_not_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rule restricted to the 1h window does not judge the whole data unless named."""
    rule = {"name": "HourlyDIR", "metric": "disparate_impact_ratio", "bound": 0.8,
            "windows": ["1h"]}  # fmt: skip
    cfg = loan_config(tmp_path, {"alerts": {"rules": [rule]}})
    data = write_set(tmp_path, {"A": (500, 400), "B": (500, 100)})
    rc, _, err = gate(capsys, "-c", cfg, *data)
    assert rc == 2 and "no configured rule applies to a window as long as the data" in err
    rc, out, _ = gate(capsys, "-c", cfg, *data, "--fail-on", "HourlyDIR")
    assert rc == 1 and "FAIL  HourlyDIR [group]  disparate_impact_ratio 0.250" in out


# -- exit 2: bad input ----------------------------------------------------------------------------


def test_malformed_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_set(tmp_path, {"A": (100, 60), "B": (100, 60)})
    with open(data[1], "a") as fh:
        fh.write('{"prediction_id": "x", "timestamp": \n')  # line 201: cut short
    junit = tmp_path / "gate.xml"
    rc, out, err = gate(capsys, "-c", loan_config(tmp_path), *data, "--junit", str(junit))
    assert rc == 2 and out == "" and not junit.exists()
    assert f"{data[1]} line 201: not_json" in err
    # its own lines, not one line of literal "\n"s (found by a review)
    assert "\\n" not in err and any(ln.strip().startswith(data[1]) for ln in err.splitlines())
    rc, _, _ = gate(capsys, "-c", loan_config(tmp_path), *data, "--allow-invalid")
    assert rc == 0


def test_ragged_csv_row_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A COMPAS row that lost its last field: exit 2, the line and both widths named (a dead
    letter like any unreadable record: --allow-invalid judges without it)."""
    lines = COMPAS_CSV.read_text().splitlines()[:6]
    width = len(lines[0].split(","))
    lines[3] = lines[3].rsplit(",", 1)[0]  # file line 4
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    rc, out, err = gate(capsys, "-c", str(COMPAS_CONFIG), "--csv", str(bad),
                        "--csv-mapping", str(COMPAS_MAPPING))  # fmt: skip
    assert rc == 2 and out == ""
    assert f"{bad} line 4: bad_row: {width - 1} fields where the header has {width}" in err
    rc, out, err = gate(capsys, "-c", str(COMPAS_CONFIG), "--csv", str(bad),
                        "--csv-mapping", str(COMPAS_MAPPING), "--allow-invalid")  # fmt: skip
    assert "fields where the header" not in err  # judged without it (here: too few rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-on", "FourFifths"], "--fail-on: unknown rule 'FourFifths'"),
        (["--fail-on", "tpr_gap=high"], "the bound 'high' is not a number"),
        (["--fail-on", "average_odds_difference"], "has no interval"),
        (["--model", "nope"], "--model: unknown model 'nope'"),
    ],
)
def test_bad_arguments_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    data = write_set(tmp_path, {"A": (50, 30), "B": (50, 30)})
    rc, _, err = gate(capsys, "-c", loan_config(tmp_path), *data, *args)
    assert rc == 2 and message in err


def test_bad_config_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rule = {"name": "R", "metric": "disparate_impact_ratio", "bound": ".8x"}
    cfg = loan_config(tmp_path, {"alerts": {"rules": [rule]}})
    data = write_set(tmp_path, {"A": (50, 30), "B": (50, 30)})
    rc, _, err = gate(capsys, "-c", cfg, *data)
    assert rc == 2 and "alerts.rules[0].bound" in err


def test_a_reference_group_absent_from_the_data_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found in review: ``reference_groups: {group: a}`` on data spelling it ``A`` left every
    ratio undefined, each check "insufficient data", and the gate passed (exit 0) on a DIR of
    0.5. The reference must have decisions in the data the gate judges."""
    data = write_set(tmp_path, {"A": (200, 120), "B": (200, 60)})
    assert gate(capsys, "-c", loan_config(tmp_path), *data)[0] == 1  # spelt right: it fails
    cfg = yaml.safe_load(Path(loan_config(tmp_path)).read_text())
    cfg["models"]["loan"]["reference_groups"] = {"group": "a"}
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(cfg))
    rc, _, err = gate(capsys, "-c", str(tmp_path / "typo.yaml"), *data)
    assert rc == 2 and "models.loan.reference_groups.group: 'a' has no decision" in err
    assert "(its groups: 'A', 'B')" in err


def test_a_reference_group_short_of_data_is_named_not_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found in review: the reference A with 12 decisions (min_samples 30) and three groups of
    500: the four-fifths check read "insufficient data: 3 group(s) … two are needed". It names
    the reference and its count; the gap rules, which need no reference, are judged."""
    data = write_set(tmp_path, {"A": (12, 8), "B": (500, 300), "C": (500, 300), "D": (500, 300)})
    junit = tmp_path / "gate.xml"
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), *data, "--junit", str(junit))
    line = next(x for x in out.splitlines() if "FourFifthsRule [group]" in x)
    assert "the reference group 'A' (reference_groups) has 12 decision(s)" in line, out
    assert "two are needed" not in line
    assert rc == 0  # insufficient data is reported, not judged (docs/gate.md)
    tc = cases(junit)
    assert tc["FourFifthsRule [group]"].find("skipped") is not None
    assert tc["TruePositiveRateGap [group]"].find("skipped") is None  # judged without A


def test_schema_rejects_what_ci_cannot_read(schema: xmlschema.XMLSchema) -> None:
    """The schema bites: a testcase without a name, a count that is not a number."""
    assert not schema.is_valid(
        '<testsuites><testsuite name="m" tests="1" failures="0" errors="0">'
        "<testcase/></testsuite></testsuites>"
    )
    assert not schema.is_valid(
        '<testsuites><testsuite name="m" tests="one" failures="0" errors="0">'
        '<testcase name="t"/></testsuite></testsuites>'
    )


def test_a_score_shift_fails_the_score_gate_not_the_four_fifths_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A and B share a selection rate (0.5) but B's scores crowd at the threshold: the gate on
    score_ks_distance fails (exit 1) and names B against A; the four-fifths gate passes; with
    B's scores drawn like A's, the score gate passes too."""
    rng = np.random.default_rng(8)

    def write(crowded: bool) -> list[str]:
        preds = tmp_path / f"s{int(crowded)}.jsonl"
        with preds.open("w") as p:
            for i in range(2000):
                g = "A" if i % 2 else "B"
                s = rng.uniform(0.4, 0.6) if (g == "B" and crowded) else rng.random()
                p.write(json.dumps({"prediction_id": f"{g}{i}", "timestamp": T0 + 60 * i,
                                    "model_id": "loan", "prediction": int(s >= 0.5),
                                    "score": round(float(s), 6), "attributes": {"group": g}}) + "\n")  # fmt: skip
        return ["-p", str(preds)]

    cfg = loan_config(tmp_path)
    rc, out, _ = gate(capsys, "-c", cfg, *write(True), "--fail-on", "score_ks_distance")
    assert rc == 1, out
    assert "B" in out and "score_ks_distance" in out
    rc, out, _ = gate(capsys, "-c", cfg, *write(True), "--fail-on", "FourFifthsRule")
    assert rc == 0, out
    rc, out, _ = gate(capsys, "-c", cfg, *write(False), "--fail-on", "score_ks_distance")
    assert rc == 0, out


def test_group_names_cannot_forge_lines_of_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found in review: a group named with a newline and a GitHub Actions workflow command (or
    an ANSI escape) printed a line of its own: ``::error …`` or a green "gate passed" under a
    failed gate. Group names come from the data: the summary shows their control characters
    as escapes, one line per line it means."""
    evil = "Z\n::error title=x::injected\r\x1b[32mgate passed"
    data = write_set(tmp_path, {"A": (1000, 600), "B": (1000, 100), evil: (12, 0)})
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), *data)
    assert rc == 1
    lines = out.splitlines()
    assert not any(line.startswith("::") for line in lines) and "\x1b" not in out
    assert "\r" not in out and [x for x in lines if x.startswith("gate ")] == [lines[-1]]
    assert lines[-1].startswith("gate FAILED")
    assert "Z\\n::error title=x::injected\\r\\x1b[32mgate passed (n=12)" in out


def test_a_significant_tpr_gap_fails_the_equalized_odds_gate_whatever_the_negatives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: group A has 500 labelled positives (TPR 0.9) but only 20 labelled
    negatives; B 500 of each (TPR 0.5). A was left out of both gaps for its few negatives, so
    EqualizedOddsGap passed as "insufficient data" while the TPR gap alone (0.4, significant)
    fails it, and the live rule pages. Each gap is judged on the groups with its own data."""
    preds, labels = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    cells = {"A": {"tp": 450, "fn": 50, "fp": 10, "tn": 10},
             "B": {"tp": 250, "fn": 250, "fp": 250, "tn": 250}}  # fmt: skip
    t, i = T0, 0
    with preds.open("w") as p, labels.open("w") as lab:
        for g, cs in cells.items():
            for cell, k in cs.items():
                yhat, y = int(cell in ("tp", "fp")), int(cell in ("tp", "fn"))
                for _ in range(k):
                    pid, i, t = f"x{i}", i + 1, t + 30
                    p.write(json.dumps({"prediction_id": pid, "timestamp": t, "model_id": "loan",
                                        "prediction": yhat, "attributes": {"group": g}}) + "\n")  # fmt: skip
                    lab.write(json.dumps({"prediction_id": pid, "timestamp": t + 60, "label": y}))
                    lab.write("\n")
    data = ["-p", str(preds), "-l", str(labels)]
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), *data, "--fail-on", "EqualizedOddsGap")
    assert rc == 1, out
    assert "FAIL" in out and "tpr_gap" in out.split("EqualizedOddsGap", 1)[1]
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), *data, "--fail-on", "fpr_gap")
    assert rc == 0 and "insufficient data" in out  # A has 20 negatives: no FPR comparison


def test_the_summary_names_the_denominator_a_group_lacked_and_a_score_rules_scored_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: a score-distance check printed each group's scored count as the ``n``
    of its selection rate (whose interval is on every decision), and a group left out of a
    gap showed only its ``n`` (82, plenty) when its positives were what it lacked."""
    preds = tmp_path / "p.jsonl"
    with preds.open("w") as p:
        for i in range(400):  # 200 a group, 80 of each scored
            g = "A" if i % 2 else "B"
            ev = {"prediction_id": f"x{i}", "timestamp": T0 + 60 * i, "model_id": "loan",
                  "prediction": int(i % 4 < 2), "attributes": {"group": g}}  # fmt: skip
            if i < 160:
                ev["score"] = 0.3 if g == "A" else 0.7
            p.write(json.dumps(ev) + "\n")
    junit = tmp_path / "g.xml"
    cfg = loan_config(tmp_path)
    rc, _, _ = gate(capsys, "-c", cfg, "-p", str(preds), "--fail-on", "score_ks_distance",
                    "--junit", str(junit))  # fmt: skip
    assert rc == 1
    text = next(iter(cases(junit).values())).findtext("failure") or ""
    assert "A: selection_rate 0.500 [0.431, 0.569] (n=200); scored=80" in text, text
    data = write_set(tmp_path, {"A": (1000, 600), "B": (1000, 600), "C": (82, 20)})
    rc, out, _ = gate(capsys, "-c", cfg, *data, "--fail-on", "tpr_gap")
    assert rc == 0 and "C (n=82, tp+fn=" in out, out  # its positives, not its n, fell short


def test_an_equalized_odds_failure_quotes_the_judged_gap_not_the_blind_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: A (TPR .9) and B (TPR .5) fail the TPR gap; C's declined cases are
    never labelled, so its FPR is 1 by construction and the FPR gap is blind. The check failed
    rightly but quoted the blind gap's made-up 0.900 "A vs C"; it quotes the TPR gap and says
    the FPR gap is blind."""
    preds, labels = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    cells = {"A": {"tp": 450, "fn": 50, "fp": 50, "tn": 450},
             "B": {"tp": 250, "fn": 250, "fp": 50, "tn": 450},
             "C": {"tp": 5, "fp": 100, "unlabelled": 300}}  # fmt: skip
    t, i = T0, 0
    with preds.open("w") as p, labels.open("w") as lab:
        for g, cs in cells.items():
            for cell, k in cs.items():
                for _ in range(k):
                    pid, i, t = f"x{i}", i + 1, t + 30
                    p.write(json.dumps({"prediction_id": pid, "timestamp": t, "model_id": "loan",
                                        "prediction": int(cell in ("tp", "fp")),
                                        "attributes": {"group": g}}) + "\n")  # fmt: skip
                    if cell != "unlabelled":
                        y = int(cell in ("tp", "fn"))
                        lab.write(
                            json.dumps({"prediction_id": pid, "timestamp": t + 60, "label": y})
                        )
                        lab.write("\n")
    junit = tmp_path / "g.xml"
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), "-p", str(preds), "-l", str(labels),
                      "--fail-on", "EqualizedOddsGap", "--junit", str(junit))  # fmt: skip
    assert rc == 1, out
    line = next(ln for ln in out.splitlines() if "EqualizedOddsGap" in ln)
    assert "(its tpr_gap) 0.400" in line and "B vs A" in line and "vs C" not in line, line
    failure = next(iter(cases(junit).values())).find("failure")
    assert failure is not None and "fpr_gap: blind: selective labels" in (failure.text or "")


def test_a_blind_check_shows_no_number_and_no_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: a blind gap (only approved cases labelled: every FPR is 1 by
    construction) was skipped rightly, but its JUnit text quoted "fpr_gap 0.000 … A vs A", a
    made-up number and a pair compared with itself. It says "not measured" and names none."""
    preds, labels = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    t = T0
    with preds.open("w") as p, labels.open("w") as lab:
        for g in ("A", "B"):
            for i in range(400):
                t += 30
                yhat = int(i % 2 == 0)
                p.write(json.dumps({"prediction_id": f"{g}{i}", "timestamp": t, "model_id": "loan",
                                    "prediction": yhat, "attributes": {"group": g}}) + "\n")  # fmt: skip
                if yhat:  # selective labels: only the approved get an outcome
                    lab.write(json.dumps({"prediction_id": f"{g}{i}", "timestamp": t + 60,
                                          "label": int(i % 4 == 0)}) + "\n")  # fmt: skip
    junit = tmp_path / "g.xml"
    rc, out, _ = gate(capsys, "-c", loan_config(tmp_path), "-p", str(preds), "-l", str(labels),
                      "--fail-on", "fpr_gap", "--junit", str(junit))  # fmt: skip
    assert rc == 0, out
    case = next(iter(cases(junit).values()))
    skipped = case.find("skipped")
    assert skipped is not None
    text = (case.findtext("system-out") or "") + (skipped.get("message") or "")
    assert "fpr_gap not measured (bound > 0.1)" in text, text
    assert " vs " not in text and "0.000" not in text.split("groups:")[0], text
    # nor do the groups' rates: FPR = 1 for both by construction (a later review)
    groups = text.split("groups:")[1]
    assert "fpr blind: selective labels" in groups and "fpr 1.000" not in groups, text
