"""Inline SVG charts for the HTML report: no plotting library, no network, small files.

Every function returns SVG markup as a string with all text escaped (names from traces and
models are untrusted). Hover text uses SVG ``<title>`` elements (the browser's tooltip);
``data-*`` attributes carry the values for the report's small script.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip
MAX_POINTS = 2000
#: characters of a bar label that fit the 260 px label column at 11 px (about 7 px each)
LABEL_CHARS = 36
#: the histogram's binned range ends at the higher of this quantile and median + k x MAD
#: share of values beyond median + 10 MAD that is still "a few outliers"
HIST_TAIL_SHARE = 0.02
HIST_QUANTILE = 0.995
#: hi / lo of a histogram's range from which its bins are log-spaced
LOG_BINS_RANGE = 20.0
HIST_MADS = 10.0


def _e(text: Any) -> str:
    return escape(str(text), quote=True)


def fmt(v: float) -> str:
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000 or a < 0.01:
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out = []
    v = start
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def _tick_labels(ticks: Sequence[float]) -> list[str]:
    """One format for all ticks of an axis ("5" and "10", "0.5" and "1.0", never "5" next
    to "10.0"): the decimals the step needs, scientific for very large or small steps."""
    if len(ticks) < 2:
        return [fmt(t) for t in ticks]
    step = ticks[1] - ticks[0]
    big = max(abs(t) for t in ticks)
    if step < 1e-4 or big >= 1e7:
        return [f"{t:.2e}" if t else "0" for t in ticks]
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    # a tick that should be 0 but is -1e-17 would print as "-0.0"
    return [f"{0.0 if abs(t) < step * 1e-6 else t:.{decimals}f}" for t in ticks]


def shorten(name: str, limit: int = LABEL_CHARS) -> str:
    """At most ``limit`` characters with the middle elided: kernel and node names differ at
    both ends (namespace or layer prefix, template or shape suffix), so keep both."""
    if len(name) <= limit:
        return name
    head = limit // 2
    tail = limit - head - 1
    return name[:head] + "…" + name[len(name) - tail :]


def _open(chart_id: str, width: int, height: int, label: str, attrs: str = "") -> str:
    return (
        f'<svg id="{_e(chart_id)}" class="chart" role="img" aria-label="{_e(label)}" '
        f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMinYMin meet" '
        f'xmlns="http://www.w3.org/2000/svg"{attrs}>'
    )


def _node_ref(label: str, node: Any) -> tuple[str, str]:
    """The ``data-node`` attribute and hover line naming the profiled (ORT) node behind a
    mark labelled by its original ONNX node; nothing when the two names agree."""
    if not isinstance(node, str) or not node or node == label:
        return "", ""
    return f' data-node="{_e(node)}"', f"\nORT node: {_e(node)}"


def hbar_chart(
    chart_id: str,
    rows: Sequence[tuple[str, float, str]],
    unit: str,
    label: str,
    width: int = 760,
    nodes: Sequence[str | None] | None = None,
) -> str:
    """Horizontal bars: (name, value, hover detail) in the given order; ``nodes``, one per
    row, the profiled node behind a bar named otherwise (its ``data-node``)."""
    bar_h, gap, left, right = 18, 4, 260, 90
    height = max(1, len(rows)) * (bar_h + gap) + 10
    vmax = max((v for _, v, _ in rows), default=0.0) or 1.0
    scale = (width - left - right) / vmax
    parts = [_open(chart_id, width, height, label)]
    for i, (name, value, detail) in enumerate(rows):
        y = 5 + i * (bar_h + gap)
        w = max(1.0, value * scale)
        short = shorten(name)
        node_attr, node_tip = _node_ref(name, nodes[i] if nodes and i < len(nodes) else None)
        parts.append(
            f'<g class="bar" data-name="{_e(name)}" data-value="{value:.6g}"{node_attr}>'
            f"<title>{_e(name)}: {fmt(value)} {_e(unit)}{_e(detail)}{node_tip}</title>"
            f'<text x="{left - 6}" y="{y + bar_h - 5}" text-anchor="end" class="lbl">'
            f"{_e(short)}</text>"
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" '
            f'fill="{PALETTE[i % len(PALETTE)]}"/>'
            f'<text x="{left + w + 4:.1f}" y="{y + bar_h - 5}" class="val">'
            f"{fmt(value)} {_e(unit)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


@dataclass
class Axis:
    lo: float
    hi: float
    px0: float
    px1: float
    log: bool = False

    def __call__(self, v: float) -> float:
        if self.log:
            v, lo, hi = math.log10(max(v, 1e-300)), math.log10(self.lo), math.log10(self.hi)
        else:
            lo, hi = self.lo, self.hi
        span = (hi - lo) or 1.0
        return self.px0 + (v - lo) / span * (self.px1 - self.px0)


def histogram_range(values: Sequence[float]) -> tuple[float, float]:
    """(low, high) of the histogram's bins: from the minimum to median + 10 x MAD, unless
    more than ``HIST_TAIL_SHARE`` of the values lie above that; then to the 99.5th
    percentile. Capped at the maximum.

    Linear bins from min to max put 199 of 200 iterations into the first bin when one
    iteration is an outlier, and a noisy run has more than 0.5 % of them (preemptions of
    milliseconds on a 60 us model), so the quantile alone is no cure. A few values beyond
    the robust range are outliers that the overflow bar counts; more than a few are a real
    second mode or a heavy tail, which the bins must show.
    """
    s = sorted(values)
    n = len(s)
    med = statistics.median(s)
    mad = statistics.median(abs(v - med) for v in s)
    robust = med + HIST_MADS * mad
    beyond = n - bisect.bisect_right(s, robust)
    if mad > 0 and beyond <= HIST_TAIL_SHARE * n:
        return s[0], min(s[-1], robust)
    # the order statistic, not an interpolation: one huge value must not pull it up
    q = s[int(HIST_QUANTILE * (n - 1))]
    return s[0], min(s[-1], max(q, robust))


def histogram(
    chart_id: str,
    values: Sequence[float],
    unit: str,
    label: str,
    bins: int = 40,
    item: str = "iteration",
) -> str:
    """Bins over :func:`histogram_range`; values above it go into one overflow bar on the
    right, drawn apart in another colour and labelled "> X unit". ``item``: what a value
    is (hover text "3 iteration(s)", y axis "iterations")."""
    width, height, left, bottom, top = 760, 220, 50, 30, 10
    if not values:
        return ""
    lo, hi = histogram_range(values)
    over = [v for v in values if v > hi]
    if hi <= lo:
        hi = lo + max(abs(lo) * 1e-6, 1e-9)
    # a range spanning more than LOG_BINS_RANGE x (a 60 us body and 4 ms scheduler ticks)
    # gets log-spaced bins, so that both the body and the far mode are resolved
    log = lo > 0 and hi / lo >= LOG_BINS_RANGE
    f, f_inv = (math.log, math.exp) if log else (float, float)
    a, b = f(lo), f(hi)
    counts = [0] * bins
    for v in values:
        if v <= hi:
            counts[min(bins - 1, int((f(v) - a) / (b - a) * bins))] += 1
    cmax = max(*counts, len(over))
    plot_right = width - (70 if over else 10)
    x = Axis(lo, hi, left, plot_right, log=log)
    y = Axis(0, cmax, height - bottom, top)
    parts = [_open(chart_id, width, height, label)]
    bw = (plot_right - left) / bins
    for i, c in enumerate(counts):
        b0 = f_inv(a + i * (b - a) / bins)
        b1 = f_inv(a + (i + 1) * (b - a) / bins)
        parts.append(
            f'<rect class="bin" x="{left + i * bw:.1f}" y="{y(c):.1f}" width="{bw - 1:.1f}" '
            f'height="{height - bottom - y(c):.1f}" fill="{PALETTE[0]}">'
            f"<title>{fmt(b0)}-{fmt(b1)} {_e(unit)}: {c} {_e(item)}(s)</title></rect>"
        )
    if over:
        ox, n = width - 52, len(over)
        parts.append(
            f'<rect class="bin overflow" x="{ox}" y="{y(n):.1f}" width="34" '
            f'height="{height - bottom - y(n):.1f}" fill="{PALETTE[2]}" '
            f'data-count="{n}"><title>&gt; {fmt(hi)} {_e(unit)}: {n} {_e(item)}(s), '
            f"up to {fmt(max(over))} {_e(unit)}</title></rect>"
            f'<text class="tick" x="{ox + 17}" y="{height - bottom + 14}" '
            f'text-anchor="middle">&gt; {fmt(hi)} {_e(unit)}</text>'
        )
    parts.append(_x_axis(x, height - bottom, f"{unit}, log scale" if log else unit))
    parts.append(_y_axis(y, left, f"{item}s"))
    parts.append("</svg>")
    return "".join(parts)


def _log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks of each decade within [lo, hi] (only the 1s when that is too many)."""
    ticks = [
        m * 10.0**e
        for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
        for m in (1, 2, 5)
        if lo <= m * 10.0**e <= hi * (1 + 1e-9)
    ]
    if len(ticks) > 8:
        ticks = [t for t in ticks if math.isclose(10 ** round(math.log10(t)), t)]
    return ticks or [lo, hi]


