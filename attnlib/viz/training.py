"""Training curves for lesson 06: a live loss plot and several runs on one set of axes.

Plain matplotlib, nothing interactive: the grader's sandbox uses this module as it is, so a
graded notebook's feedback shows the same curves.
"""

from __future__ import annotations

import base64
import math
import os
import time
from collections.abc import Sequence

from .figures import HIGHLIGHT, figure_png, new_figure


class LossPlot:
    """A live plot of training (and validation) loss, redrawn in place while a model trains.

    Use it as the ``callback`` of :func:`attnlib.torch.train.train`: each call hands it the
    history so far, and in a notebook the picture under the cell is replaced (one output,
    updated, never a pile of figures). Earlier runs added with :meth:`add` are drawn in grey
    for comparison; ``target`` draws a dotted line at a loss to reach.

    Drawing takes a good part of a second of CPU, so the picture is redrawn at most once
    every ``every`` seconds while the model trains, and what came after the last drawing is
    drawn once the cell ends. A run nobody watches (``live=False``; by default, a grader's
    run, which sets ``NBGRADER_EXECUTION``) draws it only then: the notebook it leaves shows
    the same last picture either way.

    After training, :meth:`png` holds the last picture, and displaying the object shows it.
    """

    def __init__(self, title: str = "training loss", *, target: float | None = None,
                 figsize=(7.0, 3.4), dpi: int = 80, display: bool = True, every: float = 1.0,
                 live: bool | None = None) -> None:  # fmt: skip
        if not (isinstance(every, (int, float)) and every >= 0):
            raise ValueError(f"LossPlot: every is the seconds between two drawings, not {every!r}")
        self.title, self.target, self.dpi, self.every = title, target, dpi, every
        self.live = not os.environ.get("NBGRADER_EXECUTION") if live is None else live
        self._figure = new_figure(*figsize)
        self.others: list = []
        self.calls = 0  # histories handed over
        self.draws = 0  # pictures drawn
        self._history = None  # the last history handed over
        self._stale = True  # the figure lacks what was last handed over
        self._unshown = False  # so does the picture under the cell
        self._drawn_at = -math.inf  # time.monotonic() when the last drawing ended
        self._waiting = None  # the cell's end, once a drawing waits for it
        self._png = b""
        self._handle = None
        self._display = display

    @property
    def figure(self):
        """The matplotlib figure, drawn up to the last history handed over."""
        if self._stale:
            self._redraw(self._history)
        return self._figure

    def add(self, history) -> LossPlot:
        """Draw a finished run (a ``History``) behind the live one."""
        self.others.append(history)
        self._stale = True
        return self

    def __call__(self, history) -> None:
        self.calls += 1
        self._history, self._stale, self._unshown = history, True, self._display
        if self.live and time.monotonic() - self._drawn_at >= self.every:
            self._draw()
        else:
            self._hold_the_place()
            self._draw_when_the_cell_ends()

    def _draw(self) -> None:
        if self._stale:
            self._redraw(self._history)
        if self._display:
            self._show()
        self._unshown, self._drawn_at = False, time.monotonic()

    def _hold_the_place(self) -> None:
        """Show a line where the picture will be, so that it comes before what the cell prints
        after it, as a live one does."""
        if self._display and self._handle is None and _shell() is not None:
            from IPython.display import display

            note = {"text/plain": f"{self.title}: drawn when the cell ends"}
            self._handle = display(note, raw=True, display_id=True)

    def _draw_when_the_cell_ends(self) -> None:
        """Have IPython draw what is waiting once the running cell ends (outside IPython it is
        drawn when :meth:`png` or :attr:`figure` is asked for)."""
        shell = _shell()
        if shell is None or self._waiting is not None:
            return

        def cell_ended() -> None:
            shell.events.unregister("post_execute", cell_ended)
            self._waiting = None
            if self._unshown:
                self._draw()

        self._waiting = cell_ended
        shell.events.register("post_execute", cell_ended)

    def _redraw(self, history) -> None:
        fig = self._figure
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
        self._stale = False
        self.draws += 1

    def _show(self) -> None:
        if _shell() is None:
            return
        from IPython.display import Image, display

        image = Image(data=self._png, format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)

    def png(self) -> bytes:
        """The last picture as PNG bytes (drawn now if it lacks the last history)."""
        if self._stale:
            self._redraw(self._history)
        return self._png

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {
            "text/plain": f"LossPlot({self.title!r}, {self.calls} updates)",
            "image/png": base64.b64encode(self.png()).decode("ascii"),
        }


def _shell():
    """The running IPython shell, or None (plain Python)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the course
        return None
    return get_ipython()


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
