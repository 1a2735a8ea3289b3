"""Generates ``grafana/dashboards/*.json`` (run ``python grafana/generate.py``; a test checks that
the committed JSON is what this script writes).

Dashboards as code keep ids unique, datasource references uniform and every panel's query,
unit and description in one readable place. Fairness panels read the aggregated recording rules
of ``deploy/prometheus/fairness-rules.yml`` (sums of counts across replicas, then ratios), so
they are right with several monitor replicas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39  # Grafana 10.3+ (newer versions migrate it on load)

SEL = 'model="$model", window="$window", attribute="$attribute"'
BANDS = (("", "", "A"), ("_lower", " lower", "B"), ("_upper", " upper", "C"))


def target(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"datasource": DS, "expr": expr, "refId": ref, "legendFormat": legend}
    if instant:
        t["instant"], t["range"] = True, False
    return t


# panels with data only when a model reads its attributes from an attributes topic (the
# Grafana test's demo does not; tests/app/test_attributes_kafka.py queries them instead)
ATTRIBUTE_COVERAGE = "Attribute coverage"
ATTRIBUTES_STREAM_PANELS = (ATTRIBUTE_COVERAGE,)

BLIND_TEXT = "blind: selective labels"
# a metric the counts cannot measure (selective labels) is shown as "blind", never as a value:
# its value query leaves it out while the Prometheus rules' fairness:<metric>_blind:info is up.
# Those judge the counts summed across replicas, as the alert rules and the monitor do (the
# exporter's per-replica fairness_metric_blind flags differ with several replicas: one replica
# blind where the sum is not, or the sum blind where no replica is; found by a review).
BLIND_MAPPING = [
    {"type": "value", "options": {"1": {"text": BLIND_TEXT, "color": "text", "index": 0}}}
]


BLIND_RATES = ("true_positive_rate", "false_positive_rate", "positive_predictive_value")
BLIND_GAPS = ("tpr_gap", "fpr_gap", "ppv_gap", "equalized_odds_difference")


def _blind(metric: str, group: bool) -> str:
    """The recording rule saying ``metric`` is blind (per group for a rate)."""
    if metric not in (BLIND_RATES if group else BLIND_GAPS):
        raise ValueError(f"no blindness rule for {metric!r}")
    return f"fairness:{metric}_blind:info{{{SEL}}}"


def unless_blind(expr: str, metric: str, *, group: bool = False) -> str:
    """``expr`` without the series that are blind for ``metric`` (a gap, or with ``group`` a
    per-group rate)."""
    on = "model, window, attribute, group" if group else "model, window, attribute"
    return f"{expr} unless on ({on}) {_blind(metric, group)}"


def blind_flag(metric: str) -> str:
    """1 while ``metric`` is blind for the selected model/window/attribute."""
    return f"max by (model, window, attribute) ({_blind(metric, False)})"


def _named(metric: str, group: bool) -> str:
    by = "model, window, attribute, group" if group else "model, window, attribute"
    return f'label_replace(max by ({by}) ({_blind(metric, group)}), "metric", "{metric}", "", "")'


def blind_override(ref: str) -> dict[str, Any]:
    """Query ``ref`` (a blind flag) shows the words, in the neutral text colour."""
    return {
        "matcher": {"id": "byFrameRefID", "options": ref},
        "properties": [
            {"id": "mappings", "value": BLIND_MAPPING},
            {"id": "color", "value": {"mode": "fixed", "fixedColor": "text"}},
            {"id": "unit", "value": "none"},
        ],
    }


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def timeseries(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    *,
    unit: str,
    grid: tuple[int, int, int, int],
    min_: float | None = None,
    max_: float | None = None,
    bound: tuple[float, str] | None = None,
    bands: bool = False,
    fill_between: tuple[str, str] | None = None,
    counts_right: str | None = None,
) -> dict[str, Any]:
    """A time series panel; ``bound`` draws a dashed threshold line, ``bands`` styles the
    series whose legend ends in ' lower' / ' upper' as a thin dashed interval,
    ``counts_right`` (a legend regex) draws those series as plain counts on a right axis."""
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": {"lineWidth": 2, "fillOpacity": 0, "spanNulls": False},
        "thresholds": thresholds((None, "green")),
    }
    if min_ is not None:
        defaults["min"] = min_
    if max_ is not None:
        defaults["max"] = max_
    if bound is not None:
        value, bad = bound
        steps = (
            ((None, "red"), (value, "green"))
            if bad == "below"
            else ((None, "green"), (value, "red"))
        )
        defaults["thresholds"] = thresholds(*steps)
        defaults["custom"]["thresholdsStyle"] = {"mode": "dashed"}
    overrides: list[dict[str, Any]] = []
    if bands:
        overrides.append(
            {
                "matcher": {"id": "byRegexp", "options": ".* (lower|upper)$"},
                "properties": [
                    {"id": "custom.lineWidth", "value": 1},
                    {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [4, 4]}},
                    {
                        "id": "custom.hideFrom",
                        "value": {"legend": True, "tooltip": False, "viz": False},
                    },
                ],
            }
        )
    if fill_between is not None:
        lower, upper = fill_between
        overrides += [
            {
                "matcher": {"id": "byName", "options": upper},
                "properties": [
                    {"id": "custom.fillBelowTo", "value": lower},
                    {"id": "custom.fillOpacity", "value": 20},
                    {"id": "custom.lineWidth", "value": 0},
                    {
                        "id": "custom.hideFrom",
                        "value": {"legend": True, "tooltip": False, "viz": False},
                    },
                ],
            },
            {
                "matcher": {"id": "byName", "options": lower},
                "properties": [
                    {"id": "custom.lineWidth", "value": 0},
                    {
                        "id": "custom.hideFrom",
                        "value": {"legend": True, "tooltip": False, "viz": False},
                    },
                ],
            },
        ]
    if counts_right is not None:
        overrides.append(
            {
                "matcher": {"id": "byRegexp", "options": counts_right},
                "properties": [
                    {"id": "unit", "value": "short"},
                    {"id": "custom.axisPlacement", "value": "right"},
                ],
            }
        )
    x, y, w, h = grid
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "right",
                "showLegend": True,
                "calcs": ["lastNotNull"],
            },
            "tooltip": {"mode": "multi", "sort": "none"},
        },
        "targets": targets,
    }


def stat(
    title: str,
    description: str,
    expr: str,
    *,
    unit: str,
    grid: tuple[int, int, int, int],
    steps: tuple[tuple[float | None, str], ...],
    decimals: int = 3,
    blind: str | None = None,
) -> dict[str, Any]:
    """A single-value panel; with ``blind`` (a registry metric) it shows "blind: selective
    labels" instead of the value while the monitor flags the metric as blind."""
    targets = [target(expr)]
    overrides: list[dict[str, Any]] = []
    if blind is not None:
        targets = [target(unless_blind(expr, blind)), target(blind_flag(blind), "blind", "B")]
        overrides = [blind_override("B")]
    x, y, w, h = grid
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {
            "defaults": {"unit": unit, "decimals": decimals, "thresholds": thresholds(*steps)},
            "overrides": overrides,
        },
        "options": {
            "colorMode": "background",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
            "wideLayout": True,
            "showPercentChange": False,
            "percentChangeColorMode": "standard",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        },
        "targets": targets,
    }


