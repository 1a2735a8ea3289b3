"""``fairness-monitor report``: a self-contained HTML audit report for a compliance ticket.

Everything is in one file: tables are HTML, plots are inline SVG, the data behind them is
embedded as JSON; no script, stylesheet or font is fetched from anywhere. The tables are built
from the same report structure as ``replay --format json`` (each number also carries its exact
value in ``data-value``), so the two always agree. A blind metric shows its reason ("blind:
selective labels", also in ``data-blind``) in place of a number that would read as good news.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from monitor.alerts.evaluator import SeriesPoint
from monitor.config.spec import Config
from monitor.metrics.intervals import level_text
from monitor.metrics.registry import FOUR_FIFTHS, INTERVAL_NAMES, METRICS
from monitor.outputs.report import as_of_text
from monitor.outputs.score_report import estimates_html
from monitor.outputs.svg import line_chart

GROUP_COLUMNS = (  # (report field, heading)
    ("n", "n"),
    ("favourable", "favourable"),
    ("selection_rate", "selection rate"),
    ("tpr", "TPR"),
    ("fpr", "FPR"),
    ("ppv", "PPV"),
    ("labelled", "labelled"),
    ("impact_ratio", "impact ratio"),
)
DISPARITY_ROWS = (
    ("disparate_impact_ratio", f"Disparate impact ratio (four-fifths rule: ≥ {FOUR_FIFTHS})"),
    ("statistical_parity_difference", "Statistical parity difference"),
    ("equalized_odds_difference", "Equalized-odds difference"),
    ("tpr_gap", "TPR gap (equal opportunity)"),
    ("fpr_gap", "FPR gap"),
    ("ppv_gap", "PPV gap (predictive parity)"),
    ("score_ks_distance", "Score distribution: Kolmogorov–Smirnov distance"),
    ("score_wasserstein_distance", "Score distribution: Wasserstein-1 distance"),
)

CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 0 auto; padding: 1rem;
       color: #1f1f1f; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid
#d0d4d9; } h3 { font-size: 1.05rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-variant-numeric: tabular-nums;
        font-size: .9rem; }
th, td { padding: .2rem .6rem; border-bottom: 1px solid #eceff1; text-align: right; }
th:first-child, td:first-child { text-align: left; }
caption { text-align: left; color: #5f6368; font-size: .85rem; }
.breach { color: #b3261e; font-weight: 700; }
.muted { color: #5f6368; font-size: .9rem; } .blind { color: #5f6368; font-style: italic; }
figure { margin: .5rem 0 1.5rem; } figcaption { color: #5f6368; font-size: .85rem; }
@media print { h2 { break-before: page; } }
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.{digits}f}"


def _cell(x: Any, *, attrs: str = "", cls: str = "") -> str:
    value = "" if x is None else repr(x) if isinstance(x, float) else str(x)
    c = f' class="{cls}"' if cls else ""
    return f'<td data-value="{_e(value)}"{attrs}{c}>{_e(_fmt(x))}</td>'


def _blind_cell(why: str, *, attrs: str = "") -> str:
    """The cell of a metric that cannot be measured: its reason, no number."""
    return f'<td data-value="" data-blind="{_e(why)}"{attrs} class="blind">blind: selective labels</td>'


def _interval(metric: str) -> str:
    return INTERVAL_NAMES[METRICS[metric].interval]


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M")


# -- the document --------------------------------------------------------------------------------
def _group_table(window: str, attr: str, a: dict[str, Any], confidence: float) -> str:
    head = "".join(f'<th scope="col">{_e(h)}</th>' for _, h in GROUP_COLUMNS)
    rows = []
    for g, r in a["groups"].items():
        cells = []
        for f, _ in GROUP_COLUMNS:
            if f in r.get("blind", {}):
                cells.append(_blind_cell(r["blind"][f], attrs=f' data-field="{f}"'))
                continue
            low = f == "impact_ratio" and r[f] is not None and r[f] < FOUR_FIFTHS
            cls = "breach" if low else ""
            cells.append(_cell(r[f], attrs=f' data-field="{f}"', cls=cls))
            if f == "selection_rate":
                ci = f"[{_fmt(r['selection_rate_lower'])}, {_fmt(r['selection_rate_upper'])}]"
                cells[-1] = cells[-1][:-5] + f' <span class="muted">{_e(ci)}</span></td>'
        mark = "" if r["eligible"] else " (n &lt; min)"
        rows.append(
            f'<tr data-group="{_e(g)}"><th scope="row">{_e(g)}{mark}</th>{"".join(cells)}</tr>'
        )
    return (
        f'<table data-window="{_e(window)}" data-attribute="{_e(attr)}" data-kind="groups">'
        f"<caption>Groups by {_e(attr)}, window {_e(window)} (selection rate with "
        f"{level_text(confidence)} Wilson interval)</caption>"
        f'<thead><tr><th scope="col">group</th>{head}</tr></thead><tbody>{"".join(rows)}'
        "</tbody></table>"
    )


def _disparity_table(window: str, attr: str, a: dict[str, Any], confidence: float) -> str:
    rows = []
    for key, label in DISPARITY_ROWS:
        d = a[key]
        v = d["value"]
        breach = key == "disparate_impact_ratio" and v is not None and v < FOUR_FIFTHS
        of = f" (most extreme of {d['pairs']} pairs)" if d.get("pairs", 1) > 1 else ""
        groups = f"{d['low_group']} vs {d['high_group']}{of}" if d["low_group"] else "–"
        if d.get("blind"):
            numbers = _blind_cell(d["blind"], attrs=' data-field="value"') + "".join(
                f'<td data-value="" data-field="{f}"></td>' for f in ("lower", "upper")
            )
        else:
            numbers = (
                _cell(d["value"], attrs=' data-field="value"', cls="breach" if breach else "")
                + _cell(d["lower"], attrs=' data-field="lower"')
                + _cell(d["upper"], attrs=' data-field="upper"')
            )
        rows.append(
            f'<tr data-metric="{key}"><th scope="row">{_e(label)}</th>{numbers}'
            f"<td>{_e(groups)}</td></tr>"
        )
    eps = _cell(a["differential_fairness_epsilon"], attrs=' data-field="value"')
    rows.append(
        '<tr data-metric="differential_fairness_epsilon"><th scope="row">Differential '
        f"fairness ε</th>{eps}<td></td><td></td><td></td></tr>"
    )
    return (
        f'<table data-window="{_e(window)}" data-attribute="{_e(attr)}" data-kind="disparities">'
        f"<caption>Disparities by {_e(attr)}, window {_e(window)} ({level_text(confidence)} "
        'intervals)</caption><thead><tr><th scope="col">metric</th><th scope="col">value'
        '</th><th scope="col">lower</th><th scope="col">upper</th><th scope="col">groups</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _threshold_text(t: dict[str, Any]) -> str:
    at = "never" if t["at"] is None else f"≥ {t['at']:.2f}"
    if t["p"] > 0:
        at += f"; [{t['lower']:.2f}, {t['at'] if t['at'] is not None else 1:.2f}) w.p. {t['p']:.2f}"
    return at + ("" if t["judged"] else " (not judged: too few)")


def _remedies_table(window: str, attr: str, a: dict[str, Any]) -> str:
    """Per-group thresholds that would meet each constraint, with the accuracy they cost."""
    rem = a.get("remedies")
    if not rem:
        return ""
    rows = []
    for constraint, by_kind in rem.items():
        for kind in ("deterministic", "randomized"):
            r = by_kind[kind]
            th = "; ".join(f"{g}: {_threshold_text(t)}" for g, t in r["thresholds"].items())
            rows.append(
                f'<tr data-constraint="{_e(constraint)}" data-kind="{kind}"><th scope="row">'
                f"{_e(constraint.replace('_', ' '))} ({by_kind['bound']}), {kind}</th>"
                f"<td>{'yes' if r['feasible'] else 'no'}</td>"
                + _cell(r["accuracy_before"], attrs=' data-field="accuracy_before"')
                + _cell(r["accuracy_after"], attrs=' data-field="accuracy_after"')
                + _cell(r["value_after"], attrs=' data-field="value_after"')
                + f'<td style="text-align:left">{_e(th)}</td></tr>'
            )
    return (
        f'<table data-window="{_e(window)}" data-attribute="{_e(attr)}" data-kind="remedies">'
        f"<caption>Per-group score thresholds (class 1 at or above) that would meet each "
        "constraint at the least loss of accuracy, on the labelled, scored decisions"
        '</caption><thead><tr><th scope="col">constraint</th><th scope="col">met</th>'
        '<th scope="col">accuracy now</th><th scope="col">after</th><th scope="col">value '
        'after</th><th scope="col">thresholds</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _tradeoff_table(window: str, attr: str, a: dict[str, Any]) -> str:
    """Seed 000's identity with the groups' numbers, when base rates differ."""
    t = a.get("base_rate_tradeoff")
    if not t or not t["applies"]:
        return ""
    cols = ("base_rate", "ppv", "tpr", "fpr", "fpr_identity", "fpr_at_reference_ppv_tpr")
    rows = "".join(
        f'<tr data-group="{_e(g)}"><th scope="row">{_e(g)}</th>'
        + "".join(_cell(v[c], attrs=f' data-field="{c}"') for c in cols)
        + "</tr>"
        for g, v in t["groups"].items()
    )
    return (
        f'<table data-window="{_e(window)}" data-attribute="{_e(attr)}" data-kind="tradeoff">'
        "<caption>Base rates differ, so predictive parity and equal error rates cannot all "
        "hold: FPR = b/(1−b) · (1−PPV)/PPV · TPR (Chouldechova 2017). With the PPV and TPR of "
        f"{_e(t['reference_group'])}, the FPRs would be as in the last column (spread "
        f"{_fmt(t['forced_fpr_gap'])}).</caption><thead><tr><th>group</th><th>base rate</th>"
        "<th>PPV</th><th>TPR</th><th>FPR</th><th>FPR by the identity</th><th>FPR with the "
        f"reference's PPV and TPR</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _plots(model: str, window: str, attr: str, series: Sequence[SeriesPoint]) -> str:
    if not series:
        return ""
    dir_line = {"disparate impact ratio": [(p.at, p.dir) for p in series]}
    band = [(p.at, p.dir_lower, p.dir_upper) for p in series]
    groups: dict[str, list[tuple[float, float | None]]] = {}
    for p in series:
        for g in p.selection_rates:
            groups.setdefault(g, [])
    for p in series:
        for g, pts in groups.items():
            pts.append((p.at, p.selection_rates.get(g)))
    what = f"{model} · {window} · {attr}"
    return (
        "<figure>"
        + line_chart(
            dir_line,
            title=f"Disparate impact ratio over time ({what}), with its interval and the "
            f"{FOUR_FIFTHS} line",
            band=band,
            hline=FOUR_FIFTHS,
            y_label="DIR",
        )
        + f"<figcaption>Disparate impact ratio of window {_e(window)} at each closed bucket, "
        "shaded: its confidence interval; dashed: the four-fifths bound.</figcaption></figure>"
        "<figure>"
        + line_chart(
            groups, title=f"Selection rate by group over time ({what})", y_label="selection rate"
        )
        + f"<figcaption>Selection rate per {_e(attr)} group over window {_e(window)}."
        "</figcaption></figure>"
    )


def render_html(
    report: dict[str, Any],
    series: Mapping[tuple[str, str, str], Sequence[SeriesPoint]],
    *,
    config: Config,
    title: str,
    source: str,
    generated: float,
) -> str:
    conf, level = config.confidence, level_text(config.confidence)
    parts = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">Generated {_e(_time(generated))} UTC from {_e(source)}. '
        f"Intervals are {level}: Wilson for rates, {_interval('disparate_impact_ratio')} for "
        f"the disparate impact ratio, {_interval('tpr_gap')} for differences. Groups with "
        "fewer predictions than min_samples take no part in the disparities.</p>",
        *(f'<p role="alert">Warning: {_e(w)}</p>' for w in report.get("warnings", [])),
        "<h2>Alerts</h2>",
    ]
    alerts = report.get("alerts", [])
    if alerts:
        items = []
        for a in alerts:
            where = ", ".join(f"{k}={v}" for k, v in a["labels"].items() if k != "alertname")
            ann = a["annotations"]
            items.append(
                f'<li data-alert="{_e(a["name"])}" data-state="{_e(a["state"])}"><strong>'
                f"{_e(a['name'])}</strong> {_e(a['state'])} at {_e(a['at'] + as_of_text(a))}"
                f" ({_e(where)})"
                f'<br>{_e(ann.get("summary", ""))}<br><span class="muted">'
                f"{_e(ann.get('description', ''))}</span></li>"
            )
        parts.append(f"<ul>{''.join(items)}</ul>")
    else:
        parts.append("<p>No alert fired.</p>")
    for model, mrep in report["models"].items():
        spec = config.models[model]
        parts.append(f'<h2 data-model="{_e(model)}">Model {_e(model)}</h2>')
        parts.append(
            f'<p class="muted">Favourable prediction: {spec.favourable}; bucket '
            f"{spec.bucket}s; min_samples {spec.min_samples}.</p>"
        )
        for wname, w in mrep["windows"].items():
            parts.append(
                f"<h3>Window {_e(wname)}: {_e(w['start'] or '–')} → {_e(w['end'] or '–')}</h3>"
            )
            for attr, a in w["attributes"].items():
                parts.append(f"<h4>{_e(attr)}</h4>")
                parts.append(_group_table(wname, attr, a, conf))
                parts.append(_disparity_table(wname, attr, a, conf))
                parts.append(_remedies_table(wname, attr, a))
                parts.append(_tradeoff_table(wname, attr, a))
                parts.append(estimates_html(wname, attr, a))
                parts.append(_plots(model, wname, attr, series.get((model, wname, attr), ())))
    c = report["counters"]
    parts.append('<h2>Events</h2><table data-kind="counters"><tbody>')
    left_out = {"csv_rows_left_out_by_where": report.get("csv_rows_excluded")}  # never seen
    for k, v in {**c, **(left_out if "csv_rows_excluded" in report else {})}.items():
        cell = _cell(v, attrs=f' data-field="{_e(k)}"')
        parts.append(f'<tr><th scope="row">{_e(k)}</th>{cell}</tr>')
    parts.append("</tbody></table>")
    if report.get("invalid"):
        parts.append(
            "<p>Dead-lettered: "
            + _e(", ".join(f"{k} {v}" for k, v in sorted(report["invalid"].items())))
            + "</p>"
        )
    # "<" is only in JSON strings: as \u003c no group name can end the script or open "<!--"
    data = json.dumps(report, allow_nan=False).replace("<", "\\u003c")
    parts.append(f'<script type="application/json" id="report-data">{data}</script>')
    parts.append("</main></body></html>")
    return "\n".join(parts)


def write_html(
    path: str,
    report: dict[str, Any],
    series: Mapping[tuple[str, str, str], Sequence[SeriesPoint]],
    *,
    config: Config,
    title: str,
    source: str,
) -> None:
    text = render_html(
        report,
        series,
        config=config,
        title=title,
        source=source,
        generated=datetime.now(tz=UTC).timestamp(),
    )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
