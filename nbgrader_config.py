"""nbgrader configuration: the repository root is the course directory.

nbgrader (the CLI, and the formgrader inside `make lab`) reads this file from the current working
directory, so run nbgrader commands from the repository root. Layout:

    solutions/<lesson>/*.ipynb   nbgrader source notebooks (solutions and tests)
    lessons/<lesson>/*.ipynb     release notebooks for learners, made by `make release`
"""

import os

c = get_config()  # noqa: F821 -- injected by traitlets when nbgrader loads this file

_here = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = _here
c.CourseDirectory.course_id = "attention"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "lessons"

# What a learner sees in place of a `### BEGIN SOLUTION ... ### END SOLUTION` region.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Released notebooks carry no outputs, execution counts or per-cell timing metadata.
c.ClearOutput.remove_metadata_fields = {"collapsed", "scrolled", "execution"}

# Autograding and validation run every cell with this limit (seconds); nbgrader's default is 30.
# nbgrader's Execute preprocessor subclasses ExecutePreprocessor, so this applies to both.
c.ExecutePreprocessor.timeout = 120