def blind_timeline(grid: tuple[int, int, int, int]) -> dict[str, Any]:
    """A state timeline of what the monitor cannot measure: each blind metric (and group rate)
    as a bar reading "blind: selective labels" while it lasts."""
    x, y, w, h = grid
    return {
        "type": "state-timeline",
        "title": "Blind metrics (cannot be measured)",
        "description": "While outcomes arrive for one predicted class only (selective labels: "
        "the denied never show an outcome), TPR and FPR are 1 or 0 by construction. The "
        "monitor then exports no value for them, their gaps or the equalized-odds difference, "
        "and they show here, as the Prometheus rules judge the counts summed across replicas "
        "(fairness:<metric>_blind:info, which the alert rules read too). An empty panel means "
        "every metric is measured.",
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {
            "defaults": {
                "unit": "none",
                "mappings": BLIND_MAPPING,
                "color": {"mode": "fixed", "fixedColor": "text"},
                "thresholds": thresholds((None, "text")),
                "custom": {"fillOpacity": 40, "lineWidth": 0},
            },
            "overrides": [],
        },
        "options": {
            "showValue": "auto",
            "mergeValues": True,
            "rowHeight": 0.8,
            "alignValue": "left",
            "legend": {
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": False,
                "calcs": [],
            },
            "tooltip": {"mode": "single", "sort": "none"},
        },
        "targets": [
            target(" or ".join(_named(m, False) for m in BLIND_GAPS), "{{metric}}", "A"),
            target(" or ".join(_named(m, True) for m in BLIND_RATES), "{{group}} {{metric}}", "B"),
        ],
    }


