"""nbgrader's Validate (the learner's button, ``nbgrader validate``), judging as grading does.

nbgrader's Validate runs a notebook in a kernel and reports its test cells. It knew nothing of
what grading refuses before running anything: a notebook beyond the submission's bounds
(:func:`submission.saved_problems`) or one the notebook format does not allow
(:func:`notebook_format.schema_problems`). It said "Success!" of such a notebook, and the learner
heard otherwise from the gradebook. :class:`CheckBounds`, Validate's first step, refuses it in
grading's words. This module is light on purpose: the hub's configuration, which every student's
server and nbgrader command loads, imports it (``deploy/jupyter/common/nbgrader_config.py``).
"""

from __future__ import annotations

import textwrap

from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, Execute, NbGraderPreprocessor
from nbgrader.validator import Validator

from . import notebook_format, submission


class CheckBounds(NbGraderPreprocessor):
    """First of Validate's steps (:data:`VALIDATE`): a notebook that grading would refuse (for
    its size or shape, or as no valid notebook) is refused, in grading's words, before a kernel
    runs it.

    The button shows the traceback of what Validate raised in a box of fixed width, so the words
    start on a line of their own, wrapped to :data:`WIDTH`.
    """

    WIDTH = 80

    def preprocess(self, nb, resources):
        # Validate gets the notebook read, not its path: its name is not known here
        found = submission.saved_problems(nb, "the notebook")
        found = found or notebook_format.schema_problems(nb, "the notebook")
        if found:
            why = f"This notebook would not be graded: {'; '.join(found)}"
            raise submission.Refused("\n" + "\n".join(textwrap.wrap(why, self.WIDTH)))
        return nb, resources


# Validate's steps (``Validator.preprocessors``): nbgrader's own, after the bounds
VALIDATE = [CheckBounds, CheckCellMetadata, ClearOutput, Execute]


def validate_within_bounds(c) -> None:
    """Make nbgrader's Validate run :data:`VALIDATE`, in config ``c``. nbgrader keeps Validate's
    steps in a trait its config cannot set (``Validator.preprocessors`` is not tagged
    ``config=True``, unlike the converters' lists), so that trait is tagged first;
    ``tests/test_one_verdict.py`` fails if nbgrader changes it."""
    Validator.class_traits()["preprocessors"].tag(config=True)
    c.Validator.preprocessors = VALIDATE
