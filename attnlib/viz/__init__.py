"""attnlib.viz — figures and interactive explorers that make attention move.

Static figures (matplotlib):

* :func:`attention_heatmap` — weights ``(m, n)`` with token labels, annotated weights, row sums,
  masked keys hatched, one query row optionally highlighted (colour-blind-safe ``viridis``);
* :func:`matrix` — the same for any matrix (queries, keys, values, scores, outputs).

Explorers (ipywidgets 8 controls, the figure redrawn as a PNG on every change; every explorer has
a ``state`` dict the tests drive, and a static PNG for renderers without widgets):

* :class:`MaskToggle` — causal mask on/off (before or after the softmax) over the same scores;
* :class:`PermutationExplorer` — swap two tokens, with and without positional encoding;
* :class:`StepThrough` — tokens → Q/K/V → scores → scale → mask → softmax → output;
* :class:`TemperatureExplorer` — d_k, √d_k scaling and temperature versus saturation and gradient;
* :class:`HeadExplorer` — the attention maps of several heads;
* :class:`ComplexityExplorer` — FLOPs and bytes of attention as the length n grows.

ipywidgets is optional: without it the explorers run on stand-in controls and show their figure
as a plain image (``HAVE_WIDGETS`` says which).
"""

from ._controls import HAVE_WIDGETS
from .figures import attention_heatmap, matrix
from .inside import InsideExplorer, head_profile
from .training import LossPlot, plot_runs
from .widgets import (
    STEPS,
    ComplexityExplorer,
    Explorer,
    HeadExplorer,
    MaskToggle,
    PermutationExplorer,
    StepThrough,
    TemperatureExplorer,
    softmax_jacobian_norm,
)

__all__ = [
    "HAVE_WIDGETS",
    "STEPS",
    "ComplexityExplorer",
    "Explorer",
    "HeadExplorer",
    "MaskToggle",
    "PermutationExplorer",
    "StepThrough",
    "TemperatureExplorer",
    "attention_heatmap",
    "matrix",
    "softmax_jacobian_norm",
]
__all__ += ["InsideExplorer", "LossPlot", "head_profile", "plot_runs"]  # lesson 06