def _x_ticks(x: Axis, y_px: float) -> str:
    out = []
    ticks = _log_ticks(x.lo, x.hi) if x.log else _ticks(x.lo, x.hi)
    labels = [fmt(t) for t in ticks] if x.log else _tick_labels(ticks)
    for t, text in zip(ticks, labels, strict=True):
        px = x(t)
        half = len(text) * 3.5  # about 7 px per character at 11 px
        # a centred label at either end of the axis runs past the chart's edge
        anchor = "end" if x.px1 - px < half else "start" if px - x.px0 < half else "middle"
        out.append(
            f'<text class="tick" x="{px:.1f}" y="{y_px + 14}" text-anchor="{anchor}">{text}</text>'
        )
    return "".join(out)


def _x_axis(x: Axis, y_px: float, unit: str) -> str:
    return (
        f'<line class="axis" x1="{x.px0}" y1="{y_px}" x2="{x.px1}" y2="{y_px}"/>'
        f"{_x_ticks(x, y_px)}"
        f'<text class="unit" x="{x.px1}" y="{y_px + 27}" text-anchor="end">{_e(unit)}</text>'
    )


def _y_axis(y: Axis, x_px: float, unit: str) -> str:
    out = [f'<line class="axis" x1="{x_px}" y1="{y.px0}" x2="{x_px}" y2="{y.px1}"/>']
    ticks = _ticks(y.lo, y.hi, 4)
    for t, text in zip(ticks, _tick_labels(ticks), strict=True):
        out.append(
            f'<text class="tick" x="{x_px - 4}" y="{y(t) + 4:.1f}" text-anchor="end">{text}</text>'
        )
    out.append(f'<text class="unit" x="{x_px + 4}" y="{y.px1 + 2}">{_e(unit)}</text>')
    return "".join(out)