# the evidence detectors (monitor/alerts/evidence_alerts.py): per model, attribute set, group and
# detector; no window (they run on every closed bucket, not over a window)
EV_SEL = 'model="$model", attribute="$attribute"'
EV_BY = "group, detector"
EV_BLIND = f'fairness_alert_evidence_state{{{EV_SEL}, state="{BLIND_TEXT}"}}'
# the detector's state as a number for the state timeline (Prometheus has it as a label)
EV_STATES = (("warming-up", 0, "text"), ("watching", 1, "blue"), (BLIND_TEXT, 2, "text"),
             ("firing", 3, "red"))  # fmt: skip


def evidence_unless_blind(family: str) -> str:
    """``family`` per group and detector, without the detectors the monitor flags as blind
    (selective labels: their evidence and expected time are not measured, never shown)."""
    return (
        f"max by ({EV_BY}) ({family}{{{EV_SEL}}}) unless on ({EV_BY}) max by ({EV_BY}) ({EV_BLIND})"
    )


def evidence_panels(y: int) -> list[dict[str, Any]]:
    """The evidence against its threshold (time series), the expected time to detect per
    group (table) and each detector's state (state timeline)."""
    series = timeseries(
        "Evidence against its threshold (sequential detectors)",
        "Per group and detector, the log e-value of the anytime-valid detector "
        "(fairness_alert_evidence); it pages when it reaches its threshold (dashed, "
        "fairness_alert_evidence_threshold: log of the run length the false-page budget "
        "allows). Detectors still warming up have no line; blind ones (selective labels) are "
        "left out: see the detector states.",
        [
            target(
                f"({evidence_unless_blind('fairness_alert_evidence')}) > -Inf",
                "{{group}} {{detector}}",
                "A",
            ),
            target(
                f"max by (detector) (fairness_alert_evidence_threshold{{{EV_SEL}}})",
                "threshold {{detector}}",
                "B",
            ),
        ],
        unit="none",
        grid=(0, y, 12, 9),
    )
    series["fieldConfig"]["overrides"].append(
        {
            "matcher": {"id": "byRegexp", "options": "^threshold .*"},
            "properties": [
                {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [6, 4]}},
                {"id": "custom.lineWidth", "value": 1},
                {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
            ],
        }
    )
    never = {"type": "range", "options": {"from": 1e12, "to": None,
                                          "result": {"text": "no data: cannot show"}}}  # fmt: skip
    table = {
        "type": "table",
        "title": "Expected time to detect",
        "description": "Per group and detector, how long a change worth a page would take to "
        "reach the threshold at the group's volume of the last hour (a change detector: its "
        "rate to 0.8×; the four-fifths test: a ratio of 0.75× the bound; the equalized-odds "
        "test: a gap of twice the bound) "
        "(fairness_expected_time_to_detect_seconds). A small group's silence is this wait, "
        "not proof of fairness. Blind detectors (selective labels) are left out.",
        "datasource": DS,
        "gridPos": {"x": 12, "y": y, "w": 12, "h": 9},
        "fieldConfig": {
            "defaults": {
                "unit": "s",
                "decimals": 1,
                "mappings": [never],
                "thresholds": thresholds((None, "text")),
            },
            "overrides": [],
        },
        "options": {
            "showHeader": True,
            "cellHeight": "sm",
            "frameIndex": 0,
            "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""},
        },
        "transformations": [
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True},
                    "renameByName": {"Value": "expected time to detect"},
                    "indexByName": {"group": 0, "detector": 1, "Value": 2},
                },
            }
        ],
        "targets": [
            {
                **target(
                    evidence_unless_blind("fairness_expected_time_to_detect_seconds"),
                    instant=True,
                ),
                "format": "table",
            }
        ],
    }
    states = " or ".join(
        f'{v} * fairness_alert_evidence_state{{{EV_SEL}, state="{name}"}}'
        for name, v, _ in EV_STATES
    )
    timeline = blind_timeline(grid=(0, y + 9, 24, 8))
    timeline.update(
        title="Evidence detector states",
        description="Each sequential detector's state (fairness_alert_evidence_state): "
        "warming-up (no baseline yet), watching, firing, or blind: selective labels (TPR, "
        "FPR and equalized-odds cannot be measured: never shown as a value).",
        targets=[target(f"max by ({EV_BY}) ({states})", "{{group}} {{detector}}")],
    )
    timeline["fieldConfig"]["defaults"].update(
        mappings=[
            {
                "type": "value",
                "options": {
                    str(v): {"text": name, "color": color, "index": i}
                    for i, (name, v, color) in enumerate(EV_STATES)
                },
            }
        ],
        color={"mode": "thresholds"},
    )
    return [series, table, timeline]


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var"},
        "definition": query,
        "refresh": 2,  # on time range change
        "sort": 1,
        "includeAll": False,
        "multi": False,
        "options": [],
    }


