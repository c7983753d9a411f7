"""Inline SVG charts for the page: pass rate by revision run after run, the monitor's path, span bars.

Plain SVG with presentation attributes (no ``style``, no script), so the page's CSP holds; every
label goes through ``esc``. Hover text is an SVG ``<title>``, which browsers show without script.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lousho.page.html import COLORS, Safe, el, join, when

if TYPE_CHECKING:  # the run page draws span bars without loading analysis (SciPy)
    from lousho.analysis.monitor_path import MonitorPath

_W, _H = 760, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 16, 14, 40


@dataclass(frozen=True)
class RateBin:
    """Runs ``start`` to ``start + scored`` in the chart's run order (revision after revision)."""

    start: int
    scored: int
    passes: int
    first_ns: int
    last_ns: int

    @property
    def rate(self) -> float:
        return self.passes / self.scored


def _frame(width: int, height: int, label: str, *parts: Safe) -> Safe:
    return el("svg", el("title", label), *parts, xmlns="http://www.w3.org/2000/svg", cls="chart",
              viewBox=f"0 0 {width} {height}", width=width, height=height, role="img", aria_label=label)


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, **attrs: object) -> Safe:
    return el("line", x1=f"{x1:.1f}", y1=f"{y1:.1f}", x2=f"{x2:.1f}", y2=f"{y2:.1f}", stroke=stroke, **attrs)


def _text(x: float, y: float, text: str, anchor: str = "middle", **attrs: object) -> Safe:
    return el("text", text, x=f"{x:.1f}", y=f"{y:.1f}", text_anchor=anchor, **attrs)


def pass_rate_chart(series: Sequence[tuple[str, Sequence[RateBin]]], total: int) -> Safe:
    """One coloured line per revision, side by side in the order of their first run: the pass rate of
    each bin of runs, placed by run index (``total`` runs across). Placing by time would leave the
    revisions as dots at the two edges of an empty middle when they ran minutes or days apart."""
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(index: float) -> float:
        return _LEFT + plot_w * index / max(total, 1)

    def y(rate: float) -> float:
        return _TOP + plot_h * (1 - rate)

    parts = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(_line(_LEFT, y(tick), _W - _RIGHT, y(tick), "#dde1ea"))
        parts.append(_text(_LEFT - 6, y(tick) + 4, f"{tick:.0%}", "end"))
    parts.append(_text(_LEFT + plot_w / 2, _H - 6, "scored runs in start order, revision after revision; "
                                                   "pass rate of each bin of runs"))
    for i, (revision, points) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        first = points[0]
        parts.append(_line(x(first.start), _TOP, x(first.start), _H - _BOTTOM, "#9aa3b5", stroke_dasharray="3 3"))
        parts.append(_text(x(first.start) + 4, _H - _BOTTOM + 16, f"{revision[:10]} · {when(first.first_ns)[:16]}",
                           "start", fill=color))
        coords = " ".join(f"{x(p.start + p.scored / 2):.1f},{y(p.rate):.1f}" for p in points)
        if len(points) > 1:
            parts.append(el("polyline", points=coords, fill="none", stroke=color, stroke_width=1.5))
        for p in points:
            hover = (f"{revision} · runs {p.start + 1}–{p.start + p.scored} · {when(p.first_ns)[:19]} to "
                     f"{when(p.last_ns)[:19]} · {p.passes}/{p.scored} passed ({p.rate:.0%})")
            parts.append(el("circle", el("title", hover), cx=f"{x(p.start + p.scored / 2):.1f}", cy=f"{y(p.rate):.1f}",
                            r=3.5, fill=color, data_revision=revision))
    return _frame(_W, _H, "pass rate by harness revision, by run", *parts)