def downsample(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """At most ``MAX_POINTS`` points: min and max of each bucket, so spikes stay visible."""
    n = len(xs)
    if n <= MAX_POINTS:
        return list(xs), list(ys)
    buckets = MAX_POINTS // 2
    ox: list[float] = []
    oy: list[float] = []
    for b in range(buckets):
        i0, i1 = b * n // buckets, (b + 1) * n // buckets
        seg = range(i0, max(i1, i0 + 1))
        lo_i = min(seg, key=lambda i: ys[i])
        hi_i = max(seg, key=lambda i: ys[i])
        for i in sorted({lo_i, hi_i}):
            ox.append(xs[i])
            oy.append(ys[i])
    return ox, oy


def line_chart(
    chart_id: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    x_unit: str,
    y_unit: str,
    label: str,
    shade: Sequence[tuple[float, float, str]] = (),
    x_range: tuple[float, float] | None = None,
    height: int = 200,
    align: str | None = None,
) -> str:
    """Lines (name, xs, ys) over a shared x axis; ``shade`` = (x0, x1, label) bands.

    The svg carries its value<->pixel mapping (``data-x0 x1 px0 px1 y0 y1 py0 py1``) and
    each polyline its name and unit, so the report's script reads values off the points
    (crosshair) and zooms the plotted group; charts with the same ``align`` share the
    crosshair and the zoom. Lines and bands sit in a clipped ``g.plot`` (zoomed by a
    transform), the x tick labels in ``g.xticks`` (rewritten on zoom).
    """
    width, left, bottom, top = 760, 60, 30, 10
    all_x = [v for _, xs, _ in series for v in xs]
    if not all_x:
        return ""
    x0, x1 = x_range or (min(all_x), max(all_x))
    if x1 <= x0:
        x1 = x0 + 1
    series = [
        (
            name,
            [a for a in xs if x0 <= a <= x1],
            [b for a, b in zip(xs, ys, strict=True) if x0 <= a <= x1],
        )
        for name, xs, ys in series
    ]
    all_y = [v for _, _, ys in series for v in ys]
    if not all_y:
        return ""
    y1 = max(all_y) * 1.05 or 1.0
    x = Axis(x0, x1, left, width - 10)
    y = Axis(0, y1, height - bottom, top)
    base = height - bottom
    attrs = (
        f' data-x0="{float(x0)!r}" data-x1="{float(x1)!r}" data-px0="{x.px0}"'
        f' data-px1="{x.px1}" data-y0="0" data-y1="{float(y1)!r}" data-py0="{y.px0}"'
        f' data-py1="{y.px1}"' + (f' data-align="{_e(align)}"' if align else "")
    )
    clip = f"{chart_id}-clip"
    parts = [
        _open(chart_id, width, height, label, attrs),
        f'<clipPath id="{_e(clip)}"><rect x="{x.px0}" y="{top}" width="{x.px1 - x.px0}" '
        f'height="{base - top}"/></clipPath>'
        # the clip sits outside the zoomed group: inside, it would be scaled with it
        f'<g clip-path="url(#{_e(clip)})"><g class="plot">',
    ]
    for s0, s1, text in shade:
        parts.append(
            f'<rect class="shade" x="{x(s0):.1f}" y="{top}" width="{max(1.0, x(s1) - x(s0)):.1f}" '
            f'height="{base - top}"><title>{_e(text)}</title></rect>'
        )
    for i, (name, xs, ys) in enumerate(series):
        dx, dy = downsample(xs, ys)
        pts = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in zip(dx, dy, strict=True))
        parts.append(
            f'<polyline class="series" data-name="{_e(name)}" data-unit="{_e(y_unit)}" '
            f'fill="none" stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="1.2" '
            f'vector-effect="non-scaling-stroke" points="{pts}">'
            f"<title>{_e(name)}</title></polyline>"
        )
    parts.append("</g></g>")
    parts.append(
        f'<line class="axis" x1="{x.px0}" y1="{base}" x2="{x.px1}" y2="{base}"/>'
        f'<g class="xticks" data-y="{base + 14}">{_x_ticks(x, base)}</g>'
        f'<text class="unit" x="{x.px1}" y="{base + 27}" text-anchor="end">{_e(x_unit)}</text>'
    )
    parts.append(_y_axis(y, left, y_unit))
    for i, (name, _, _) in enumerate(series):
        parts.append(
            f'<text class="legend" x="{left + 40 + i * 150}" y="{top + 12}" '
            # a style, not a fill attribute: the page's ".legend" rule would override that
            f'style="fill:{PALETTE[i % len(PALETTE)]}">{_e(name)}</text>'
        )
    parts.append(
        f'<line class="xhair" x1="0" y1="{top}" x2="0" y2="{base}" visibility="hidden"/>'
        f'<rect class="sel" x="0" y="{top}" width="0" height="{base - top}" '
        'visibility="hidden"/></svg>'
    )
    return "".join(parts)


