"""What ``fairness-monitor gate`` shows: a short summary for the terminal and a JUnit XML report,
so a CI system lists each rule × attribute set as a test, with the numbers of a failure (the
groups, their rates, intervals and sample sizes, the metric's value, interval and bound).

The XML follows the JUnit layout CI systems read (Jenkins' junit-10 schema, as GitLab, GitHub
Actions reporters and Azure read it): ``testsuites`` > one ``testsuite`` per model >
``properties`` and one ``testcase`` per check, with ``failure`` or ``skipped`` (insufficient data,
blind) and the details in ``system-out``.
"""

from __future__ import annotations

import math
import re
import socket
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from monitor.app.gate import GateResult
from monitor.app.gate_rules import Check, GroupRow
from monitor.metrics.intervals import ci_text, level_text
from monitor.metrics.registry import METRICS
from monitor.outputs.report import printable

# characters XML 1.0 cannot carry (group names come from the data)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_MARK = {"fail": "FAIL", "pass": "pass", "insufficient": "skip", "blind": "skip"}
# event counters that mean some input was not counted as it stands
_ODD = (
    "duplicate_predictions", "late_predictions", "duplicate_labels", "late_labels",
    "early_labels", "orphan_labels", "evicted_pending", "expired_pending",
)  # fmt: skip
# each compared rate's denominator, named by its cells ("n", "tp+fn", …)
_DENOMINATOR = {m.rate: "+".join(m.counts) for m in METRICS.values() if m.rate}