DATASOURCE_VAR = {
    "type": "datasource",
    "name": "datasource",
    "label": "Data source",
    "query": "prometheus",
    "options": [],
    "refresh": 1,
}


def dashboard(
    uid: str,
    title: str,
    description: str,
    panels: list[dict[str, Any]],
    variables: list[dict[str, Any]],
    annotations: list[dict[str, Any]],
) -> dict[str, Any]:
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["fairness", "fairness-monitor"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-24h", "to": "now"},
        "templating": {"list": [DATASOURCE_VAR, *variables]},
        "annotations": {"list": annotations},
        "links": [],
        "panels": panels,
    }


def fairness_overview() -> dict[str, Any]:
    g = "{" + SEL + "}"

    def label_based(expr: str, rec: str) -> str:
        """TPR/FPR per group: blind groups are left out (the blind metrics panel shows them)."""
        return expr if rec == "selection_rate" else unless_blind(expr, rec, group=True)

    blind_note = " Groups the monitor flags as blind (selective labels) are left out."
    rates = []
    for i, (name, rec, n_rec, what) in enumerate(
        (
            (
                "Selection rate by group",
                "selection_rate",
                "predictions",
                "favourable predictions / predictions",
            ),
            (
                "True positive rate by group",
                "true_positive_rate",
                "positives",
                "TP / (TP + FN): qualified people selected",
            ),
            (
                "False positive rate by group",
                "false_positive_rate",
                "negatives",
                "FP / (FP + TN): unqualified people selected",
            ),
        )
    ):
        rates.append(
            timeseries(
                name,
                f"{what}, per group, summed across replicas, with its Wilson interval (dashed; "
                "at the configured confidence, 95% by default). Groups with fewer predictions "
                "than the model's min_samples (30 by default) are left out"
                + (
                    "."
                    if rec == "selection_rate"
                    else f"; a group with few {n_rec} is shown, its interval wide (gap alerts compare "
                    f"only groups with min_samples {n_rec})."
                )
                + ("" if rec == "selection_rate" else blind_note),
                [
                    target(
                        label_based(f"fairness:{rec}{part}:ratio{g}", rec), "{{group}}" + leg, ref
                    )
                    for part, leg, ref in BANDS
                ],
                unit="percentunit",
                min_=0,
                max_=1,
                bands=True,
                grid=(8 * i, 14, 8, 9),
            )
        )
    panels = [
        stat(
            "Disparate impact ratio",
            "Lowest group selection rate / the reference group's (the configured reference "
            "group, else the highest rate; EEOC four-fifths rule: below 0.8 is adverse "
            "impact), over groups with at least the model's min_samples predictions.",
            f"fairness:disparate_impact:ratio{g}",
            unit="none",
            grid=(0, 0, 6, 5),
            steps=((None, "red"), (0.8, "green")),
        ),
        stat(
            "Equalized-odds difference",
            "max(TPR gap, FPR gap) between groups; the default bound is 0.1. Reads "
            f'"{BLIND_TEXT}" while outcomes arrive for one predicted class only.',
            f"fairness:equalized_odds_difference:ratio{g}",
            unit="none",
            grid=(6, 0, 6, 5),
            steps=((None, "green"), (0.1, "red")),
            blind="equalized_odds_difference",
        ),
        stat(
            "Predictions in the window",
            "All predictions of the selected model and window (summed over groups of the "
            "attribute): how much evidence the numbers rest on.",
            f"sum(fairness:predictions:sum{g})",
            unit="short",
            grid=(12, 0, 6, 5),
            steps=((None, "blue"),),
            decimals=0,
        ),
        stat(
            "Fairness alerts firing",
            "Alerts the monitor's own evaluator is firing now (rules, fairness drift, evidence; "
            "with alerts.scope: global counted once, by the delivering replica).",
            "sum(fairness_alerts_active) or vector(0)",
            unit="short",
            grid=(18, 0, 6, 5),
            steps=((None, "green"), (1, "red")),
            decimals=0,
        ),
        timeseries(
            "Disparate impact ratio over time",
            "Lowest / reference group selection rate with its MOVER-R interval at the "
            "configured confidence (shaded); "
            "the dashed line is the four-fifths bound, 0.8. A sustained fall is how a "
            "feedback loop shows itself.",
            [
                target(f"fairness:disparate_impact:ratio{g}", "disparate impact ratio", "A"),
                target(f"fairness:disparate_impact_lower:ratio{g}", "lower", "B"),
                target(f"fairness:disparate_impact_upper:ratio{g}", "upper", "C"),
            ],
            unit="none",
            min_=0,
            bound=(0.8, "below"),
            fill_between=("lower", "upper"),
            grid=(0, 5, 14, 9),
        ),
        timeseries(
            "Equalized-odds difference over time",
            "max(TPR gap, FPR gap) with both gaps; the dashed line is the bound, 0.1. A gap "
            "the monitor flags as blind (selective labels) is left out: see the blind metrics.",
            [
                target(
                    unless_blind(
                        f"fairness:equalized_odds_difference:ratio{g}", "equalized_odds_difference"
                    ),
                    "equalized-odds difference",
                    "A",
                ),
                target(unless_blind(f"fairness:tpr_gap:ratio{g}", "tpr_gap"), "TPR gap", "B"),
                target(unless_blind(f"fairness:fpr_gap:ratio{g}", "fpr_gap"), "FPR gap", "C"),
            ],
            unit="none",
            min_=0,
            bound=(0.1, "above"),
            grid=(14, 5, 10, 9),
        ),
        *rates,
        timeseries(
            "Predictions per group (sample size)",
            "Predictions in the window per group, summed across replicas: small groups have "
            "wide intervals; tell noise from signal here.",
            [target(f"fairness:predictions:sum{g}", "{{group}}")],
            unit="short",
            min_=0,
            grid=(0, 23, 12, 8),
        ),
        timeseries(
            "Label coverage per group",
            "Share of the window's predictions whose outcome label has arrived. Error rates "
            "(TPR, FPR) rest only on the labelled part; low or unequal coverage (selective "
            "labels: the denied never show an outcome) makes them unreliable.",
            [target(f"fairness:label_coverage:ratio{g}", "{{group}}")],
            unit="percentunit",
            min_=0,
            max_=1,
            grid=(12, 23, 12, 8),
        ),
        blind_timeline(grid=(0, 31, 24, 7)),
        *evidence_panels(38),
        timeseries(
            "Score distribution vs the reference (KS) by group",
            "Kolmogorov-Smirnov distance of each group's score distribution from the score "
            "reference group's, over the exported histograms summed across replicas: the largest "
            "selection-rate gap over all thresholds. A group can keep its selection rate at the "
            "deployed threshold while its scores move (generalized demographic parity, "
            "docs/metrics.md).",
            [target(f"fairness:group_score_ks_distance:ratio{g}", "{{group}}")],
            unit="percentunit",
            min_=0,
            max_=1,
            bound=(0.1, "above"),
            grid=(0, 55, 12, 9),
        ),
        timeseries(
            "Estimated TPR before labels (calibrated scores)",
            "Label-free estimate per group: labelled decisions as counted, those awaiting a "
            "label in expectation from their scores (CBPE). An estimate, not a measurement: "
            "absent for a group whose calibration check failed on the labels that did arrive. "
            "Computed by each replica over its own partitions (one line per instance).",
            [
                target(f"fairness_estimated_true_positive_rate_ratio{g}", "{{group}} {{instance}}"),
                target(
                    f"fairness_estimated_true_positive_rate_lower_ratio{g}",
                    "{{group}} {{instance}} lower",
                    "B",
                ),
                target(
                    f"fairness_estimated_true_positive_rate_upper_ratio{g}",
                    "{{group}} {{instance}} upper",
                    "C",
                ),
            ],
            unit="percentunit",
            min_=0,
            max_=1,
            bands=True,
            grid=(12, 55, 12, 9),
        ),
    ]
    variables = [
        variable("model", "Model", "label_values(fairness:predictions:sum, model)"),
        variable(
            "window", "Window", 'label_values(fairness:predictions:sum{model="$model"}, window)'
        ),
        variable(
            "attribute",
            "Attribute",
            'label_values(fairness:predictions:sum{model="$model", window="$window"}, attribute)',
        ),
    ]
    annotations = [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        },
        {
            "name": "Fairness alerts (Prometheus rules)",
            "datasource": DS,
            "enable": True,
            "iconColor": "red",
            "expr": 'ALERTS{alertstate="firing", alertname=~"Fairness.*", model="$model"}',
            "step": "60s",
            "titleFormat": "{{alertname}}",
            "textFormat": "{{attribute}} {{window}}",
            "tagKeys": "alertname,attribute,window,severity",
            "useValueForTime": False,
        },
        {
            "name": "Fairness alerts (monitor)",
            "datasource": DS,
            "enable": True,
            "iconColor": "orange",
            "expr": "fairness_alerts_active > 0",
            "step": "60s",
            "titleFormat": "{{alertname}}",
            "tagKeys": "alertname,severity",
            "useValueForTime": False,
        },
    ]
    return dashboard(
        "fairness-overview",
        "Fairness overview",
        "Is this model treating groups differently, since when, and how sure are we?",
        panels,
        variables,
        annotations,
    )


