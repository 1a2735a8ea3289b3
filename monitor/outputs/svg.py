"""Inline SVG line charts for the audit report: no script, no stylesheet, nothing fetched.

Gaps are left where a value is undefined (no line is drawn across missing data), and an
interval can be drawn as a shaded band around a line.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

PALETTE = ("#1a73e8", "#e8710a", "#188038", "#9334e6", "#d01884", "#12b5cb", "#5f6368")


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M")


def line_chart(
    lines: Mapping[str, Sequence[tuple[float, float | None]]],
    *,
    title: str,
    band: Sequence[tuple[float, float | None, float | None]] = (),
    hline: float | None = None,
    y_label: str = "",
    width: int = 720,
    height: int = 240,
) -> str:
    """An inline SVG line chart over time; gaps where a value is undefined."""
    pts = [(t, v) for s in lines.values() for t, v in s if v is not None]
    pts += [(t, v) for t, lo, hi in band for v in (lo, hi) if v is not None]
    if not pts:
        return f'<p class="muted">{_e(title)}: no data.</p>'
    ts = [t for t, _ in pts]
    vs = [v for _, v in pts] + ([hline] if hline is not None else [])
    t0, t1 = min(ts), max(ts)
    lo_v, hi_v = min(vs), max(vs)
    pad = (hi_v - lo_v) * 0.05 or 0.05
    lo_v, hi_v = max(0.0, lo_v - pad), hi_v + pad
    left, right, top, bottom = 52, 12, 10, 38
    pw, ph = width - left - right, height - top - bottom

    def x(t: float) -> float:
        return left + (pw * (t - t0) / (t1 - t0) if t1 > t0 else pw / 2)

    def y(v: float) -> float:
        return top + ph * (1 - (v - lo_v) / (hi_v - lo_v))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{_e(title)}">',
        f"<title>{_e(title)}</title>",
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#d0d4d9"/>',
    ]
    for i in range(5):  # y ticks
        v = lo_v + (hi_v - lo_v) * i / 4
        out.append(
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">'
            f"{v:.2f}</text>"
            f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            'stroke="#eceff1"/>'
        )
    for i in range(4):  # x ticks
        t = t0 + (t1 - t0) * i / 3
        anchor = ("start", "middle", "middle", "end")[i]
        out.append(
            f'<text x="{x(t):.1f}" y="{height - 20}" font-size="11" text-anchor="{anchor}">'
            f"{_e(_time(t))}</text>"
        )
    if y_label:
        out.append(
            f'<text x="12" y="{top + ph / 2:.1f}" font-size="11" text-anchor="middle" '
            f'transform="rotate(-90 12 {top + ph / 2:.1f})">{_e(y_label)}</text>'
        )
    spans = _runs((t, lo, hi) for t, lo, hi in band)
    for run in spans:
        upper = " ".join(f"{x(t):.1f},{y(hi):.1f}" for t, _, hi in run)
        lower = " ".join(f"{x(t):.1f},{y(lo):.1f}" for t, lo, _ in reversed(run))
        out.append(f'<polygon points="{upper} {lower}" fill="#1a73e8" fill-opacity="0.15"/>')
    if hline is not None:
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{y(hline):.1f}" y2="{y(hline):.1f}" '
            f'stroke="#b3261e" stroke-dasharray="6 4" data-bound="{hline}"/>'
            f'<text x="{left + pw - 4}" y="{y(hline) - 4:.1f}" font-size="11" fill="#b3261e" '
            f'text-anchor="end">{hline}</text>'
        )
    for i, (name, series) in enumerate(lines.items()):
        color = PALETTE[i % len(PALETTE)]
        for run in _runs((t, v, v) for t, v in series):
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v, _ in run)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6"/>'
            )
        lx = left + 8 + 110 * i
        out.append(
            f'<rect x="{lx}" y="{height - 12}" width="10" height="10" fill="{color}"/>'
            f'<text x="{lx + 14}" y="{height - 3}" font-size="11">{_e(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _runs(
    points: Iterable[tuple[float, float | None, float | None]],
) -> list[list[tuple[float, float, float]]]:
    """Split a series at undefined values: no line is drawn across missing data."""
    runs: list[list[tuple[float, float, float]]] = [[]]
    for t, lo, hi in points:
        if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((t, lo, hi))
    return [r for r in runs if r]