def _x(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _f(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "n/a"


def _iso(t: float) -> str:
    if not math.isfinite(t):
        return "n/a"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def headline(c: Check, confidence: float) -> str:
    """``metric value, CI [l, u], op bound: low vs high`` (what a failure's message says)."""
    r = c.rule
    pair = f": {c.low_group} vs {c.high_group}" if c.low_group is not None else ""
    if c.low_group is not None and c.low_group == c.high_group:
        pair = ": every judged group has the same rate"
    if not math.isfinite(c.value):
        what = "not measured" if c.status == "blind" else "undefined"
        return f"{r.metric} {what} (bound {r.op} {r.bound}){pair}"
    past = " wholly" if c.status == "fail" else ""
    where = "below" if r.op == "<" else "above"
    verdict = f"{past} {where}" if c.status == "fail" else f", bound {r.op}"
    metric = r.metric if c.basis in ("", r.metric) else f"{r.metric} (its {c.basis})"
    return (
        f"{metric} {_f(c.value)}, {ci_text(confidence, c.pairs)} [{_f(c.lower)}, {_f(c.upper)}]"
        f"{verdict} {r.bound}{pair}"
    )


def _group_text(g: GroupRow) -> str:
    parts = [
        f"{rate} {g.blind[rate]} ({_DENOMINATOR[rate]}={den})"
        if rate in g.blind
        else f"{rate} {_f(v)} [{_f(lo)}, {_f(hi)}] ({_DENOMINATOR[rate]}={den})"
        for rate, (v, lo, hi, den) in g.rates.items()
    ]
    tail = "" if "selection_rate" in g.rates else f"; n={g.n}"
    return f"{g.name}: " + "; ".join(parts) + tail + (f"; scored={g.scored}" if g.scored else "")


def _short_of(g: GroupRow) -> str:
    """The denominators a left-out group has (found by a review: only ``n=82`` was shown when
    its 12 positives were what it lacked)."""
    dens = [f"{_DENOMINATOR[rate]}={den}" for rate, (_, _, _, den) in g.rates.items()]
    return ", ".join(
        [*dict.fromkeys([f"n={g.n}", *dens])]
        + ([f"scored={g.scored}"] if g.scored is not None else [])
    )


def details(c: Check, confidence: float) -> str:
    """Every number behind a check: the verdict, each group's rates, who was not judged."""
    r = c.rule
    lines = [
        f"rule {r.name}: {r.metric} {r.op} {r.bound}, significant at {level_text(confidence)} "
        f"(the whole interval past the bound), min_samples {r.min_samples}",
        headline(c, confidence),
    ]
    if c.note:
        lines.append(c.note)
    lines += ["groups:"] + [f"  {_group_text(g)}" for g in c.groups if g.judged]
    short = c.insufficient_groups
    if short:
        lines.append("insufficient data (below min_samples, not judged):")
        lines += [f"  {_group_text(g)}" for g in short]
    return "\n".join(lines)


def summary(res: GateResult) -> str:
    """The terminal summary: one line per model and per check, then the verdict."""
    out = [
        f"fairness gate: whole data per model, {level_text(res.confidence)} confidence, a rule fails "
        "only when its whole interval is past the bound"
    ]
    for name, info in res.models.items():
        windows = ", ".join(info.whole_windows) or "none"
        out.append(
            f"model {name}: {info.predictions} predictions ({info.labelled} labelled), "
            f"{_iso(info.start)} → {_iso(info.end)}; configured windows as long: {windows}"
        )
        for c in (c for c in res.checks if c.model == name):
            line = f"  {_MARK[c.status]}  {c.rule.name} [{c.attribute}]  "
            line += headline(c, res.confidence) if c.status in ("fail", "pass") else c.note
            if c.status in ("fail", "pass") and c.note:
                line += f" ({c.note})"
            out.append(line)
            short = c.insufficient_groups
            if short and c.status in ("fail", "pass"):
                names = ", ".join(f"{g.name} ({_short_of(g)})" for g in short)
                out.append(f"        not judged, insufficient data: {names}")
    if res.no_data:
        out.append(f"no predictions in the input, not judged: model {', '.join(res.no_data)}")
    odd = [f"{k} {v}" for k in _ODD if (v := res.counters.get(k, 0))]
    if odd:  # e.g. labels whose prediction id matches none: the two files may not match
        out.append("events not counted: " + ", ".join(odd))
    if res.dead:
        out.append(f"{len(res.dead)} unreadable record(s) left out (--allow-invalid)")
    n, failed = len(res.checks), len(res.failed)
    skipped = sum(c.status in ("insufficient", "blind") for c in res.checks)
    tail = f"; {skipped} not judged (insufficient data or blind)" if skipped else ""
    verdict = "FAILED" if failed else "passed"
    out.append(
        f"gate {verdict}: {failed} of {n} checks breached significantly{tail} "
        f"(exit {res.exit_code})"
    )
    # group and model names come from the data: no control character may forge a line (a
    # CI's "::error" workflow command after a \n or \r) or drive the terminal
    return "\n".join(map(printable, out))


def junit_xml(res: GateResult, *, elapsed: float = 0.0) -> bytes:
    """The JUnit XML report: a testsuite per model, a testcase per rule × attribute set."""
    skipped = [c for c in res.checks if c.status in ("insufficient", "blind")]
    root = ET.Element(
        "testsuites",
        name="fairness-monitor gate",
        tests=str(len(res.checks)),
        failures=str(len(res.failed)),
        errors="0",
        time=f"{elapsed:.3f}",
    )
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    for name, info in res.models.items():
        checks = [c for c in res.checks if c.model == name]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_x(name),
            tests=str(len(checks)),
            failures=str(sum(c.status == "fail" for c in checks)),
            errors="0",
            skipped=str(sum(c in skipped for c in checks)),
            timestamp=stamp,
            hostname=_x(socket.gethostname()),
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("confidence", str(res.confidence)),
            ("predictions", str(info.predictions)),
            ("labelled", str(info.labelled)),
            ("data_start", _iso(info.start)),
            ("data_end", _iso(info.end)),
            ("windows_as_long_as_the_data", ",".join(info.whole_windows)),
        ):
            ET.SubElement(props, "property", name=key, value=_x(value))
        for c in checks:
            case = ET.SubElement(
                suite,
                "testcase",
                name=_x(f"{c.rule.name} [{c.attribute}]"),
                classname=_x(f"fairness.{name}.{c.attribute}"),
                time="0.000",
            )
            text = _x(details(c, res.confidence))
            if c.status == "fail":  # the numbers in the failure, which CI systems show
                fail = ET.SubElement(
                    case, "failure", message=_x(headline(c, res.confidence)), type=c.rule.metric
                )
                fail.text = text
                continue
            if c.status in ("insufficient", "blind"):
                ET.SubElement(case, "skipped", message=_x(c.note), type=c.status)
            ET.SubElement(case, "system-out").text = text
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body


def write_junit(path: str | Path, res: GateResult, *, elapsed: float = 0.0) -> None:
    Path(path).write_bytes(junit_xml(res, elapsed=elapsed))
