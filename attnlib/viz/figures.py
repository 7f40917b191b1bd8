"""Static figures: attention heatmaps and matrices with labelled rows and columns.

Everything draws on a matplotlib ``Axes``. Without one, :func:`attention_heatmap` makes a pyplot
figure (so a notebook shows it like any other plot); the explorers in
:mod:`attnlib.viz.widgets` draw on figures made by :func:`new_figure`, which pyplot does not know
about, so they are never shown twice. Colour maps are perceptually uniform and colour-blind safe:
``viridis`` for weights in [0, 1], ``cividis`` for signed quantities (vectors, scores).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

WEIGHTS_CMAP = "viridis"
SIGNED_CMAP = "cividis"
BLOCKED_COLOUR = "0.82"  # light grey: a key the mask forbids (drawn hatched, never a weight)
HIGHLIGHT = "#d55e00"  # vermillion (Okabe–Ito): stands out against every viridis/cividis colour


def new_figure(width: float, height: float) -> Figure:
    """A figure outside pyplot (never auto-displayed), drawn with the Agg canvas."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, facecolor="white")
    return buffer.getvalue()


def labels(names: Sequence[str] | None, count: int, prefix: str, what: str = "") -> list[str]:
    """``names`` as strings, or ``prefix0, prefix1, ...``; the count must match (``what``:
    the rows or columns they label, for the error)."""
    if names is None:
        return [f"{prefix}{i}" for i in range(count)]
    names = [str(name) for name in names]
    if len(names) != count:
        raise ValueError(f"{len(names)} labels for the {count} {what or 'rows'}; give one each")
    return names


def _text_colour(rgba) -> str:
    """Black on light cells, white on dark ones (relative luminance of the cell colour)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def matrix(
    ax,
    values,
    rows: Sequence[str] | None = None,
    cols: Sequence[str] | None = None,
    *,
    title: str | None = None,
    cmap: str = SIGNED_CMAP,
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool | None = None,
    fmt: str = "{:.2f}",
    blocked=None,
    highlight_row: int | None = None,
    row_sums: bool = False,
    xlabel: str | None = None,
    ylabel: str | None = None,
    fontsize: float | None = None,
):
    """Draw a 2-D array as coloured cells; return the image (``AxesImage``).

    ``blocked`` (boolean, same shape) marks cells a mask forbids: they are drawn light grey and
    hatched and labelled ``−∞`` or with their value. ``highlight_row`` outlines one row.
    ``row_sums`` writes each row's sum to the right of it. Signed data get symmetric limits.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 2:
        raise ValueError(f"matrix() draws a 2-D array, got shape {values.shape}")
    m, n = values.shape
    finite = values[np.isfinite(values)]
    if vmin is None or vmax is None:
        top = float(np.abs(finite).max()) if finite.size else 1.0
        top = top or 1.0
        vmin = -top if vmin is None else vmin
        vmax = top if vmax is None else vmax
    colours = colormaps[cmap]
    shown = np.ma.masked_invalid(values)
    if blocked is not None:
        blocked = np.broadcast_to(np.asarray(blocked, dtype=bool), values.shape)
        shown = np.ma.masked_where(blocked | ~np.isfinite(values), values)
    cmap_obj = colours.with_extremes(bad=BLOCKED_COLOUR)
    image = ax.imshow(shown, cmap=cmap_obj, vmin=vmin, vmax=vmax, aspect="auto")
    # imshow keeps the masked array; tests and callers read the plain numbers from here:
    image.attnlib_values = values
    if blocked is not None and blocked.any():
        for i, j in zip(*np.nonzero(blocked), strict=True):
            ax.add_patch(
                Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.6", lw=0)
            )
    if annotate is None:
        annotate = m * n <= 120
    size = fontsize or (9 if max(m, n) <= 6 else 7.5)
    if annotate:
        norm = Normalize(vmin=vmin, vmax=vmax)
        for i in range(m):
            for j in range(n):
                v = values[i, j]
                if blocked is not None and blocked[i, j]:
                    text, colour = ("−∞" if v == -np.inf else fmt.format(v)), "0.25"
                elif not np.isfinite(v):
                    text, colour = ("−∞" if v < 0 else "∞"), "0.25"
                else:
                    text, colour = fmt.format(v), _text_colour(colours(norm(v)))
                if text.startswith("-") and float(text) == 0:
                    text = text[1:]  # no "-0.00"
                ax.text(j, i, text, ha="center", va="center", fontsize=size, color=colour)
    if row_sums:
        sums = np.where(np.isfinite(values), values, 0.0).sum(axis=-1)
        ax.text(n - 0.5 + 0.25, -0.5, "Σ row", ha="left", va="bottom", fontsize=size)
        for i, total in enumerate(sums):
            ax.text(n - 0.5 + 0.25, i, f"{total:.2f}", ha="left", va="center", fontsize=size)
    if highlight_row is not None:
        ax.add_patch(
            Rectangle(
                (-0.5, highlight_row - 0.5),
                n,
                1,
                fill=False,
                edgecolor=HIGHLIGHT,
                lw=3,
                clip_on=False,
                zorder=5,
            )
        )
    rows = labels(rows, m, "q", f"rows of {values.shape}")
    cols = labels(cols, n, "k", f"columns of {values.shape}")
    long = max((len(c) for c in cols), default=0) > 3
    ax.set_xticks(
        range(n),
        cols,
        rotation=60 if long else 0,
        ha="right" if long else "center",
        rotation_mode="anchor",
        fontsize=size + 0.5,
    )
    ax.set_yticks(range(m), rows, fontsize=size + 0.5)
    if highlight_row is not None:
        tick = ax.get_yticklabels()[highlight_row]
        tick.set_color(HIGHLIGHT)
        tick.set_fontweight("bold")
    ax.tick_params(length=0)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    return image


def attention_heatmap(
    weights,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    *,
    ax=None,
    title: str | None = None,
    annotate: bool | None = None,
    row_sums: bool = True,
    blocked=None,
    highlight_row: int | None = None,
    cmap: str = WEIGHTS_CMAP,
):
    """Heatmap of attention weights ``(m, n)``: queries as rows, keys as columns.

    Cells are coloured on a fixed 0–1 scale (``viridis``; dark = 0, bright = 1), annotated with
    the weight when the matrix is small (``annotate``), with each row's sum written on its right.
    ``blocked`` marks keys a mask forbids; ``highlight_row`` outlines one query. Returns the
    ``Axes``; without ``ax`` a pyplot figure is made, so a notebook shows it.
    """
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"weights must be (m, n), got shape {weights.shape}")
    if ax is None:
        import matplotlib.pyplot as plt

        m, n = weights.shape
        _, ax = plt.subplots(figsize=(1.2 + 0.55 * n, 0.9 + 0.45 * m), layout="constrained")
    matrix(
        ax,
        weights,
        queries,
        keys,
        title=title,
        cmap=cmap,
        vmin=0.0,
        vmax=1.0,
        annotate=annotate,
        blocked=blocked,
        highlight_row=highlight_row,
        row_sums=row_sums,
        xlabel="keys",
        ylabel="queries",
    )
    return ax