def roofline(
    chart_id: str,
    points: Sequence[dict[str, Any]],
    peak_flops: float | None,
    peak_bytes: float | None,
    label: str,
    levels: Sequence[tuple[str, float]] = (),
) -> str:
    """Log-log roofline: points (intensity FLOP/B, achieved FLOP/s) and the ceilings; a
    point is named by its ``label`` when it has one (its profiled ``name`` on hover).

    ``levels``: (name, bytes/s) of the cache levels (the cache-aware roofline), each drawn
    as its own bandwidth roof under the compute roof, dashed; ``peak_bytes`` is DRAM's.
    Points above their roof (``above_roof``) are drawn hollow and say so."""
    width, height, left, bottom, top = 760, 320, 70, 35, 10
    pts = [
        p
        for p in points
        if (p.get("intensity") or 0) > 0 and (p.get("achieved_flops_per_s") or 0) > 0
    ]
    if not pts:
        return ""
    xs = [p["intensity"] for p in pts]
    ys = [p["achieved_flops_per_s"] for p in pts]
    x_lo, x_hi = min(xs) / 4, max(xs) * 4
    y_lo, y_hi = min(ys) / 4, max(ys) * 4
    if peak_flops:
        y_hi = max(y_hi, peak_flops * 2)
    if peak_flops and peak_bytes:
        ridge = peak_flops / peak_bytes
        x_lo, x_hi = min(x_lo, ridge / 8), max(x_hi, ridge * 8)
    cache_roofs = [(n, b) for n, b in levels if b and b > 0 and b != peak_bytes]
    if peak_flops and cache_roofs:
        x_lo = min(x_lo, min(peak_flops / b for _, b in cache_roofs) / 8)
    x = Axis(x_lo, x_hi, left, width - 10, log=True)
    y = Axis(y_lo, y_hi, height - bottom, top, log=True)
    parts = [_open(chart_id, width, height, label)]
    if peak_flops and peak_bytes:
        ridge = peak_flops / peak_bytes
        mem = f"{x(x_lo):.1f},{y(peak_bytes * x_lo):.1f} {x(ridge):.1f},{y(peak_flops):.1f}"
        parts.append(
            f'<polyline class="roof" points="{mem} {x(x_hi):.1f},{y(peak_flops):.1f}">'
            f"<title>ceilings: {fmt(peak_flops / 1e9)} GFLOP/s, "
            f"{fmt(peak_bytes / 1e9)} GB/s, ridge {fmt(ridge)} FLOP/B</title></polyline>"
        )
    elif peak_flops:
        parts.append(
            f'<line class="roof" x1="{x(x_lo):.1f}" y1="{y(peak_flops):.1f}" x2="{x(x_hi):.1f}" '
            f'y2="{y(peak_flops):.1f}"><title>compute ceiling</title></line>'
        )
    for name, bw in cache_roofs:
        if not peak_flops:
            break
        knee = peak_flops / bw
        # from the left edge (or where the line enters the chart) up to its ridge point
        x0 = max(x_lo, y_lo / bw)
        parts.append(
            f'<polyline class="roof level" stroke-dasharray="5 3" points="{x(x0):.1f},'
            f'{y(bw * x0):.1f} {x(knee):.1f},{y(peak_flops):.1f}"><title>{_e(name)} roof: '
            f"{fmt(bw / 1e9)} GB/s, ridge {fmt(knee)} FLOP/B</title></polyline>"
            f'<text class="tick" x="{x(x0) + 4:.1f}" y="{y(bw * x0) - 4:.1f}">{_e(name)}</text>'
        )
    for p in pts:
        share = p.get("time_share") or 0.0
        r = 3 + 9 * math.sqrt(max(0.0, min(1.0, share)))
        cx, cy = x(p["intensity"]), y(p["achieved_flops_per_s"])
        name = str(p.get("label") or p.get("name"))
        node_attr, node_tip = _node_ref(name, p.get("name"))
        level = f", data in {_e(p['memory_level'])}" if p.get("memory_level") else ""
        above = p.get("above_roof")
        parts.append(
            f'<circle class="pt{" above" if above else ""}" cx="{cx:.1f}" cy="{cy:.1f}" '
            f'r="{r:.1f}" data-name="{_e(name)}"{node_attr}><title>{_e(name)} '
            f"({_e(p.get('op_type') or p.get('level') or '')}): "
            f"{fmt(p['intensity'])} FLOP/B, {fmt(p['achieved_flops_per_s'] / 1e9)} GFLOP/s, "
            f"{share:.1%} of time, bound {_e(p.get('bound') or 'unknown')}{level}"
            f"{', above its roof: a calibration problem' if above else ''}{node_tip}</title>"
            "</circle>"
        )
    for t in range(math.ceil(math.log10(x_lo)), math.floor(math.log10(x_hi)) + 1):
        parts.append(
            f'<text class="tick" x="{x(10.0**t):.1f}" y="{height - bottom + 14}" '
            f'text-anchor="middle">1e{t}</text>'
        )
    for t in range(math.ceil(math.log10(y_lo)), math.floor(math.log10(y_hi)) + 1):
        parts.append(
            f'<text class="tick" x="{left - 4}" y="{y(10.0**t) + 4:.1f}" text-anchor="end">'
            f"1e{t}</text>"
        )
    parts.append(
        f'<text class="unit" x="{width - 10}" y="{height - 5}" text-anchor="end">'
        "arithmetic intensity (FLOP/byte)</text>"
        f'<text class="unit" x="{left + 4}" y="{top + 10}">FLOP/s</text></svg>'
    )
    return "".join(parts)


