"""``quiet()``: run learner code without letting it write to stderr.

Its own module, free of the checks, so the grader's sandbox can offer it to test cells without
offering the checks themselves.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator

import numpy as np


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """Run learner code without letting it write to stderr.

    Warnings (NumPy's RuntimeWarning for ``exp(-inf - -inf)``, say) are
    silenced and anything written to ``sys.stderr`` is kept in the yielded
    buffer. nbgrader gives zero points to a test cell that writes to stderr,
    and a correct answer that happens to warn must keep its points.
    """
    buffer = io.StringIO()
    with (
        warnings.catch_warnings(),
        np.errstate(all="ignore"),
        contextlib.redirect_stderr(buffer),
    ):
        warnings.simplefilter("ignore")
        yield buffer
