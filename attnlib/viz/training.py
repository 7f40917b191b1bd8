"""Training curves for lesson 06: a live loss plot and several runs on one set of axes.

Plain matplotlib, nothing interactive: the grader's sandbox uses this module as it is, so a
graded notebook's feedback shows the same curves.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from .figures import HIGHLIGHT, figure_png, new_figure


class LossPlot:
    """A live plot of training (and validation) loss, redrawn in place while a model trains.

    Use it as the ``callback`` of :func:`attnlib.torch.train.train`: every call redraws the
    curves of the history it is given and, in a notebook, replaces the picture shown under the
    cell (one output, updated, never a pile of figures). Earlier runs added with :meth:`add`
    are drawn in grey for comparison; ``target`` draws a dotted line at a loss to reach.

    After training, :meth:`png` holds the last picture, and displaying the object shows it.
    """

    def __init__(self, title: str = "training loss", *, target: float | None = None,
                 figsize=(7.0, 3.4), dpi: int = 80, display: bool = True) -> None:  # fmt: skip
        self.title, self.target, self.dpi = title, target, dpi
        self.figure = new_figure(*figsize)
        self.others: list = []
        self.calls = 0
        self._png = b""
        self._handle = None
        self._display = display

    def add(self, history) -> LossPlot:
        """Draw a finished run (a ``History``) behind the live one."""
        self.others.append(history)
        return self

    def __call__(self, history) -> None:
        self.calls += 1
        self._redraw(history)
        if self._display:
            self._show()

    def _redraw(self, history) -> None:
        fig = self.figure
        fig.clear()
        ax = fig.add_subplot()
        for other in self.others:
            ax.plot(other.steps, other.smoothed(), color="0.7", lw=1, label=other.label or None)
        if history is not None and history.loss:
            ax.plot(history.steps, history.loss, color="0.85", lw=0.6)
            ax.plot(history.steps, history.smoothed(), color="0.2", lw=1.4,
                    label="training (mean of 50 steps)")  # fmt: skip
            if history.val_loss:
                ax.plot(history.val_steps, history.val_loss, "o-", color=HIGHLIGHT, ms=3,
                        label="validation")  # fmt: skip
            last = f"step {history.steps[-1]}: {history.smoothed()[-1]:.3f}"
            if history.val_loss:
                last += f", validation {history.val_loss[-1]:.3f}"
            ax.set_title(f"{self.title} — {last} ({history.seconds:.0f} s)", fontsize=10)
        else:
            ax.set_title(self.title, fontsize=10)
        if self.target is not None:
            ax.axhline(self.target, ls=":", color="0.4", lw=1, label=f"target {self.target:g}")
        ax.set(xlabel="step", ylabel="loss (nats per token)")
        ax.legend(frameon=False, fontsize=8)
        self._png = figure_png(fig, self.dpi)

    def _show(self) -> None:
        try:
            from IPython import get_ipython
            from IPython.display import Image, display
        except ImportError:  # pragma: no cover - IPython comes with the course
            return
        if get_ipython() is None:
            return
        image = Image(data=self._png, format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)

    def png(self) -> bytes:
        """The last picture as PNG bytes (drawn now if nothing was drawn yet)."""
        if not self._png:
            self._redraw(None)
        return self._png

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {
            "text/plain": f"LossPlot({self.title!r}, {self.calls} updates)",
            "image/png": base64.b64encode(self.png()).decode("ascii"),
        }


def plot_runs(ax, histories: Sequence, *, smooth: int = 50, val: bool = False) -> None:
    """Loss curves of several runs (``History`` objects) on one ``Axes``, labelled by run."""
    for history in histories:
        if val and history.val_loss:
            ax.plot(history.val_steps, history.val_loss, "o-", ms=3, label=history.label)
        else:
            ax.plot(history.steps, history.smoothed(smooth), label=history.label)
    ax.set(xlabel="step", ylabel="loss (nats per token)")
    ax.legend(frameon=False, fontsize=8)


__all__ = ["LossPlot", "plot_runs"]
