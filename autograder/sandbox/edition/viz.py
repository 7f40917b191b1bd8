"""attnlib.viz while a notebook is graded: the explorers are for JupyterLab.

Each explorer shows one line saying so; the static figures are attnlib's own.
"""

from __future__ import annotations

from .figures import attention_heatmap, matrix
from .training import LossPlot, plot_runs

HAVE_WIDGETS = False
STEPS: tuple[str, ...] = ()


class Explorer:
    """A stand-in for an interactive explorer while the notebook is graded."""

    def __init__(self, *args, **kwargs):
        self.state: dict = {}

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(f"[{type(self).__name__}: an interactive explorer; open the lesson in JupyterLab]")


class MaskToggle(Explorer):
    pass


class PermutationExplorer(Explorer):
    pass


class StepThrough(Explorer):
    pass


class TemperatureExplorer(Explorer):
    pass


class HeadExplorer(Explorer):
    pass


class ComplexityExplorer(Explorer):
    pass


class InsideExplorer(Explorer):
    pass


def softmax_jacobian_norm(*args, **kwargs) -> float:
    raise RuntimeError("softmax_jacobian_norm is not available while a notebook is graded")


__all__ = [
    "HAVE_WIDGETS",
    "STEPS",
    "ComplexityExplorer",
    "Explorer",
    "HeadExplorer",
    "InsideExplorer",
    "LossPlot",
    "MaskToggle",
    "PermutationExplorer",
    "StepThrough",
    "TemperatureExplorer",
    "attention_heatmap",
    "matrix",
    "plot_runs",
    "softmax_jacobian_norm",
]