def operations() -> dict[str, Any]:
    job = '{job=~"$job", instance=~"$instance"}'

    def sel(extra: str = "") -> str:
        return '{job=~"$job", instance=~"$instance"' + (", " + extra if extra else "") + "}"

    invalid = sel('outcome="invalid"')
    panels = [
        timeseries(
            "Events per second by topic and outcome",
            "Records consumed per second: ok, invalid (dead-lettered), duplicate, late, orphan…",
            [
                target(
                    f"sum by (topic, outcome) (rate(fairness_events_total{job}[$__rate_interval]))",
                    "{{topic}} {{outcome}}",
                )
            ],
            unit="ops",
            min_=0,
            grid=(0, 0, 12, 8),
        ),
        timeseries(
            "Dead-letter rate",
            "Invalid records per second, sent to the dead-letter topic with their reason. "
            "The monitor stops (exit 3) when service.max_invalid_ratio is exceeded.",
            [
                target(
                    f"sum by (topic) (rate(fairness_events_total{invalid}[$__rate_interval]))",
                    "{{topic}}",
                )
            ],
            unit="ops",
            min_=0,
            grid=(12, 0, 12, 8),
        ),
        timeseries(
            "Consumer lag",
            "Records behind the end of each partition.",
            [
                target(
                    f"sum by (topic, partition) (fairness_consumer_lag{job})",
                    "{{topic}}/{{partition}}",
                )
            ],
            unit="short",
            min_=0,
            grid=(0, 8, 8, 8),
        ),
        timeseries(
            "Join: awaiting labels, labelled kept",
            "Predictions awaiting their label, labelled predictions the join keeps until "
            "their TTL to recognise a repeated prediction or label, and labels whose own time "
            "is after the last boundary the rules judged (kept to read windows as of it).",
            [
                target(
                    f"sum by (instance) (fairness_pending_labels{job})",
                    "awaiting label {{instance}}",
                ),
                target(
                    f"sum by (instance) (fairness_join_labelled_kept{job})",
                    "labelled, kept until TTL {{instance}}",
                    "B",
                ),
                target(
                    f"sum by (instance) (fairness_label_ledger_entries{job})",
                    "labels ahead of the judged boundary {{instance}}",
                    "C",
                ),
            ],
            unit="short",
            min_=0,
            grid=(8, 8, 8, 8),
        ),
        timeseries(
            "Label delay (median and 90th percentile)",
            "Time from a prediction to its label's arrival.",
            [
                target(
                    f"histogram_quantile(0.5, sum by (le) (rate(fairness_label_delay_seconds_bucket{job}[$__rate_interval])))",
                    "p50",
                    "A",
                ),
                target(
                    f"histogram_quantile(0.9, sum by (le) (rate(fairness_label_delay_seconds_bucket{job}[$__rate_interval])))",
                    "p90",
                    "B",
                ),
            ],
            unit="s",
            min_=0,
            grid=(16, 8, 8, 8),
        ),
        timeseries(
            "Processing time by phase",
            "Seconds of main-loop time per second, by phase (poll, process, checkpoint): "
            "near 1 means the consumer is saturated.",
            [
                target(
                    f"sum by (phase) (rate(fairness_processing_seconds_total{job}[$__rate_interval]))",
                    "{{phase}}",
                )
            ],
            unit="percentunit",
            min_=0,
            grid=(0, 16, 8, 8),
        ),
        timeseries(
            "Checkpoint age",
            "Seconds since each replica's last checkpoint (state + offsets).",
            [target(f"max by (instance) (fairness_checkpoint_age_seconds{job})", "{{instance}}")],
            unit="s",
            min_=0,
            bound=(300, "above"),
            grid=(8, 16, 8, 8),
        ),
        timeseries(
            "Alert delivery failures",
            "Failed delivery attempts per sink (Alertmanager, webhook, Kafka): a pager that "
            "cannot be reached.",
            [
                target(
                    f"sum by (sink) (increase(fairness_alert_delivery_failures_total{job}[$__rate_interval]))",
                    "{{sink}}",
                )
            ],
            unit="short",
            min_=0,
            grid=(16, 16, 8, 8),
        ),
        timeseries(
            "Alert evaluation behind",
            "Event time from the last bucket boundary the alert rules judged to the newest "
            "partition's head, per model: above one bucket, boundaries wait for a partition's "
            "labels (at most the model's lateness) or for a partition behind the others, so "
            "alerts come that much later (FairnessAlertEvaluationBehind). Windows not "
            "judged (a count, right axis): they had left the ring before evaluation "
            "reached them (FairnessAlertWindowsSkipped, docs/runbook.md).",
            [
                target(
                    f"max by (instance, model) (fairness_alert_evaluation_behind_seconds{job})",
                    "{{instance}} {{model}}",
                ),
                target(
                    f"sum by (instance, model) (increase(fairness_alert_windows_skipped_total{job}[$__rate_interval]))",
                    "windows not judged {{instance}} {{model}}",
                    "B",
                ),
            ],
            unit="s",
            min_=0,
            grid=(0, 24, 12, 8),
            counts_right="windows not judged .*",
        ),
        timeseries(
            ATTRIBUTE_COVERAGE,
            "Per model, the share of decisions that had their protected attributes from the "
            "attributes topic (models with input.attributes: stream); the rest are counted in "
            "the __missing__ groups, never dropped. Falling: the attributes stream is late, "
            "stopped or keyed differently (docs/serving.md). No data: no model reads an "
            "attributes topic.",
            [target(f"fairness_attribute_coverage_ratio{job}", "{{model}} ({{instance}})")],
            unit="percentunit",
            min_=0,
            bound=(0.95, "below"),
            grid=(12, 24, 12, 8),
        ),
        timeseries(
            "Attribute values past the group limits",
            "Decisions per attribute whose value was counted as __other__ because every place "
            "was taken (past max_groups: those groups are unseen, FairnessGroupsOverflowing), "
            "because the attribute declares its values and this one is not among them, or was "
            "counted under a shortened name (longer than limits.max_value_length).",
            [
                target(
                    f"sum by (model, attribute) (increase(fairness_group_overflow_total{job}[$__rate_interval]))",
                    "past max_groups {{model}} {{attribute}}",
                ),
                target(
                    f"sum by (model, attribute) (increase(fairness_group_values_undeclared_total{job}[$__rate_interval]))",
                    "undeclared {{model}} {{attribute}}",
                    "B",
                ),
                target(
                    f"sum by (model, attribute) (increase(fairness_group_values_shortened_total{job}[$__rate_interval]))",
                    "shortened {{model}} {{attribute}}",
                    "C",
                ),
            ],
            unit="short",
            min_=0,
            grid=(0, 32, 24, 8),
        ),
    ]
    variables = [
        variable("job", "Job", "label_values(fairness_events_total, job)"),
        variable(
            "instance", "Instance", 'label_values(fairness_events_total{job=~"$job"}, instance)'
        ),
    ]
    variables[1]["includeAll"] = True
    variables[1]["allValue"] = ".*"
    annotations = [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        }
    ]
    return dashboard(
        "fairness-monitor-ops",
        "Fairness monitor operations",
        "Is the monitor itself healthy: throughput, bad input, lag, label delay, checkpoints, "
        "alert delivery.",
        panels,
        variables,
        annotations,
    )


DASHBOARDS = {"fairness-overview.json": fairness_overview, "monitor-operations.json": operations}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    for name, build in DASHBOARDS.items():
        (HERE / "dashboards" / name).write_text(render(build))
        print(f"wrote grafana/dashboards/{name}")