def icicle(chart_id: str, root: dict[str, Any], unit: str, label: str) -> str:
    """Icicle (top-down flame graph): ``{name, value, children: [...]}``, one row per level;
    each child's width is its share of its parent's. A cell's optional ``node`` (the
    profiled node behind a cell named otherwise) goes into its hover text and ``data-node``."""
    width, row_h = 760, 22
    depth = _depth(root)
    height = depth * row_h + 4
    parts = [_open(chart_id, width, height, label)]
    total = root.get("value") or 0.0

    def walk(node: dict[str, Any], x0: float, w: float, level: int, color: int) -> None:
        if w < 0.5:
            return
        y = level * row_h
        name = str(node.get("name"))
        value = node.get("value") or 0.0
        share = value / total if total else 0.0
        node_attr, node_tip = _node_ref(name, node.get("node"))
        parts.append(
            f'<g class="cell" data-name="{_e(name)}"{node_attr}><rect x="{x0:.1f}" y="{y}" '
            f'width="{w:.1f}" height="{row_h - 2}" fill="{PALETTE[color % len(PALETTE)]}"/>'
            f"<title>{_e(name)}: {fmt(value)} {_e(unit)} ({share:.1%}){node_tip}</title>"
        )
        if w > 40:
            chars = int(w / 7)
            text = name if len(name) <= chars else name[: max(1, chars - 2)] + "…"
            parts.append(f'<text x="{x0 + 3:.1f}" y="{y + 15}" class="cl">{_e(text)}</text>')
        parts.append("</g>")
        children = node.get("children") or []
        scale = w / value if value else 0.0
        cx = x0
        for i, c in enumerate(children):
            cw = (c.get("value") or 0.0) * scale
            walk(c, cx, cw, level + 1, color + i + 1 if level == 0 else color)
            cx += cw

    walk(root, 0.0, float(width), 0, 0)
    parts.append("</svg>")
    return "".join(parts)