def monitor_chart(path: MonitorPath) -> Safe:
    """The design's statistic (``path.statistic``) at each run count, the boundary at the looks, the looks."""
    boundary = path.config.boundary
    looks, bounds = boundary.looks, [b for b in boundary.z if math.isfinite(b)]
    zs = [p.z for p in path.points]
    z_lo, z_hi = min([-3.0, *zs]) - 0.3, max([*(b + 1.0 for b in bounds), 3.0, *zs]) + 0.3
    n_max = looks[-1]
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(n: float) -> float:
        return _LEFT + plot_w * n / n_max

    def y(z: float) -> float:
        return _TOP + plot_h * (z_hi - z) / (z_hi - z_lo)

    step = 1 if z_hi - z_lo <= 10 else 2 if z_hi - z_lo <= 20 else 5
    # Integer ticks, but none so close to 0 or a bound that the labels would overlap.
    ticks = [t for t in range(math.ceil(z_lo / step) * step, math.floor(z_hi) + 1, step)
             if t != 0 and all(abs(t - b) > 0.4 for b in bounds)]
    parts = [*(Safe(_line(x(0), y(t), x(n_max), y(t), "#eef0f5") + _text(_LEFT - 6, y(t) + 4, f"{t:g}", "end"))
               for t in ticks),
             _line(x(0), y(0), x(n_max), y(0), "#9aa3b5"), _text(_LEFT - 6, y(0) + 4, "0", "end")]
    parts.extend(_boundary(boundary.looks, boundary.z, x, y))
    drop = f" and drop > {boundary.min_drop:g}" if boundary.min_drop > 0 else ""
    said = f"{boundary.rule} boundary: roll back when z ≥ it at a look{drop}"
    parts.append(_text(x(n_max) - 4, _TOP + 12, said, "end", fill="#b3261e"))
    parts.append(_text(_LEFT + 4, _TOP + 12, path.statistic, "start", fill=COLORS[0]))
    for k, look in enumerate(looks, 1):
        parts.append(_line(x(look), _TOP, x(look), _H - _BOTTOM, "#dde1ea", stroke_dasharray="2 3"))
        parts.append(_text(x(look), _H - _BOTTOM + 16, f"look {k}: {look}", "end" if look == n_max else "middle"))
    parts.append(_text(_LEFT + plot_w / 2, _H - 6, path.run_axis))
    if len(path.points) > 1:
        coords = " ".join(f"{x(p.n):.1f},{y(p.z):.1f}" for p in path.points)
        parts.append(el("polyline", points=coords, fill="none", stroke=COLORS[0], stroke_width=2))
    for p in path.points:
        hover = (f"{p.n} base runs: base {p.base_passes}/{p.n}, applied {p.applied_passes}/{p.applied_runs}, "
                 f"drop {p.drop:+.3f}, z {p.z:.2f}")
        parts.append(el("circle", el("title", hover), cx=f"{x(p.n):.1f}", cy=f"{y(p.z):.1f}",
                        r=5 if p.look else 2, fill="#b3261e" if p.crosses else COLORS[0], data_z=f"{p.z!r}"))
    return _frame(_W, _H, f"monitor: {path.statistic} against the boundary", *parts)


def _boundary(looks: Sequence[int], bounds: Sequence[float], x: Callable[[float], float],
              y: Callable[[float], float]) -> list[Safe]:
    """One dashed line where every look has the same bound (the seeds' rule, Pocock); else a bar at each look
    (O'Brien–Fleming, spending), each labelled with its bound."""
    colour = "#b3261e"
    finite = [(look, b) for look, b in zip(looks, bounds, strict=True) if math.isfinite(b)]
    if len({b for _, b in finite}) == 1:
        bound = finite[0][1]
        return [_line(x(0), y(bound), x(looks[-1]), y(bound), colour, stroke_dasharray="6 4", stroke_width=1.5),
                _text(_LEFT - 6, y(bound) + 4, f"{bound:g}", "end", fill=colour)]
    width = (x(looks[-1]) - x(0)) / 20
    return [Safe(_line(x(look) - width, y(b), x(look), y(b), colour, stroke_width=2.5)
                 + _text(x(look) - width - 4, y(b) + 4, f"{b:.2f}", "end", fill=colour)) for look, b in finite]


def span_bar(start_ns: int, duration_ns: int, t0: int, total_ns: int, *, error: bool) -> Safe:
    """A waterfall bar: where the span sits in its trace."""
    width = 160
    left = width * (start_ns - t0) / total_ns if total_ns > 0 else 0
    span_w = max(1.0, width * duration_ns / total_ns) if total_ns > 0 else width
    return el("svg", el("rect", x=f"{left:.1f}", y=1, width=f"{min(span_w, width - left):.1f}", height=8,
                        fill="#b3261e" if error else COLORS[0]),
              xmlns="http://www.w3.org/2000/svg", cls="bar", width=width, height=10, viewBox=f"0 0 {width} 10")


def legend(names: Sequence[str]) -> Safe:
    return el("div", join(el("span", el("i", cls=f"swatch c{i % len(COLORS)}"), name)
                          for i, name in enumerate(names)), cls="legend")
