"""Looking inside a trained model: attention maps per layer and head, and a live loss plot.

* :class:`InsideExplorer` browses the attention weights of every layer and head of a model
  (``(n_layers, B, h, T, T)``, e.g. from ``GPT.attention_maps``): one map large, all of them
  small in a layers × heads grid, and a readout that measures what the chosen head does — its
  weight on the previous token, on the token after the earlier occurrence of the current one
  (induction, when the sequence repeats with a known period) and on the first position (a
  sink). Like every explorer of :mod:`attnlib.viz.widgets` it has ipywidgets controls, a
  ``state`` dict, and a static PNG for renderers without widgets.
* :class:`LossPlot` is a training callback (``train(..., callback=LossPlot())``) that redraws the
  loss curves in place while a model trains, and leaves the last picture behind as a PNG.

The maths is :mod:`attnlib.numpy`; nothing here uses a learner's exercise.
"""

from __future__ import annotations

import math

import numpy as np

from .. import numpy as an
from . import _controls
from .figures import HIGHLIGHT, WEIGHTS_CMAP, matrix
from .widgets import Explorer


def _as_maps(maps) -> np.ndarray:
    """Weights as a float array ``(n_layers, B, h, T, T)``."""
    if isinstance(maps, list | tuple):
        maps = [np.asarray(_plain(m), dtype=float) for m in maps]
        maps = np.stack(maps) if maps else np.zeros((0,))
    w = np.asarray(_plain(maps), dtype=float)
    if w.ndim == 4:  # (n_layers, h, T, T): one example
        w = w[:, None]
    if w.ndim != 5 or w.shape[-1] != w.shape[-2] or 0 in w.shape:
        raise ValueError(
            f"maps must be (n_layers, B, h, T, T) or (n_layers, h, T, T) with T > 0, got "
            f"shape {w.shape}"
        )
    return w


def _plain(x):
    """A tensor as a CPU NumPy array (anything else unchanged)."""
    if hasattr(x, "detach"):
        return x.detach().cpu().double().numpy()
    return x


def _label(token) -> str:
    """A position's label: a space shows as ␣, a newline as \\n, anything else as itself."""
    if not isinstance(token, str):
        return str(token)
    if token and not token.strip():
        return token.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t")
    return repr(token)[1:-1]


def head_profile(weights: np.ndarray, period: int | None = None) -> dict[str, np.ndarray]:
    """What each head does, measured on weights ``(..., h, T, T)``; every value ``(..., h)``.

    ``previous``: mean weight from query ``i`` to key ``i - 1`` (``i >= 1``); ``sink``: mean
    weight on key 0 (``i >= 1``); ``entropy``: mean row entropy in nats; ``induction``: the
    induction score of :func:`attnlib.numpy.induction_score` (only with ``period``).
    """
    w = np.asarray(weights, dtype=float)
    T = w.shape[-1]
    rows = np.arange(1, T)
    p = np.where(w > 0, w, 1.0)
    out = {
        "previous": w[..., rows, rows - 1].mean(-1) if T > 1 else np.zeros(w.shape[:-2]),
        "sink": w[..., 1:, 0].mean(-1) if T > 1 else np.ones(w.shape[:-2]),
        "entropy": -(w * np.log(p)).sum(-1).mean(-1),
    }
    if period is not None and 1 <= period < T:
        out["induction"] = an.induction_score(w, period)
    return out