def _depth(node: dict[str, Any]) -> int:
    kids = node.get("children") or []
    return 1 + (max(_depth(c) for c in kids) if kids else 0)


def _legend(x: float, y: float, color: str, text: str) -> str:
    """A legend entry: a swatch, then the name in the series' colour."""
    return (
        f'<rect x="{x:.1f}" y="{y - 8:.1f}" width="10" height="10" fill="{color}"/>'
        f'<text class="legend" x="{x + 14:.1f}" y="{y + 1:.1f}" style="fill:{color}">'
        f"{_e(text)}</text>"
    )


def stacked_shares(
    chart_id: str,
    bars: Sequence[tuple[str, Sequence[tuple[str, float, str]]]],
    label: str,
    width: int = 760,
) -> str:
    """One 100 % horizontal bar per row: (name, segments (key, share 0-1, hover detail)),
    each segment a ``g.seg`` with ``data-key`` and ``data-share``; a key has one colour in
    every bar (``other`` grey), named in a legend under the bars. Empty markup without bars."""
    bars = [(name, segs) for name, segs in bars if segs]
    if not bars:
        return ""
    bar_h, gap, left, right = 24, 8, 90, 20
    keys: list[str] = []
    for _, segs in bars:
        keys += [k for k, _, _ in segs if k not in keys and k != "other"]
    colors = {k: PALETTE[i % (len(PALETTE) - 1)] for i, k in enumerate(keys)}
    colors["other"] = PALETTE[-1]
    if any(k == "other" for _, segs in bars for k, _, _ in segs):
        keys.append("other")
    per_row = max(1, (width - left) // 150)
    legend_rows = -(-len(keys) // per_row)
    top = 6
    height = top + len(bars) * (bar_h + gap) + legend_rows * 16 + 8
    span = width - left - right
    parts = [_open(chart_id, width, height, label)]
    for i, (name, segs) in enumerate(bars):
        y = top + i * (bar_h + gap)
        parts.append(
            f'<text x="{left - 6}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end" class="lbl">'
            f"{_e(name)}</text>"
        )
        total = sum(max(0.0, v) for _, v, _ in segs) or 1.0
        x = float(left)
        for key, value, detail in segs:
            w = max(0.0, value) / max(total, 1.0) * span
            text = f"{key} {value * 100:.0f}%"
            inside = (
                f'<text class="cl" x="{x + 4:.1f}" y="{y + bar_h / 2 + 4:.1f}">{_e(text)}</text>'
                if w > 7 * len(text) + 8
                else ""
            )
            parts.append(
                f'<g class="seg" data-bar="{_e(name)}" data-key="{_e(key)}" '
                f'data-share="{value:.6g}"><title>{_e(detail)}</title>'
                f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar_h}" '
                f'fill="{colors[key]}"/>{inside}</g>'
            )
            x += w
    y0 = top + len(bars) * (bar_h + gap) + 10
    for j, key in enumerate(keys):
        parts.append(
            _legend(left + (j % per_row) * 150, y0 + (j // per_row) * 16, colors[key], key)
        )
    parts.append("</svg>")
    return "".join(parts)


def xy_chart(
    chart_id: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    x_unit: str,
    y_unit: str,
    label: str,
    *,
    dots: Sequence[Sequence[str]] | None = None,
    marks: Sequence[tuple[float, float, str]] = (),
    y_range: tuple[float, float] | None = None,
    height: int = 240,
) -> str:
    """Lines (name, xs, ys) on linear axes, without the timeline's crosshair and zoom.

    ``dots``: one hover text per point of each series; each point is then drawn as a
    ``circle.pt``. ``marks``: (x, y, text) points ringed and labelled (a sweep's knee, as
    ``g.mark``). ``y_range``: fixed y limits (a CDF's 0-1); else 0 to the highest value."""
    width, left, right, bottom, top = 760, 60, 10, 30, 34
    xs_all = [v for _, xs, _ in series for v in xs]
    ys_all = [v for _, _, ys in series for v in ys]
    if not xs_all or not ys_all:
        return ""
    x_lo, x_hi = min(xs_all), max(xs_all)
    pad = (x_hi - x_lo) * 0.04 or max(abs(x_hi) * 0.1, 1e-9)
    x_lo, x_hi = x_lo - (pad if dots else 0.0), x_hi + pad
    if min(xs_all) >= 0:
        x_lo = max(0.0, x_lo)  # no negative ticks under figures that cannot be negative
    y_lo, y_hi = y_range or (0.0, max(ys_all) * 1.08 or 1.0)
    x = Axis(x_lo, x_hi, left, width - right)
    y = Axis(y_lo, y_hi, height - bottom, top)
    parts = [_open(chart_id, width, height, label)]
    for i, (name, xs, ys) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        dx, dy = downsample(xs, ys)
        pts = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in zip(dx, dy, strict=True))
        parts.append(
            f'<polyline class="series" data-name="{_e(name)}" fill="none" stroke="{color}" '
            f'stroke-width="1.5" points="{pts}"><title>{_e(name)}</title></polyline>'
        )
        hover = dots[i] if dots is not None and i < len(dots) else []
        for j, (a, b) in enumerate(zip(xs, ys, strict=True)):
            if j >= len(hover):
                break
            text = hover[j]
            parts.append(
                f'<circle class="pt" cx="{x(a):.1f}" cy="{y(b):.1f}" r="3.5" '
                f'style="fill:{color}"><title>{_e(name)}: {_e(text)}</title></circle>'
            )
        parts.append(_legend(left + 40 + i * 170, top - 12, color, name))
    for a, b, text in marks:
        # the label on the side of the ring with room for it (about 7 px per character)
        left_side = x(a) + 10 + 7 * len(text) > width
        tx, anchor = (x(a) - 10, "end") if left_side else (x(a) + 10, "start")
        parts.append(
            f'<g class="mark"><circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="8" fill="none" '
            f'stroke="#c0392b" stroke-width="2"/><text class="tick" x="{tx:.1f}" '
            f'y="{y(b) - 8:.1f}" text-anchor="{anchor}">{_e(text)}</text>'
            f"<title>{_e(text)}</title></g>"
        )
    parts.append(_x_axis(x, height - bottom, x_unit))
    parts.append(_y_axis(y, left, y_unit))
    parts.append("</svg>")
    return "".join(parts)


def cdf_series(values: Sequence[float], points: int = 400) -> tuple[list[float], list[float]]:
    """(values, cumulative fraction) of an empirical CDF, at most ``points`` quantiles."""
    s = sorted(values)
    n = len(s)
    if n == 0:
        return [], []
    if n <= points:
        return s, [(i + 1) / n for i in range(n)]
    idx = [round(k * (n - 1) / (points - 1)) for k in range(points)]
    return [s[i] for i in idx], [(i + 1) / n for i in idx]


@dataclass(frozen=True)
class RequestBar:
    """One request of a timeline, in seconds on the chart's axis: intended send (None when
    unknown), send, first generated token and end (None when unknown)."""

    request: int
    point: int
    intended: float | None
    sent: float
    first: float | None
    end: float | None
    failed: bool = False
    warmup: bool = False
    hover: str = ""


#: the segments of a request bar: (class, colour, legend)
REQUEST_SEGMENTS = (
    ("queued", "#bab0ac", "queued (intended to sent)"),
    ("prefill", PALETTE[1], "to first token"),
    ("decode", PALETTE[0], "decode (first token to end)"),
    ("failed", PALETTE[2], "failed"),
)


def request_timeline(
    chart_id: str,
    bars: Sequence[RequestBar],
    x_range: tuple[float, float],
    x_unit: str,
    label: str,
    bands: Sequence[tuple[float, float, str]] = (),
) -> str:
    """One row per request (``g.req``), top to bottom in the given order: grey from the
    intended send to the send (when later), orange to the first token, blue to the end; a
    failed request red from send to end; warmup requests faded. ``bands``: (x0, x1, label)
    shaded behind (the load points). Same margins as :func:`line_chart`, so the two align."""
    if not bars:
        return ""
    width, left, right, bottom, top = 760, 60, 10, 30, 26
    row = min(10.0, max(1.0, 560 / len(bars)))
    height = int(top + row * len(bars) + bottom) + 1
    x0, x1 = x_range
    x = Axis(x0, x1 if x1 > x0 else x0 + 1, left, width - right)
    base = height - bottom
    parts = [_open(chart_id, width, height, label)]
    for i, (b0, b1, text) in enumerate(bands):
        parts.append(
            f'<rect class="band" x="{x(b0):.1f}" y="{top}" width="{max(1.0, x(b1) - x(b0)):.1f}" '
            f'height="{base - top}" fill="{"#eef1f6" if i % 2 == 0 else "#f8f9fb"}">'
            f"<title>{_e(text)}</title></rect>"
        )
    colors = {name: color for name, color, _ in REQUEST_SEGMENTS}
    h = max(1.0, row * 0.8)
    for i, r in enumerate(bars):
        y0 = top + i * row
        segs: list[tuple[str, float, float]] = []
        if r.intended is not None and r.intended < r.sent:
            segs.append(("queued", r.intended, r.sent))
        if r.end is None:
            pass
        elif r.failed:
            segs.append(("failed", r.sent, r.end))
        elif r.first is not None:
            segs += [("prefill", r.sent, r.first), ("decode", r.first, r.end)]
        else:
            segs.append(("prefill", r.sent, r.end))
        fade = ' opacity="0.45"' if r.warmup else ""
        parts.append(
            f'<g class="req" data-point="{r.point}" data-request="{r.request}"{fade}>'
            f"<title>{_e(r.hover)}</title>"
        )
        for name, a, b in segs:
            parts.append(
                f'<rect class="{name}" x="{x(a):.2f}" y="{y0:.2f}" '
                f'width="{max(0.5, x(b) - x(a)):.2f}" height="{h:.2f}" fill="{colors[name]}"/>'
            )
        parts.append("</g>")
    for i, (_, color, text) in enumerate(REQUEST_SEGMENTS):
        parts.append(_legend(left + i * 170, top - 12, color, text))
    parts.append(_x_axis(x, base, x_unit))
    parts.append(
        f'<text class="unit" x="{left - 4}" y="{top + 10}" text-anchor="end">requests</text></svg>'
    )
    return "".join(parts)
