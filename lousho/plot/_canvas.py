"""Figures on matplotlib's Agg canvas, without pyplot: no global backend, no figure registry to leak.

Agg renders in-process to pixels, needs no display, and is what matplotlib itself uses to write PNGs.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lousho.plot.errors import BadOutput

# Formats matplotlib writes without extra libraries; the --out suffix picks one.
FORMATS = ("png", "svg", "pdf")
DPI = 120


def output_format(out: Path) -> str:
    """The format ``out``'s suffix names; checked before any store is read, so a typo fails fast."""
    suffix = out.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise BadOutput(f"{out}: unknown image suffix {out.suffix or '(none)'!r}; expected one of "
                        + ", ".join(f".{f}" for f in FORMATS))
    return suffix


def new_figure(width: float, height: float, rows: int = 1) -> tuple[Figure, list[Axes]]:
    """A figure of ``rows`` axes stacked on one shared x axis."""
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return figure, list(axes)


def save(figure: Figure, out: Path) -> Path:
    fmt = output_format(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, format=fmt)
    except OSError as e:  # a file where a directory must be, no permission, a full disk: the user's to fix
        raise BadOutput(f"cannot write {out}: {e.strerror or e}",
                        hint="give --out a path in a directory you can write") from None
    return out
