"""nbgrader configuration: the repository root is the course directory.

nbgrader (the CLI, and the formgrader inside `make lab`) reads this file from the current working
directory, so run nbgrader commands from the repository root. Layout:

    solutions/<lesson>/*.ipynb   nbgrader source notebooks (solutions and tests)
    lessons/<lesson>/*.ipynb     release notebooks for learners, made by `make release`
"""

import os

from autograder.nbgrader_plugin import trusted_pipeline
from autograder.notebook_format import mend_cell_ids_quietly
from autograder.validation import validate_within_bounds

c = get_config()  # noqa: F821 -- injected by traitlets when nbgrader loads this file

_here = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = _here
c.CourseDirectory.course_id = "attention"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "lessons"

# Files nbgrader never copies between the course's folders (its defaults, and hypothesis's
# example database, which running a notebook's checks in solutions/ leaves behind).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".hypothesis"]

# What a learner sees in place of a `### BEGIN SOLUTION ... ### END SOLUTION` region.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Released notebooks carry no outputs, execution counts or per-cell timing metadata.
c.ClearOutput.remove_metadata_fields = {"collapsed", "scrolled", "execution"}

# Autograding: nbgrader's own pipeline with two steps replaced (docs/grading.md). A submission
# holding links or special files is refused, and the notebook runs in attn-grade's sandbox, every
# graded cell's outputs written from verdicts reached outside it, so a notebook cannot display or
# forge its way to points. `attn-grade batch` grades with this same pipeline, in parallel.
trusted_pipeline(c)  # autograde in the sandbox, with the course's sanitizing steps
mend_cell_ids_quietly()  # nbformat's line for every repeated cell id it renews, left out

# Validate (the learner's button, `nbgrader validate`): nbgrader's own steps, after a check that
# refuses, in grading's words, a notebook that grading would refuse for its size or shape.
validate_within_bounds(c)

# Seconds per cell and per call of the learner's code (nbgrader's default is 30); `nbgrader
# validate` reads it too. Each notebook also has a budget for all its cells and checks together.
c.ExecutePreprocessor.timeout = 120
c.TrustedExecute.budget = 300

# Problems of each grading's own beside the checks' public ones, so that no answer can be a table
# of results recorded ahead; a learner's own check never meets them (docs/grading.md, "Secret
# problems"). None by default, for one verdict everywhere.
# c.TrustedExecute.secret_problems = 10

# Collecting (`nbgrader collect`, formgrader's Collect button): nbgrader's exchange is a folder
# every student can write to. The course's collect takes only what students' own `nbgrader submit`
# put there and sets aside, with a message, an entry in another account's name, a link, a named
# pipe or one over nbgrader's size limits, without stopping the rest of the class
# (docs/grading.md). Where every server runs as one account (Kubernetes), the hub gives each student
# a folder of their own in the exchange (c.StudentFolders.enabled, autograder/student_folders.py):
# the collect then reads those, releasing feedback writes into them, and `nbgrader list --inbound`
# lists them.
c.ExchangeFactory.collect = "autograder.collect.CheckedCollect"
c.ExchangeFactory.release_feedback = "autograder.student_folders.FolderReleaseFeedback"
c.ExchangeFactory.list = "autograder.student_folders.FolderList"