class InsideExplorer(Explorer):
    """The attention maps of a model, layer by layer and head by head.

    Args:
      maps: weights ``(n_layers, B, h, T, T)`` (or ``(n_layers, h, T, T)``, or a list of
        ``(B, h, T, T)`` per layer); NumPy arrays or tensors.
      tokens: labels of the positions: one list for every example, or one list per example.
      period: when the sequences repeat with this period, the readout gives each head's
        induction score and the picture marks the induction diagonal (key ``i - period + 1``).
      layer, head, example: where to start.

    Controls: ``layer`` and ``head`` (Dropdowns), ``example`` (IntSlider, when ``B > 1``),
    ``guides`` (ToggleButton: dotted lines on the previous-token and induction diagonals).
    """

    css_class = "attnlib-inside"
    figsize = (10.5, 4.8)

    def __init__(self, maps, tokens=None, *, period=None, layer=0, head=0, example=0):
        super().__init__()
        self.maps = _as_maps(maps)
        L, B, h, T, _ = self.maps.shape
        if period is not None and not (isinstance(period, int) and 1 <= period < T):
            raise ValueError(f"period must be an int in [1, T = {T}), got {period!r}")
        self.period = period
        self._tokens = tokens
        for b in range(B):
            self._labels(b, T)  # wrong labels fail here, not at the first drawing
        self.profile = head_profile(self.maps, period)  # each (L, B, h)
        self.layer = _controls.dropdown(
            options=[(f"layer {i + 1}", i) for i in range(L)], value=layer, description="layer"
        )
        self.head = _controls.dropdown(
            options=[(f"head {i}", i) for i in range(h)], value=head, description="head"
        )
        self.example = _controls.int_slider(
            value=example, min=0, max=max(B - 1, 0), description="example", disabled=B == 1
        )
        self.guides = _controls.toggle(
            value=True,
            description="diagonal guides",
            tooltip="Dotted lines where a previous-token head and an induction head look",
        )
        controls = [self.layer, self.head] + ([self.example] if B > 1 else []) + [self.guides]
        self._start(controls)

    def _labels(self, b: int, T: int) -> list[str]:
        names = self._tokens
        if names is None:
            return [str(t) for t in range(T)]
        names = list(names)
        if names and isinstance(names[0], list | tuple):
            names = list(names[b])
        if len(names) != T:
            raise ValueError(f"{len(names)} token labels for T = {T} positions")
        return [_label(t) for t in names]

    def _compute(self) -> None:
        layer, head, b = self.layer.value, self.head.value, self.example.value
        self.current = self.maps[layer, b, head]  # (T, T)
        self.scores = {k: v[layer, :, head].mean() for k, v in self.profile.items()}  # over B
        self.grid = {k: v.mean(axis=1) for k, v in self.profile.items()}  # each (L, h)

    def _guide(self, ax, offset: int, T: int, label: str, style: str, colour: str) -> None:
        rows = np.arange(max(0, -offset), T)
        ax.plot(rows + offset, rows, style, color=colour, lw=1.3, label=label)

    def _draw(self, fig) -> None:
        L, B, h, T, _ = self.maps.shape
        layer, head, b = self.layer.value, self.head.value, self.example.value
        grid = fig.add_gridspec(L, 2 + h)
        big = fig.add_subplot(grid[:, :2])
        names = self._labels(b, T)
        show = T <= 24
        self.main_image = matrix(
            big, self.current, names if show else None, names if show else None,
            title=f"layer {layer + 1}, head {head}", cmap=WEIGHTS_CMAP, vmin=0.0, vmax=1.0,
            annotate=False, xlabel="keys (looked at)", ylabel="queries (looking)",
            fontsize=7,
        )  # fmt: skip
        fig.colorbar(self.main_image, ax=big, shrink=0.7, label="attention weight")
        if not show:  # too many positions to label each: every step-th, with its token
            step = max(1, math.ceil(T / 12))
            where = list(range(0, T, step))
            ticks = [str(i) if self._tokens is None else f"{i} {names[i]}" for i in where]
            big.set_xticks(where, ticks, rotation=90, fontsize=7)
            big.set_yticks(where, ticks, fontsize=7)
        if self.guides.value:
            self._guide(big, -1, T, "previous token", ":", "white")
            if self.period is not None:
                self._guide(big, 1 - self.period, T, "induction", "--", HIGHLIGHT)
            big.legend(loc="upper right", fontsize=7, framealpha=0.8)
        for i in range(L):
            for k in range(h):
                ax = fig.add_subplot(grid[i, 2 + k])
                ax.imshow(self.maps[i, b, k], cmap=WEIGHTS_CMAP, vmin=0, vmax=1)
                ax.set_xticks([])
                ax.set_yticks([])
                chosen = (i, k) == (layer, head)
                ax.set_title(f"L{i + 1} h{k}", fontsize=8, color=HIGHLIGHT if chosen else "black")
                for spine in ax.spines.values():
                    spine.set_edgecolor(HIGHLIGHT if chosen else "0.7")
                    spine.set_linewidth(3 if chosen else 0.8)

    def _lines(self) -> list[str]:
        layer, head = self.layer.value, self.head.value
        s = self.scores
        parts = [f"the previous token {s['previous']:.2f}"]
        if "induction" in s:
            parts.append(
                f"the token after the earlier occurrence (key i-{self.period - 1}) "
                f"{s['induction']:.2f}"
            )
        parts.append(f"the first position {s['sink']:.2f}")
        B = self.maps.shape[1]
        over = f" (mean over {B} examples)" if B > 1 else ""
        lines = [
            f"Layer {layer + 1}, head {head}: mean weight on {'; on '.join(parts)}{over}. "
            f"Row entropy {s['entropy']:.2f} nats "
            f"(uniform over all keys: {math.log(self.maps.shape[-1]):.2f}).",
        ]
        best = {}
        for key in ("previous", "induction", "sink"):
            if key in self.grid:
                i, k = np.unravel_index(int(np.argmax(self.grid[key])), self.grid[key].shape)
                best[key] = f"layer {i + 1} head {k} ({self.grid[key][i, k]:.2f})"
        lines.append(
            "Highest of all heads: " + "; ".join(f"{key}: {where}" for key, where in best.items())
        )
        return lines

    @property
    def state(self) -> dict:
        return {
            "layer": self.layer.value,
            "head": self.head.value,
            "example": self.example.value,
            "guides": bool(self.guides.value),
            "weights": self.current.copy(),
            "scores": {k: float(v) for k, v in self.scores.items()},
            "grid": {k: v.copy() for k, v in self.grid.items()},
        }


__all__ = ["InsideExplorer", "head_profile"]
