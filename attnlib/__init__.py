"""attnlib — attention mechanisms, taught and graded.

* :mod:`attnlib.numpy` — the readable NumPy reference of every exercise;
* :mod:`attnlib.torch` — the same names on tensors, on any device, differentiable;
* :mod:`attnlib.checks` — invariant probes and bug diagnosis used by the lessons and the grader.

Import the backend you need (``import attnlib.numpy as an``); importing
``attnlib`` alone loads neither NumPy nor PyTorch.
"""

__version__ = "0.1.0"
